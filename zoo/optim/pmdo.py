"""PMDO: parameter-masked decoupled optimisation for cross-domain class-incremental learning. Experimental.

Paper: "Parameter-Masked Decoupled Optimization for Cross-Domain Class-Incremental Learning" (ICML 2026; no
arXiv text or code found). The abstract splits each update into *what* to change (a domain-aware knowledge
decoupler) and *how* to change it (a stability-aware trajectory regulation): Δθ = R_t(M_t ⊙ g).

**[RECONSTRUCTION]**: everything past that sentence is the zoo's, built on SPG's soft parameter masks (Konishi
et al., "Parameter-Level Soft-Masking for Continual Learning", ICML 2023, arXiv 2306.14775), GPM's gradient
projection (`pmdo_gpm`) and a fast/slow-weight consolidation. Every part is switchable (`PMDOConfig`).

Decoupler (what), per tensor of the shared backbone:
    relevance at the start of task t   r = |W ⊙ Σ ∇_W L_t|  ("saliency")  or  Σ (∇_W L_t)²  ("fisher")
    r̃ = clip(tanh(standardise(r)), 0, 1)               (below-mean relevance maps to 0)
    importance after task t            a_t = |tanh(standardise(Σ ∇_W L_t))|,   A_t = max(A_{t−1}, a_t)
    mask                               M_t = top_ρ(r̃) ⊙ (1 − A_{t−1})  (hard)   or   r̃ ⊙ (1 − A_{t−1})  (soft)
with M_1 = 1; biases and norm parameters (leaves not named kernel/embedding) are frozen after task 1 when
`protect_bias_norm`, else masked the same way.

Regulation (how), as optax transformations chained by `pmdo(base, cfg)`:
    mask_updates (M ⊙ g) → project_gradients (GPM) → base optimiser → [project again] → mask_updates (re-mask)
    → consolidation (slow weights θ_s ← θ_s + α M ⊙ (θ_f − θ_s), kept in the optimiser state)
The re-mask after the base optimiser is what keeps Adam's moments and decoupled weight decay from moving masked
coordinates. The flatness part (masked SAM) needs a second gradient, so it is a gradient function
(`masked_sam_gradient`) whose output feeds the chain. `mask` and `bases` are extra arguments of `update`
(`optax.GradientTransformationExtraArgs`), so one jitted step serves every task.

Not registered in `icml26zoo.registry.OPTIMIZERS`: that registry's factories are `(learning_rate, cfg)` and the
shared trainer calls `update(grads, state, params)` on one data set; PMDO needs per-task masks, bases and
task-boundary hooks (`begin_task`, `end_task`) from a task-by-task loop, and without them it is its base
optimiser (M = 1, no bases), which a registered name would hide.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from icml26zoo.optim.builtin import decay_mask
from icml26zoo.optim.hparams import with_standard_promotion
from icml26zoo.optim.pmdo_gpm import project_gradients, update_basis
from icml26zoo.validation import check_bool, check_choice, check_int, check_interval, check_non_negative

__all__ = ["PMDOConfig", "PMDOState", "accumulate_importance", "begin_task", "build_mask", "check_like_params",
           "consolidate", "consolidation", "domain_relevance", "end_task", "gradient_sum", "init_state",
           "mask_updates", "masked_logits", "masked_sam_gradient", "pmdo", "relevance_scores", "slow_params",
           "spg_importance", "standardise", "top_fraction"]

MASK_KINDS = ("hard", "soft")
RELEVANCE_KINDS = ("saliency", "fisher")
HEAD_OLD = ("frozen", "importance")
EVAL_WEIGHTS = ("slow", "fast")
CE_SCOPES = ("current", "all")


@dataclasses.dataclass(frozen=True)
class PMDOConfig:
    """PMDO's switches (each field checked on construction; ValueError names it).

    rho_mask: ρ in (0, 1], the fraction of each tensor the hard mask opens (1: every coordinate).
    mask_kind: "hard" (top-ρ support) or "soft" (r̃ itself).
    relevance: "saliency" |W ⊙ Σg| or "fisher" Σg².
    n_relevance_batches: batches of the new domain the relevance is summed over.
    protect_bias_norm: freeze non-kernel leaves after task 1 (else mask them like kernels).
    head_old: the expanding head's old-class columns: "frozen" or scaled by (1 − A) ("importance").
    use_mask: False turns the decoupler off (M ≡ 1; the regulation-only ablation).
    project: GPM projection on (bases given); gpm_threshold ε in (0, 1]; gpm_samples rows per basis update.
    reproject: project the base optimiser's output again (exact null-space updates under Adam where M = 1).
    sam_rho: masked-SAM radius (0: off). ema_alpha: α in (0, 1] of the slow weights (1 with M ≡ 1: off).
    eval_weights: evaluate the "slow" or the "fast" weights. reset_opt_state_per_task: fresh moments per task.
    ce_scope: cross-entropy over the "current" task's classes or "all" seen ones.
    """

    rho_mask: float = 0.2
    mask_kind: str = "hard"
    relevance: str = "saliency"
    n_relevance_batches: int = 8
    protect_bias_norm: bool = True
    head_old: str = "frozen"
    use_mask: bool = True
    project: bool = True
    reproject: bool = False
    gpm_threshold: float = 0.97
    gpm_samples: int = 300
    sam_rho: float = 0.0
    ema_alpha: float = 0.1
    eval_weights: str = "slow"
    reset_opt_state_per_task: bool = True
    ce_scope: str = "current"

    def __post_init__(self) -> None:
        check_interval("rho_mask", self.rho_mask, 0.0, 1.0, closed="right")
        check_choice("mask_kind", self.mask_kind, MASK_KINDS)
        check_choice("relevance", self.relevance, RELEVANCE_KINDS)
        check_int("n_relevance_batches", self.n_relevance_batches)
        for name in ("protect_bias_norm", "use_mask", "project", "reproject", "reset_opt_state_per_task"):
            check_bool(name, getattr(self, name))
        check_choice("head_old", self.head_old, HEAD_OLD)
        check_interval("gpm_threshold", self.gpm_threshold, 0.0, 1.0, closed="right")
        check_int("gpm_samples", self.gpm_samples)
        check_non_negative("sam_rho", self.sam_rho, finite=True)
        check_interval("ema_alpha", self.ema_alpha, 0.0, 1.0, closed="right")
        check_choice("eval_weights", self.eval_weights, EVAL_WEIGHTS)
        check_choice("ce_scope", self.ce_scope, CE_SCOPES)


# ---------------------------------------------------------------- trees

def check_like_params(field: str, tree: Any, params: Any) -> None:
    """ValueError naming `field` unless `tree` has the structure of `params` and each leaf its shape."""
    want, got = jax.tree.structure(params), jax.tree.structure(tree)
    if want != got:
        raise ValueError(f"{field} must be a tree like the parameters {want}, got {got}")
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    for (path, leaf), ref in zip(leaves, jax.tree.leaves(params), strict=True):
        if jnp.shape(leaf) != jnp.shape(ref):
            raise ValueError(f"{field}{jax.tree_util.keystr(path)} must have shape {jnp.shape(ref)} like its "
                             f"parameter, got {jnp.shape(leaf)}")


def _is_weight(params: Any) -> Any:
    """True per leaf for weight tensors (named kernel/embedding, as Flax names them), False for biases/norms."""
    return decay_mask(params)


# ---------------------------------------------------------------- decoupler (what)

def standardise(x: jax.Array) -> jax.Array:
    """(x − mean) / std over the whole tensor, float32; a constant tensor (std 0) maps to zeros (SPG skips
    it), so no division by zero."""
    x = jnp.asarray(x, jnp.float32)
    std = jnp.std(x)
    return jnp.where(std > 0, (x - jnp.mean(x)) / jnp.where(std > 0, std, 1.0), 0.0)


@jax.jit
def _relevance_leaf(r: jax.Array) -> jax.Array:
    return jnp.clip(jnp.tanh(standardise(r)), 0.0, 1.0)


@jax.jit
def _importance_leaf(g: jax.Array) -> jax.Array:
    return jnp.abs(jnp.tanh(standardise(g)))


def relevance_scores(relevance: Any) -> Any:
    """r̃ = clip(tanh(standardise(r)), 0, 1) per tensor: 0 for at-or-below-mean relevance (r ≥ 0, so |·| would
    map low relevance to high scores)."""
    return jax.tree.map(_relevance_leaf, relevance)


def spg_importance(grad_sum: Any) -> Any:
    """a = |tanh(standardise(Σ∇L))| per tensor, in [0, 1] (float32 tanh rounds to 1 past |z| ≈ 9)."""
    return jax.tree.map(_importance_leaf, grad_sum)


def accumulate_importance(old: Any, new: Any) -> Any:
    """A_t = max(A_{t−1}, a_t) elementwise (non-decreasing over tasks)."""
    return jax.tree.map(jnp.maximum, old, new)


def top_fraction(scores: jax.Array, rho: float) -> jax.Array:
    """1.0 on exactly round(ρ·n) entries of `scores` (any shape, n entries) with the largest values, 0.0 elsewhere;
    ties go to the lower flat index (stable sort). float32, shape of `scores`."""
    check_interval("rho", rho, 0.0, 1.0, closed="right")
    return _top_count(jnp.asarray(scores, jnp.float32), int(rho * jnp.size(scores) + 0.5))


@functools.partial(jax.jit, static_argnums=1)
def _top_count(scores: jax.Array, count: int) -> jax.Array:
    flat = jnp.ravel(scores)
    flat = jnp.where(flat == 0, 0.0, flat)  # −0.0 and 0.0 tie, so the index decides
    order = jnp.argsort(-flat, stable=True)
    chosen = jnp.zeros(flat.size, jnp.float32).at[order[:count]].set(1.0)
    return chosen.reshape(scores.shape)


def build_mask(relevance: Any, importance: Any, cfg: PMDOConfig, *, first_task: bool = False) -> Any:
    """M_t per leaf, float32 in [0, 1], a tree like `importance` (the parameter tree).

    Args:
      relevance: raw relevance r per leaf (`domain_relevance`), a tree like params.
      importance: A_{t−1} per leaf (zeros before task 2).
      cfg: rho_mask, mask_kind, protect_bias_norm, use_mask.
      first_task: M_1 = 1.
    """
    check_like_params("relevance", relevance, importance)
    if first_task or not cfg.use_mask:
        return jax.tree.map(jnp.ones_like, importance)
    scores = relevance_scores(relevance)
    chosen = scores if cfg.mask_kind == "soft" else jax.tree.map(lambda s: top_fraction(s, cfg.rho_mask), scores)

    def leaf(is_weight: bool, sel: jax.Array, old: jax.Array) -> jax.Array:
        if not is_weight and cfg.protect_bias_norm:
            return jnp.zeros_like(old)
        return sel * (1.0 - old)

    return jax.tree.map(leaf, _is_weight(importance), chosen, importance)


@functools.lru_cache(maxsize=32)
def _jitted_grad(loss_fn: Callable[[Any, Any], jax.Array]) -> Callable[[Any, Any], Any]:
    """One compiled ∇loss_fn per loss function (pass the same function object each task to reuse it)."""
    return jax.jit(jax.grad(loss_fn))


def gradient_sum(loss_fn: Callable[[Any, Any], jax.Array], params: Any, batches: Iterable[Any]) -> Any:
    """Σ over `batches` of ∇ loss_fn(params, batch) (a tree like params, float32)."""
    grad = _jitted_grad(loss_fn)
    total = None
    for batch in batches:
        g = grad(params, batch)
        total = g if total is None else jax.tree.map(jnp.add, total, g)
    if total is None:
        raise ValueError("batches must hold at least one batch, got none")
    return total


def domain_relevance(loss_fn: Callable[[Any, Any], jax.Array], params: Any, batches: Iterable[Any],
                     kind: str = "saliency") -> Any:
    """r per leaf on the new domain's `batches`: |W ⊙ Σ∇L| ("saliency") or Σ (∇L)² ("fisher")."""
    check_choice("kind", kind, RELEVANCE_KINDS)
    if kind == "saliency":
        return jax.tree.map(lambda w, g: jnp.abs(w * g), params, gradient_sum(loss_fn, params, batches))
    grad = _jitted_grad(loss_fn)
    squares = [jax.tree.map(jnp.square, grad(params, b)) for b in batches]
    if not squares:
        raise ValueError("batches must hold at least one batch, got none")
    return jax.tree.map(lambda *s: sum(s[1:], s[0]), *squares)


