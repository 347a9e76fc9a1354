"""SAM with Polyak step sizes (deterministic and stochastic), as a train-step helper plus an optax scaling.

Paper: Oikonomou, Loizou, "Adaptive Sharpness-Aware Minimization with a Polyak-type Step size" (ICML 2026,
arXiv 2606.01827). Step-size formulas from a public summary of the
paper (no official code); the SPS_max constant c is a **[RECONSTRUCTION]** (exposed, default 1).

With θ the parameters, S a minibatch (the full data set for the deterministic variant) and ρ ≥ 0:

    ascent point      e = θ + ρ ∇f_S(θ)/‖∇f_S(θ)‖   (SAM, normalize=True)   or   θ + ρ ∇f_S(θ)   (USAM)
    descent gradient  g = ∇f_S(e)
    Polyak step       γ = min{ [f_S(e) − f* − ⟨g, e − θ⟩]_+ / (c ‖g‖²),  γ_b }
    update            θ ← θ − γ g

Why: ‖θ' − θ*‖² = ‖θ − θ*‖² − 2γ⟨g, θ − θ*⟩ + γ²‖g‖², and convexity at e gives
⟨g, θ − θ*⟩ ≥ f(e) − f* − ⟨g, e − θ⟩; minimising the bound over γ gives the step (c = 1).
Deterministic variant: full-batch f, no cap (γ_b = ∞), c = 1. Stochastic: minibatch, cap γ_b, c.
With ρ = 0, e = θ and the inner product vanishes: the step is `optax.polyak_sgd(variant="sps+")`.

`sam_polyak_grads` makes the two forward-backward passes (both on the same batch); the transformation
`scale_by_sam_polyak` takes the loss value at e and the perturbation e − θ as extra update arguments
(`optax.GradientTransformationExtraArgs`); `sam_polyak_step` joins them into one pure train step.
BatchNorm-style statistics must not be updated at e: give `loss_fn` a frozen-statistics forward.

Plain SAM (Foret et al., 2021), the baseline the paper compares against, reuses the same two passes and
feeds g = ∇f_S(e) to a base optimizer with a hand-set learning rate η: θ ← θ − η g (`sam_sgd`, optionally
with heavy-ball momentum; `sam_step`). Both are registered for the trainer: `optim.name="sam_polyak"`
(cap γ_b = the schedule) and `optim.name="sam"` (η = the schedule), with `optim.options=(("rho", ρ),)`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from icml26zoo.optim.builtin import decay_mask
from icml26zoo.optim.hparams import as_float32, check_concrete, concrete_value, optimizer_options
from icml26zoo.registry import register_optimizer
from icml26zoo.validation import check_non_negative, check_positive, check_unit_interval

DEFAULT_RHO = 0.05  # the CIFAR-scale SAM default radius
# A squared gradient norm at or below this counts as a zero gradient (step 0), as in optax.scale_by_polyak.
_ZERO_GRAD_SQ_NORM = float(jnp.finfo(float).eps)


class SamPolyakGrads(NamedTuple):
    """The two-pass quantities on one batch: grad = ∇f_S(e) (param tree), value = f_S(e) (float32 []),
    perturbation = e − θ (param tree), loss = f_S(θ) (float32 [], free from the first pass)."""

    grad: Any
    value: jax.Array
    perturbation: Any
    loss: jax.Array


class ScaleBySamPolyakState(NamedTuple):
    """count: int32 [], steps taken (reads a scheduled cap γ_b)."""

    count: jax.Array


def _scalar(value: Any, count: jax.Array) -> jax.Array:
    """A hyperparameter or schedule evaluated at `count`, as float32 []."""
    return as_float32(value(count) if callable(value) else value)


def _float32(tree: Any) -> Any:
    return jax.tree.map(lambda x: x.astype(jnp.float32), tree)


def _tree_sq_norm32(tree: Any) -> jax.Array:
    """‖tree‖² in float32, by optax's own reduction (so that ρ = 0 reproduces optax.polyak_sgd exactly)."""
    return optax.tree.norm(_float32(tree), squared=True)


def _tree_vdot32(a: Any, b: Any) -> jax.Array:
    """Σ over leaves of ⟨a, b⟩, accumulated in float32."""
    return jnp.asarray(optax.tree.vdot(_float32(a), _float32(b)), jnp.float32)


