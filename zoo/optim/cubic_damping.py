"""Cubic-damped momentum SGD and Adam (kinetic-energy friction), as optax GradientTransformations.

Paper: Karoni, Rajpal, Leimkuhler, Stoltz, "Adaptive Momentum and Nonlinear Damping for Neural Network
Training" (ICML 2026, arXiv 2602.00334).

**[RECONSTRUCTION]** The paper's discrete rules were not readable; these are a reconstruction.
The continuous dynamics are, per coordinate,

    dx = p dt,    dp = −∇f(x) dt − γ p dt − α p³ dt,

i.e. friction γ + α p² that grows with the coordinate's kinetic energy. Each step splits into the usual
momentum step and the *exact* flow of dp/dt = −α p³ over one step, p ← p / sqrt(1 + 2 α h p²) (explicit
Euler on the cubic term is unstable for large p). In the optax velocity units of the momentum buffer:

    ṽ = μ v + g;     v' = ṽ / sqrt(1 + c ṽ²);     x' = x − η v'          (cubic-damped SGD)

with μ = 1 − γ√η and c = 2 α η^{3/2} (`discrete_from_physical`). Properties: c = 0 is exactly
`optax.sgd(η, momentum=μ)`; |v'| < 1/√c, so every coordinate moves by at most η/√c per step.

Cubic-damped Adam damps the bias-corrected preconditioned step u = m̂ / (√v̂ + ε) the same way,
d = 1/sqrt(1 + c u²), update −η u d, and feeds the damping back into the first moment (m ← m d);
c = 0 is exactly `optax.adam`, and |update| ≤ η/√c.

Hyperparameters are held fixed in the discrete units (μ, c) under a learning-rate schedule; holding the
physical (γ, α) fixed instead would change μ and c with η (convert per step with
`discrete_from_physical`). The v² and u² terms are always computed in float32, whatever the param dtype.

Adaptive friction (the per-parameter form the abstract leads with, also a **[RECONSTRUCTION]**): each
coordinate carries a friction variable driven by its kinetic energy, dξ = ε⁻¹ (p² − T₀) dt (Nosé–Hoover
feedback; slaving ξ ≈ γ + α p² recovers the cubic term), and the friction acts by the exact flow of
dp/dt = −ξ p over one step, p ← e^{−ξh} p, split after the momentum step as the cubic term is. In the units
of the momentum buffer, with ζ = √η ξ the friction per step:

    ṽ = μ v + g;    ζ' = max(0, ζ + a (ṽ² − τ));    v' = e^{−ζ'} ṽ;    x' = x − η v'

with a = η²/ε (`coupling`) and τ = T₀/η (`temperature`); a = 0 is exactly `optax.sgd(η, momentum=μ)`, and
since ζ' ≥ a (ṽ² − τ), |v'| ≤ e^{aτ} / √(2ae) for a > 0. The spec's alternative, lowering the momentum
coefficient to μ − ζ, is not used: the heavy ball is stable only for ηλ < 2(1 + μ), so lowering μ near that
edge turns a kick into a divergence (tests/zoo/test_optim_cubic.py kicks both forms).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from optax import tree as otu

from icml26zoo.optim.builtin import decay_mask
from icml26zoo.optim.hparams import as_float32, check_concrete, optimizer_options
from icml26zoo.registry import register_optimizer
from icml26zoo.validation import check_non_negative, check_unit_interval

# Registered factories' default cubic coefficient (paper value unknown): 1/√c ≈ 3 bounds a step to
# about three times a typical Adam step, so the damping acts on outliers only.
DEFAULT_DAMPING = 0.1
# Registered defaults of the adaptive friction, by the same scale v_ref = 1/√c: a velocity at v_ref adds
# (1 − μ) of friction per step at μ = 0.9 (a = (1 − μ) c), and the friction drains while |ṽ| < v_ref / 2
# (τ = v_ref² / 4). With τ = 0 the friction could only grow, and a coordinate once braked stays frozen.
DEFAULT_COUPLING = 0.01
DEFAULT_TEMPERATURE = 2.5


class CubicDampedMomentumState(NamedTuple):
    """count: int32 []; velocity: the damped momentum buffer v, one leaf per parameter (param shape)."""

    count: jax.Array
    velocity: optax.Updates


class AdaptiveFrictionState(NamedTuple):
    """count: int32 []; velocity: the momentum buffer v; friction: ζ ≥ 0; one leaf per parameter each (the
    accumulator dtype, by default the parameter's; the friction update itself runs in float32)."""

    count: jax.Array
    velocity: optax.Updates
    friction: optax.Updates


class CubicDampedAdamState(NamedTuple):
    """count: int32 []; mu, nu: Adam's first (damped) and second moments, one leaf per parameter."""

    count: jax.Array
    mu: optax.Updates
    nu: optax.Updates


def _damping_factor(x: jax.Array, damping: Any) -> jax.Array:
    """1/sqrt(1 + c x²) elementwise, in float32 (exactly 1 where c x² = 0), shape of x."""
    x32 = x.astype(jnp.float32)
    return jax.lax.rsqrt(1.0 + as_float32(damping) * (x32 * x32))


def _damp(x: jax.Array, factor: jax.Array) -> jax.Array:
    """x · factor in float32, returned in x's dtype (exact when factor = 1)."""
    return (x.astype(jnp.float32) * factor).astype(x.dtype)


def _bias_correction(moment: Any, decay: Any, count: jax.Array) -> Any:
    """moment / (1 − decay^count), the power taken in float32 and the division in each leaf's dtype.

    The same arithmetic as `optax.tree.bias_correction`, which computes `decay ** count` from a Python
    float and an int32 and so fails under strict dtype promotion.
    """
    correction = 1.0 - as_float32(decay) ** count.astype(jnp.float32)
    return jax.tree.map(lambda t: t / correction.astype(t.dtype), moment)


def discrete_from_physical(
    friction: float, cubic_friction: float, learning_rate: float
) -> tuple[float, float]:
    """Physical (γ, α) to discrete (μ, c) for step h = √η: μ = 1 − γ√η, c = 2 α η^{3/2}."""
    for name, value in (("friction", friction), ("cubic_friction", cubic_friction),
                        ("learning_rate", learning_rate)):
        check_concrete(check_non_negative, name, value)
    momentum = 1.0 - friction * math.sqrt(learning_rate)
    check_concrete(check_unit_interval, "momentum (1 - friction * sqrt(learning_rate))", momentum)
    return momentum, 2.0 * cubic_friction * learning_rate**1.5


def scale_by_cubic_damped_momentum(
    momentum: float = 0.9, damping: float = 0.0, accumulator_dtype: Any = None
) -> optax.GradientTransformation:
    """Heavy-ball momentum with exact-flow cubic damping: ṽ = μ v + g, v' = ṽ / sqrt(1 + c ṽ²).

    Returns v' as the update (the caller scales by −η). `momentum` μ ∈ [0, 1), `damping` c ≥ 0;
    `accumulator_dtype` None keeps each buffer in its parameter's dtype.
    """
    check_concrete(check_unit_interval, "momentum", momentum)
    check_concrete(check_non_negative, "damping", damping)

    def init_fn(params):
        return CubicDampedMomentumState(
            count=jnp.zeros([], jnp.int32), velocity=otu.zeros_like(params, dtype=accumulator_dtype)
        )

    def update_fn(updates, state, params=None):
        del params

        def step(g, v):
            # Same operations as optax.trace (g + μ v), so c = 0 reproduces optax.sgd bit for bit. The sum
            # is formed in the accumulator's dtype (a float32 buffer under bfloat16 params keeps its
            # precision); the casts are no-ops when the dtypes agree and satisfy strict promotion otherwise.
            v_tilde = g.astype(v.dtype) + jnp.asarray(momentum, v.dtype) * v
            return _damp(v_tilde, _damping_factor(v_tilde, damping))

        velocity = jax.tree.map(step, updates, state.velocity)
        new_updates = jax.tree.map(lambda v, g: v.astype(g.dtype), velocity, updates)
        new_state = CubicDampedMomentumState(
            count=optax.safe_increment(state.count), velocity=otu.cast(velocity, accumulator_dtype)
        )
        return new_updates, new_state

    return optax.GradientTransformation(init_fn, update_fn)


def scale_by_adaptive_friction_momentum(
    momentum: float = 0.9, coupling: float = 0.0, temperature: float = 0.0, accumulator_dtype: Any = None
) -> optax.GradientTransformation:
    """Heavy ball whose per-coordinate friction grows with the coordinate's kinetic energy.

    ṽ = μ v + g;  ζ' = max(0, ζ + a (ṽ² − τ));  v' = e^{−ζ'} ṽ  (the friction update in float32, every
    leaf the shape of its parameter). Returns v' as the update (the caller scales by −η). `momentum`
    μ ∈ [0, 1) is the linear friction's momentum, `coupling` a ≥ 0 how fast kinetic energy ṽ² feeds the
    friction (0: plain heavy ball), `temperature` τ ≥ 0 the ṽ² below which the friction drains back to 0.
    """
    check_concrete(check_unit_interval, "momentum", momentum)
    check_concrete(check_non_negative, "coupling", coupling)
    check_concrete(check_non_negative, "temperature", temperature)

    def init_fn(params):
        return AdaptiveFrictionState(
            count=jnp.zeros([], jnp.int32), velocity=otu.zeros_like(params, dtype=accumulator_dtype),
            friction=otu.zeros_like(params, dtype=accumulator_dtype),
        )

    def update_fn(updates, state, params=None):
        del params

        def momentum_step(g, v):
            # g + μ v in the accumulator dtype, as optax.trace forms it (a = 0 is optax.sgd bit for bit).
            return g.astype(v.dtype) + jnp.asarray(momentum, v.dtype) * v

        def friction_step(v_tilde, zeta):
            v32 = v_tilde.astype(jnp.float32)
            kick = as_float32(coupling) * (v32 * v32 - as_float32(temperature))
            return jnp.maximum(0.0, zeta.astype(jnp.float32) + kick).astype(zeta.dtype)

        v_tilde = jax.tree.map(momentum_step, updates, state.velocity)
        friction = jax.tree.map(friction_step, v_tilde, state.friction)
        velocity = jax.tree.map(lambda v, z: _damp(v, jnp.exp(-z.astype(jnp.float32))), v_tilde, friction)
        new_updates = jax.tree.map(lambda v, g: v.astype(g.dtype), velocity, updates)
        new_state = AdaptiveFrictionState(
            count=optax.safe_increment(state.count), velocity=otu.cast(velocity, accumulator_dtype),
            friction=friction,
        )
        return new_updates, new_state

    return optax.GradientTransformation(init_fn, update_fn)


def friction_factor(state: AdaptiveFrictionState) -> optax.Updates:
    """e^{−ζ}: the factor by which the last step braked each coordinate's velocity (float32, param shapes)."""
    return jax.tree.map(lambda zeta: jnp.exp(-zeta.astype(jnp.float32)), state.friction)


def scale_by_cubic_damped_adam(
    b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0, damping: float = 0.0,
    mu_dtype: Any = None,
) -> optax.GradientTransformation:
    """Adam whose preconditioned step is cubic-damped: u = m̂/(√v̂ + ε), d = 1/sqrt(1 + c u²).

    m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;  m̂, v̂ bias-corrected at step t;  returns u·d and keeps
    m·d as the new first moment (the damping removes kinetic energy from the momentum, as in the SGD
    form). c = 0 gives `optax.scale_by_adam` exactly. State leaves have the params' shapes and dtypes
    (`mu_dtype` overrides the first moment's).
    """
    for name, value in (("b1", b1), ("b2", b2)):
        check_concrete(check_unit_interval, name, value)
    for name, value in (("eps", eps), ("eps_root", eps_root), ("damping", damping)):
        check_concrete(check_non_negative, name, value)

    def init_fn(params):
        return CubicDampedAdamState(
            count=jnp.zeros([], jnp.int32),
            mu=otu.zeros_like(params, dtype=mu_dtype),
            nu=otu.zeros_like(params),
        )

    def update_fn(updates, state, params=None):
        del params
        # The moments use optax's own tree helpers, so that c = 0 is optax.adam bit for bit.
        mu = otu.update_moment(updates, state.mu, b1, 1)
        nu = otu.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_increment(state.count)
        mu_hat = _bias_correction(mu, b1, count)
        nu_hat = _bias_correction(nu, b2, count)
        step = jax.tree.map(lambda m, v: m / (jnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        factor = jax.tree.map(lambda u: _damping_factor(u, damping), step)
        step = jax.tree.map(_damp, step, factor)
        mu = jax.tree.map(_damp, mu, factor)
        new_state = CubicDampedAdamState(
            count=count, mu=otu.cast(mu, mu_dtype), nu=otu.cast_like(nu, state.nu)
        )
        return step, new_state

    return optax.GradientTransformation(init_fn, update_fn)


def cubic_damped_sgd(
    learning_rate: optax.ScalarOrSchedule, momentum: float = 0.9, damping: float = 0.0,
    weight_decay: float = 0.0, mask: Any = None, accumulator_dtype: Any = None,
) -> optax.GradientTransformation:
    """x ← x − η (v' + λ x): cubic-damped momentum, then decoupled weight decay λ, then the learning rate.

    With damping = weight_decay = 0 this is `optax.sgd(learning_rate, momentum)` exactly. `mask` (a tree
    or callable of booleans) limits the weight decay; pass it through `static_args="mask"` when wrapping
    in `optax.inject_hyperparams`, which otherwise takes a callable for a schedule.
    """
    check_concrete(check_non_negative, "learning_rate", learning_rate)
    check_concrete(check_non_negative, "weight_decay", weight_decay)
    return optax.chain(
        scale_by_cubic_damped_momentum(momentum, damping, accumulator_dtype),
        optax.add_decayed_weights(weight_decay, mask),
        optax.scale_by_learning_rate(learning_rate),
    )


def cubic_damped_adam(
    learning_rate: optax.ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
    eps_root: float = 0.0, damping: float = 0.0, weight_decay: float = 0.0, mask: Any = None,
    mu_dtype: Any = None,
) -> optax.GradientTransformation:
    """Cubic-damped Adam with decoupled weight decay (AdamW layout): x ← x − η (u d + λ x).

    With damping = weight_decay = 0 this is `optax.adam(learning_rate, b1, b2, eps, eps_root)` exactly.
    """
    check_concrete(check_non_negative, "learning_rate", learning_rate)
    check_concrete(check_non_negative, "weight_decay", weight_decay)
    return optax.chain(
        scale_by_cubic_damped_adam(b1, b2, eps, eps_root, damping, mu_dtype),
        optax.add_decayed_weights(weight_decay, mask),
        optax.scale_by_learning_rate(learning_rate),
    )


def adaptive_friction_sgd(
    learning_rate: optax.ScalarOrSchedule, momentum: float = 0.9, coupling: float = 0.0,
    temperature: float = 0.0, weight_decay: float = 0.0, mask: Any = None, accumulator_dtype: Any = None,
) -> optax.GradientTransformation:
    """x ← x − η (v' + λ x) with the adaptive-friction heavy ball; coupling = weight_decay = 0 is
    `optax.sgd(learning_rate, momentum)` exactly. Physical (ε, T₀) map to a = η²/ε, τ = T₀/η."""
    check_concrete(check_non_negative, "learning_rate", learning_rate)
    check_concrete(check_non_negative, "weight_decay", weight_decay)
    return optax.chain(
        scale_by_adaptive_friction_momentum(momentum, coupling, temperature, accumulator_dtype),
        optax.add_decayed_weights(weight_decay, mask),
        optax.scale_by_learning_rate(learning_rate),
    )


@dataclasses.dataclass(frozen=True)
class CubicDampingOptions:
    """The `optim.options` of the registered cubic-damped optimizers: the cubic coefficient c."""

    damping: float = DEFAULT_DAMPING


@register_optimizer("cubic_damped_sgd")
def _cubic_damped_sgd_factory(learning_rate: optax.ScalarOrSchedule, cfg: Any) -> optax.GradientTransformation:
    """Momentum `b1`, option `damping` (default DEFAULT_DAMPING), weight decay on matrices only."""
    options = optimizer_options(cfg, "cubic_damped_sgd", CubicDampingOptions)
    return cubic_damped_sgd(
        learning_rate, momentum=cfg.b1, damping=options.damping,
        weight_decay=cfg.weight_decay, mask=decay_mask,
    )


@register_optimizer("cubic_damped_adam")
def _cubic_damped_adam_factory(learning_rate: optax.ScalarOrSchedule, cfg: Any) -> optax.GradientTransformation:
    """Adam moments `b1`, `b2`, `eps`, option `damping` (default DEFAULT_DAMPING), decay on matrices."""
    options = optimizer_options(cfg, "cubic_damped_adam", CubicDampingOptions)
    return cubic_damped_adam(
        learning_rate, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, damping=options.damping,
        weight_decay=cfg.weight_decay, mask=decay_mask,
    )


@dataclasses.dataclass(frozen=True)
class AdaptiveFrictionOptions:
    """The `optim.options` of `adaptive_friction_sgd`: the coupling a and the temperature τ (both ≥ 0)."""

    coupling: float = DEFAULT_COUPLING
    temperature: float = DEFAULT_TEMPERATURE


@register_optimizer("adaptive_friction_sgd")
def _adaptive_friction_sgd_factory(learning_rate: optax.ScalarOrSchedule, cfg: Any) -> optax.GradientTransformation:
    """Momentum `b1`, options `coupling` and `temperature` (DEFAULT_COUPLING, DEFAULT_TEMPERATURE), decay on
    matrices."""
    options = optimizer_options(cfg, "adaptive_friction_sgd", AdaptiveFrictionOptions)
    return adaptive_friction_sgd(
        learning_rate, momentum=cfg.b1, coupling=options.coupling, temperature=options.temperature,
        weight_decay=cfg.weight_decay, mask=decay_mask,
    )