# ---------------------------------------------------------------- regulation (how)

def _check_mask(mask: Any, updates: Any) -> None:
    if mask is not None:
        check_like_params("mask", mask, updates)


def mask_updates() -> optax.GradientTransformationExtraArgs:
    """u ← M ⊙ u with M the extra argument `mask` of `update` (a tree like params; None or absent: identity)."""

    def init_fn(params: Any) -> optax.EmptyState:
        del params
        return optax.EmptyState()

    def update_fn(updates: Any, state: optax.EmptyState, params: Any = None, *, mask: Any = None,
                  **extra_args: Any) -> tuple[Any, optax.EmptyState]:
        del params, extra_args
        _check_mask(mask, updates)
        if mask is None:
            return updates, state
        return jax.tree.map(lambda u, m: u * m.astype(u.dtype), updates, mask), state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


class ConsolidationState(NamedTuple):
    """slow: the slow weights θ_s (a tree like params)."""

    slow: Any


def consolidate(slow: Any, fast: Any, mask: Any, alpha: float) -> Any:
    """θ_s + α M ⊙ (θ_f − θ_s) per leaf (mask None: M = 1)."""
    if mask is None:
        return jax.tree.map(lambda s, f: s + alpha * (f - s), slow, fast)
    return jax.tree.map(lambda s, f, m: s + alpha * m.astype(s.dtype) * (f - s), slow, fast, mask)