def sam_polyak_grads(
    loss_fn: Callable[[Any, Any], jax.Array], params: Any, batch: Any, rho: float, normalize: bool = True,
    eps: float = 1e-12,
) -> SamPolyakGrads:
    """Two forward-backward passes of `loss_fn(params, batch) -> scalar` on the same batch: SAM's
    perturbation, shared by SAM-Polyak and plain SAM (`sam_step`, the registered `sam`).

    Pass 1 at θ gives f_S(θ) and ∇f_S(θ); the ascent point is e = θ + s ∇f_S(θ) with
    s = ρ/(‖∇f_S(θ)‖ + eps) (SAM) or s = ρ (USAM); pass 2 at e gives f_S(e) and g = ∇f_S(e).
    """
    check_concrete(check_non_negative, "rho", rho)
    loss, ascent = jax.value_and_grad(loss_fn)(params, batch)
    norm = jnp.sqrt(_tree_sq_norm32(ascent))
    scale = as_float32(rho) / (norm + eps) if normalize else as_float32(rho)
    # e − θ is formed directly (not as e − θ), so ρ = 0 gives e = θ exactly.
    perturbation = jax.tree.map(lambda g: (scale * g.astype(jnp.float32)).astype(g.dtype), ascent)
    perturbed = jax.tree.map(lambda p, d: p + d, params, perturbation)
    value, grad = jax.value_and_grad(loss_fn)(perturbed, batch)
    return SamPolyakGrads(grad, as_float32(value), perturbation, as_float32(loss))


def scale_by_sam_polyak(
    f_min: float = 0.0, max_learning_rate: optax.ScalarOrSchedule = 1.0, c: float = 1.0, eps: float = 1e-12,
    clamp: bool = True,
) -> optax.GradientTransformationExtraArgs:
    """Scales g = ∇f(e) by γ = min([f(e) − f_min − ⟨g, e − θ⟩]_+ / (c(‖g‖² + eps)), γ_b).

    `update(g, state, params=None, *, value, perturbation=None)`: `value` = f(e) (scalar), `perturbation`
    = e − θ (param tree; None means ρ = 0). Returns γ g (optax sign convention: negate downstream, e.g.
    with `optax.scale_by_learning_rate`). `max_learning_rate` γ_b may be a schedule of the step count.
    `clamp=False` drops the [·]_+ (redundant for USAM with ρ ≤ 1/L), letting γ go negative.
    """
    check_concrete(check_non_negative, "max_learning_rate", max_learning_rate)
    check_concrete(check_positive, "c", c)
    check_concrete(check_non_negative, "eps", eps)

    def init_fn(params):
        del params
        return ScaleBySamPolyakState(count=jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None, *, value, perturbation=None, **extra_args):
        del params, extra_args
        sq_norm = _tree_sq_norm32(updates)
        gap = as_float32(value) - as_float32(f_min)
        if perturbation is not None:
            gap = gap - _tree_vdot32(updates, perturbation)
        if clamp:
            gap = jnp.maximum(gap, 0.0)
        cap = _scalar(max_learning_rate, state.count)
        step = jnp.minimum(gap / (as_float32(c) * (sq_norm + as_float32(eps))), cap)
        step = jnp.where(sq_norm + as_float32(eps) <= _ZERO_GRAD_SQ_NORM, 0.0, step)
        scaled = jax.tree.map(lambda g: step.astype(g.dtype) * g, updates)
        return scaled, ScaleBySamPolyakState(count=optax.safe_increment(state.count))

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


class DecayTimesRateState(NamedTuple):
    """count: int32 [], steps taken (reads a scheduled rate)."""

    count: jax.Array


def _add_decay_times_rate(weight_decay: float, rate: optax.ScalarOrSchedule, mask: Any) -> Any:
    """u ← u + λ γ_b(t) θ: decoupled weight decay scaled by the step cap, as AdamW scales it by η."""

    def init_fn(params):
        del params
        return DecayTimesRateState(count=jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params):
        decay = as_float32(weight_decay)
        # λ = 0 must stay exactly 0 under an infinite cap (the deterministic variant): 0 · ∞ is NaN.
        factor = jnp.where(decay == 0, 0.0, decay * _scalar(rate, state.count))
        updates = jax.tree.map(lambda u, p: u + factor.astype(u.dtype) * p, updates, params)
        return updates, DecayTimesRateState(count=optax.safe_increment(state.count))

    decay = optax.GradientTransformation(init_fn, update_fn)
    return decay if mask is None else optax.masked(decay, mask)