def consolidation(alpha: float) -> optax.GradientTransformationExtraArgs:
    """Keeps slow weights in its state: after the update u (unchanged), θ_f = params + u and
    θ_s ← θ_s + α M ⊙ (θ_f − θ_s). `init(params)` starts θ_s at params. Needs `params` in `update`."""
    check_interval("alpha", alpha, 0.0, 1.0, closed="right")

    def init_fn(params: Any) -> ConsolidationState:
        return ConsolidationState(slow=jax.tree.map(jnp.asarray, params))

    def update_fn(updates: Any, state: ConsolidationState, params: Any = None, *, mask: Any = None,
                  **extra_args: Any) -> tuple[Any, ConsolidationState]:
        del extra_args
        if params is None:
            raise ValueError("consolidation needs params in update(updates, state, params)")
        fast = optax.apply_updates(params, updates)
        return updates, ConsolidationState(slow=consolidate(state.slow, fast, mask, alpha))

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def pmdo(base: optax.GradientTransformation, cfg: PMDOConfig) -> optax.GradientTransformationExtraArgs:
    """Δθ = R_t(M_t ⊙ g): mask → GPM projection (cfg.project) → `base` → projection again (cfg.reproject) →
    re-mask → slow-weight consolidation (α = cfg.ema_alpha). Call `update(g, state, params, mask=M, bases=B)`;
    without `mask`/`bases` those parts are the identity. Weight decay inside `base` is re-masked too."""
    if not isinstance(cfg, PMDOConfig):
        raise ValueError(f"cfg must be a PMDOConfig, got {type(cfg).__name__}")
    if not isinstance(base, optax.GradientTransformation):
        raise ValueError(f"base must be an optax GradientTransformation, got {type(base).__name__}")
    parts = [mask_updates()]
    if cfg.project:
        parts.append(project_gradients())
    parts.append(with_standard_promotion(base))  # optax's Adam bias correction needs it under strict promotion
    if cfg.project and cfg.reproject:
        parts.append(project_gradients())
    parts += [mask_updates(), consolidation(cfg.ema_alpha)]
    return optax.chain(*parts)


def slow_params(opt_state: Any) -> Any:
    """The slow weights held by `pmdo`'s consolidation (its last link)."""
    last = opt_state[-1] if isinstance(opt_state, tuple) and opt_state else None
    if not isinstance(last, ConsolidationState):
        raise ValueError("opt_state must be the state of a pmdo(...) transformation (ending in consolidation)")
    return last.slow


def masked_sam_gradient(loss_fn: Callable[[Any, Any], jax.Array], params: Any, batch: Any, *, rho: float,
                        mask: Any = None, bases: Any = None) -> tuple[jax.Array, Any]:
    """(loss at θ, gradient for the chain): ∇L(θ) when ρ = 0, else masked SAM's ∇L(θ + ε) with
    ε = ρ d/‖d‖, d = the masked (and projected, with `bases`) gradient, so only trainable directions are
    perturbed. Two forward-backward passes when ρ > 0."""
    check_non_negative("rho", rho, finite=True)
    loss, grad = jax.value_and_grad(loss_fn)(params, batch)
    if rho == 0:
        return loss, grad
    direction, _ = mask_updates().update(grad, optax.EmptyState(), mask=mask)
    direction, _ = project_gradients().update(direction, optax.EmptyState(), bases=bases)
    norm = optax.global_norm(direction)
    scale = jnp.where(norm > 0, rho / jnp.where(norm > 0, norm, 1.0), 0.0)
    perturbed = jax.tree.map(lambda p, d: p + scale * d, params, direction)
    return loss, jax.grad(loss_fn)(perturbed, batch)