def sam_polyak(
    learning_rate: optax.ScalarOrSchedule = 1.0, f_min: float = 0.0, c: float = 1.0, eps: float = 1e-12,
    clamp: bool = True, weight_decay: float = 0.0, mask: Any = None,
) -> optax.GradientTransformationExtraArgs:
    """Stochastic SAM-Polyak: θ ← θ − γ g − λ γ_b θ with γ as in `scale_by_sam_polyak` and cap γ_b =
    `learning_rate` (a float or schedule: the trainer's learning-rate schedule bounds the Polyak step).

    Needs `value=` and `perturbation=` at update (see `sam_polyak_step`). With weight_decay = 0 and
    perturbation None it equals `optax.polyak_sgd(max_learning_rate=learning_rate, f_min=f_min,
    eps=eps, variant="sps+")`. The deterministic variant is `learning_rate=jnp.inf` on full-batch losses.
    """
    check_concrete(check_non_negative, "learning_rate", learning_rate)
    check_concrete(check_non_negative, "weight_decay", weight_decay)
    return optax.chain(
        scale_by_sam_polyak(f_min, learning_rate, c, eps, clamp),
        _add_decay_times_rate(weight_decay, learning_rate, mask),
        optax.scale_by_learning_rate(1.0),
    )


def sam_polyak_step(
    loss_fn: Callable[[Any, Any], jax.Array], optimizer: optax.GradientTransformationExtraArgs, params: Any,
    batch: Any, opt_state: Any, *, rho: float = DEFAULT_RHO, normalize: bool = True,
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One SAM-Polyak step: (params, opt_state) → (params', opt_state', metrics), pure and jit-able.

    Exactly two forward-backward passes of `loss_fn` on `batch`. metrics: "loss" f_S(θ), "sam_loss" f_S(e)
    and "step_size" ‖update‖/‖g‖ (0 means the clamp fired; monitor the fraction of zero steps).
    """
    two_pass = sam_polyak_grads(loss_fn, params, batch, rho, normalize)
    updates, opt_state = optimizer.update(
        two_pass.grad, opt_state, params, value=two_pass.value, perturbation=two_pass.perturbation
    )
    grad_norm = jnp.sqrt(_tree_sq_norm32(two_pass.grad))
    step_size = jnp.sqrt(_tree_sq_norm32(updates)) / jnp.maximum(grad_norm, 1e-30)
    metrics = {"loss": two_pass.loss, "sam_loss": two_pass.value, "step_size": step_size}
    return optax.apply_updates(params, updates), opt_state, metrics


@dataclasses.dataclass(frozen=True)
class SamPolyakOptions:
    """The registered `sam_polyak` optimizer's `optim.options`: SAM radius rho, Polyak's f_min and c."""

    rho: float = DEFAULT_RHO
    f_min: float = 0.0
    c: float = 1.0


def rho_from_config(cfg: Any) -> float:
    """The SAM radius ρ of a train config (`optim.options=(("rho", 0.05),)`), validated."""
    rho = optimizer_options(cfg, "sam_polyak", SamPolyakOptions).rho
    check_concrete(check_non_negative, "rho", rho)
    return float(rho)


def two_pass_update(rho: float, *, polyak: bool) -> Callable:
    """The trainer's update for SAM-type optimizers (see train.step): two passes on the batch
    (`sam_polyak_grads`), then the optimizer's step on g = ∇f_S(e); `polyak` also hands it the loss at e
    and the perturbation e − θ (SAM-Polyak), otherwise it gets g alone (plain SAM's base optimizer).
    Returns `update(loss_fn, params, batch, opt_state, optimizer) -> (f_S(θ), g, updates, opt_state)`."""
    check_concrete(check_non_negative, "rho", rho)

    def update(
        loss_fn: Callable[[Any, Any], jax.Array], params: Any, batch: Any, opt_state: Any,
        optimizer: optax.GradientTransformation,
    ) -> tuple[jax.Array, Any, Any, Any]:
        two_pass = sam_polyak_grads(loss_fn, params, batch, rho)
        if polyak:
            updates, opt_state = optimizer.update(
                two_pass.grad, opt_state, params, value=two_pass.value, perturbation=two_pass.perturbation
            )
        else:
            updates, opt_state = optimizer.update(two_pass.grad, opt_state, params)
        return two_pass.loss, two_pass.grad, updates, opt_state

    return update


def _sam_polyak_update(cfg: Any) -> Callable:
    """The registered `sam_polyak`'s update: two passes, then the Polyak-scaled step."""
    return two_pass_update(rho_from_config(cfg), polyak=True)


# SAM needs two gradients per step, so it declares its own update: the shared train step runs it instead
# of its default single value_and_grad.
@register_optimizer("sam_polyak", update=_sam_polyak_update)
def _sam_polyak_factory(learning_rate: optax.ScalarOrSchedule, cfg: Any) -> optax.GradientTransformationExtraArgs:
    """Stochastic SAM-Polyak with the schedule as cap γ_b; options rho, f_min, c; decay on matrices.

    The trainer must call `sam_polyak_step(loss_fn, optimizer, ..., rho=rho_from_config(cfg))`: a plain
    `optimizer.update(grads, state, params)` lacks the `value=` the Polyak step needs.
    """
    rho_from_config(cfg)
    options = optimizer_options(cfg, "sam_polyak", SamPolyakOptions)
    return sam_polyak(
        learning_rate, f_min=options.f_min, c=options.c,
        weight_decay=cfg.weight_decay, mask=decay_mask,
    )


def _check_learning_rate(learning_rate: optax.ScalarOrSchedule) -> None:
    """η finite and > 0 for a constant; a schedule may start at 0 (warmup) but never below it."""
    if callable(learning_rate):
        check_concrete(check_non_negative, "learning_rate", learning_rate)
        return
    number = concrete_value(learning_rate)
    if number is not None and not (number > 0 and math.isfinite(number)):
        raise ValueError(f"learning_rate must be a finite number > 0, got {number!r}")


def sam_sgd(
    learning_rate: optax.ScalarOrSchedule, momentum: float = 0.0, weight_decay: float = 0.0, mask: Any = None,
) -> optax.GradientTransformation:
    """Plain SAM's base step on g = ∇f(e): θ ← θ − η (g + λθ) (heavy ball on g + λθ when momentum > 0).

    Fed the gradient at the ascent point by `sam_step` / the registered `sam`; fed ∇f(θ) (ρ = 0) it is
    plain SGD. learning_rate η: a constant > 0 or a schedule (>= 0, e.g. a warmup from 0); momentum in
    [0, 1); weight_decay λ >= 0, applied where `mask` is True (all parameters for None).
    """
    _check_learning_rate(learning_rate)
    check_concrete(check_unit_interval, "momentum", momentum)
    check_concrete(check_non_negative, "weight_decay", weight_decay)
    return optax.chain(
        optax.add_decayed_weights(weight_decay, mask=mask),
        optax.sgd(learning_rate, momentum=momentum or None),
    )


def sam_step(
    loss_fn: Callable[[Any, Any], jax.Array], optimizer: optax.GradientTransformation, params: Any, batch: Any,
    opt_state: Any, *, rho: float = DEFAULT_RHO, normalize: bool = True,
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One plain SAM step: the base `optimizer` (e.g. `sam_sgd`) applied to g = ∇f_S(θ + ρ∇f_S/‖∇f_S‖).

    Exactly two forward-backward passes on `batch` (`sam_polyak_grads`); metrics "loss" f_S(θ) and
    "sam_loss" f_S(e). Returns (params', opt_state', metrics), pure and jit-able.
    """
    two_pass = sam_polyak_grads(loss_fn, params, batch, rho, normalize)
    updates, opt_state = optimizer.update(two_pass.grad, opt_state, params)
    metrics = {"loss": two_pass.loss, "sam_loss": two_pass.value}
    return optax.apply_updates(params, updates), opt_state, metrics


@dataclasses.dataclass(frozen=True)
class SamOptions:
    """The registered `sam` optimizer's `optim.options`: SAM radius rho and the base SGD's momentum."""

    rho: float = DEFAULT_RHO
    momentum: float = 0.0


def sam_options(cfg: Any) -> SamOptions:
    """The validated `sam` options of a train config (`optim.options=(("rho", 0.05), ("momentum", 0.9))`)."""
    options = optimizer_options(cfg, "sam", SamOptions)
    check_concrete(check_non_negative, "rho", options.rho)
    check_concrete(check_unit_interval, "momentum", options.momentum)
    return options


def _sam_update(cfg: Any) -> Callable:
    """The registered `sam`'s update: two passes, then the base SGD step on g = ∇f_S(e)."""
    return two_pass_update(float(sam_options(cfg).rho), polyak=False)


@register_optimizer("sam", update=_sam_update)
def _sam_factory(learning_rate: optax.ScalarOrSchedule, cfg: Any) -> optax.GradientTransformation:
    """Plain SAM: `sam_sgd` with the schedule as η, options rho and momentum, decay on matrices."""
    options = sam_options(cfg)
    return sam_sgd(learning_rate, momentum=options.momentum, weight_decay=cfg.weight_decay, mask=decay_mask)