# ---------------------------------------------------------------- state and task hooks

class PMDOState(NamedTuple):
    """Between tasks: importance A (tree like params, float32), mask M (like params), bases (like params: a
    padded [in, in] basis per projected kernel, None elsewhere), tasks_done (int). The slow weights live in the
    optimiser state (`slow_params`)."""

    importance: Any
    mask: Any
    bases: Any
    tasks_done: int


def init_state(params: Any, projected: Any = None) -> PMDOState:
    """A_0 = 0, M = 1, empty bases for the leaves where `projected` (a tree of bools like params; None: no
    projection) is True; those leaves must be kernels [in, out]."""
    zeros = jax.tree.map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params)
    if projected is None:
        bases = jax.tree.map(lambda _: None, params)
    else:
        if jax.tree.structure(projected) != jax.tree.structure(params):
            raise ValueError(f"projected must be a tree of bools like the parameters {jax.tree.structure(params)}, "
                             f"got {jax.tree.structure(projected)}")

        def basis(flag: bool, p: Any) -> Any:
            if not flag:
                return None
            if jnp.ndim(p) != 2:
                raise ValueError(f"projected leaves must be kernels [in, out], got shape {jnp.shape(p)}")
            return jnp.zeros((p.shape[0], p.shape[0]), jnp.float32)

        bases = jax.tree.map(basis, projected, params)
    return PMDOState(importance=zeros, mask=jax.tree.map(jnp.ones_like, zeros), bases=bases, tasks_done=0)


def begin_task(state: PMDOState, loss_fn: Callable[[Any, Any], jax.Array], params: Any, batches: Iterable[Any],
               cfg: PMDOConfig) -> PMDOState:
    """The new task's mask M_t from the relevance on its first `cfg.n_relevance_batches` batches (new head
    columns already initialised in `params`); M_1 = 1."""
    first = state.tasks_done == 0 or not cfg.use_mask
    if first:
        return state._replace(mask=build_mask(state.importance, state.importance, cfg, first_task=True))
    batches = list(batches)[: cfg.n_relevance_batches]
    relevance = domain_relevance(loss_fn, params, batches, cfg.relevance)
    return state._replace(mask=build_mask(relevance, state.importance, cfg))


def end_task(state: PMDOState, loss_fn: Callable[[Any, Any], jax.Array], params: Any, batches: Iterable[Any],
             acts: Any, cfg: PMDOConfig) -> PMDOState:
    """After a task: A ← max(A, |tanh(standardise(Σ∇L))|) over the task's `batches`, and each basis grown from
    `acts` (a tree like `state.bases`: [n, in] inputs of that layer on the task's data, None where no basis;
    ignored when cfg.project is False)."""
    importance = accumulate_importance(state.importance, spg_importance(gradient_sum(loss_fn, params, batches)))
    bases = state.bases
    if cfg.project:
        bases = jax.tree.map(lambda b, a: None if b is None else update_basis(b, a[: cfg.gpm_samples],
                                                                              cfg.gpm_threshold),
                             state.bases, acts, is_leaf=lambda x: x is None)
    return state._replace(importance=importance, bases=bases, tasks_done=state.tasks_done + 1)


# ---------------------------------------------------------------- expanding head

def masked_logits(logits: jax.Array, active: jax.Array) -> jax.Array:
    """Logits [B, C_max] with inactive classes (`active` bool [C_max] False) set to −inf before any softmax, so
    they never win the argmax and take no probability (their gradient is 0)."""
    if logits.ndim != 2 or jnp.shape(active) != (logits.shape[1],):
        raise ValueError(f"masked_logits needs logits [B, C] and active [C]; got {logits.shape} and "
                         f"{jnp.shape(active)}")
    return jnp.where(active, logits, -jnp.inf)
