"""Adam loss-spike monitor: second-moment decoupling and gradient-directional curvature (pure functions).

Paper: Bai et al., "Adaptive Preconditioners Trigger Loss Spikes in Adam" (ICML 2026, arXiv 2506.04805).
No code was available; the predictor's normalisation is
**[DERIVED]** from the paper's criterion ("a spike when the gradient-directional curvature exceeds 2/η")
through the one-step quadratic model below.

Adam at step t (optax conventions: ε outside the square root, `eps_root` inside):
m_t = β1 m + (1−β1) g, v_t = β2 v + (1−β2) g², m̂ = m_t/(1−β1^t), v̂ = v_t/(1−β2^t),
d_t = m̂/(√(v̂ + ε_root) + ε), θ ← θ − η d_t. The preconditioner is P = diag(1/(√(v̂ + ε_root) + ε)).

- Decoupling: when g² ≪ v_{t−1}, v_t ≈ β2 v_{t−1} decays whatever the gradient does, P grows and
  λ_max(P H) rises. Ratio r = Σ g² / Σ v_{t−1}; fraction of coordinates with g² < κ v_{t−1}; median of
  v_t / v_{t−1} (≈ β2 when decoupled).
- Directional curvature: the quadratic model gives ΔL = −η gᵀd + ½ η² dᵀHd, positive iff
  λ_dir = dᵀHd / gᵀd > 2/η (exact on a quadratic loss, for the update actually taken, momentum
  included). One Hessian-vector product (forward-over-reverse).
- Sharpness: λ_max of the symmetric P^{1/2} H P^{1/2} (same spectrum as P H) by power iteration, one HVP
  per iteration; warning when η λ_max > 2(1+β1)/(1−β1) (the EMA-momentum stability edge of one mode).

Trainer hook (to be wired by the trainer): every N steps, with a fixed probe batch,

    metrics |= spike_diagnostics(lambda p: loss_fn(p, probe_batch), params, grads, opt_state,
                                 learning_rate=lr_t, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, key=key)

before `optimizer.update`; it reads the Adam state and never changes it. For AdamW, d excludes the
decay term (the regulariser adds λ_wd to the curvature).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

Loss = Callable[[Any], jax.Array]


def find_adam_state(opt_state: Any) -> optax.ScaleByAdamState:
    """The (first) `optax.ScaleByAdamState` inside an optimizer state (chains, inject_hyperparams, ...)."""
    found = []
    is_adam = lambda s: isinstance(s, optax.ScaleByAdamState)
    jax.tree.map(lambda s: found.append(s) if is_adam(s) else None, opt_state, is_leaf=is_adam)
    if not found:
        raise ValueError("opt_state holds no optax.ScaleByAdamState; the spike monitor reads Adam's moments")
    return found[0]


def _f32(tree: Any) -> Any:
    return jax.tree.map(lambda x: x.astype(jnp.float32), tree)


def _dot(a: Any, b: Any) -> jax.Array:
    return sum((jnp.sum(x * y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)),
               jnp.zeros([], jnp.float32))


def adam_direction(
    grads: Any, adam_state: optax.ScaleByAdamState, *, b1: float, b2: float, eps: float, eps_root: float = 0.0
) -> tuple[Any, Any]:
    """(d_t, P_t): the direction Adam will take with `grads` from `adam_state`, and its preconditioner,
    both param-shaped float32 trees (θ ← θ − η d_t)."""
    g, mu, nu = _f32(grads), _f32(adam_state.mu), _f32(adam_state.nu)
    count = (adam_state.count + 1).astype(jnp.float32)
    mu_t = jax.tree.map(lambda m, x: b1 * m + (1 - b1) * x, mu, g)
    nu_t = jax.tree.map(lambda v, x: b2 * v + (1 - b2) * x * x, nu, g)
    correction1, correction2 = 1 - jnp.float32(b1) ** count, 1 - jnp.float32(b2) ** count
    precond = jax.tree.map(lambda v: 1 / (jnp.sqrt(v / correction2 + eps_root) + eps), nu_t)
    direction = jax.tree.map(lambda m, p: m / correction1 * p, mu_t, precond)
    return direction, precond


def hessian_vector_product(loss: Loss, params: Any, vector: Any) -> Any:
    """H(θ)·v by forward-over-reverse differentiation (`jax.jvp` of `jax.grad`), float32 tree."""
    tangent = jax.tree.map(lambda v, p: v.astype(p.dtype), vector, params)
    return _f32(jax.jvp(jax.grad(loss), (params,), (tangent,))[1])


def directional_curvature(loss: Loss, params: Any, grads: Any, direction: Any) -> tuple[jax.Array, jax.Array]:
    """(dᵀ H d, gᵀ d) as float32 []: λ_dir = dᵀHd / gᵀd, and the step θ − η d raises a quadratic loss iff
    η dᵀHd > 2 gᵀd (i.e. η λ_dir > 2 when gᵀd > 0; any positive-curvature step when gᵀd ≤ 0, as when
    momentum points uphill)."""
    hd = hessian_vector_product(loss, params, direction)
    return _dot(direction, hd), _dot(_f32(grads), direction)


def preconditioned_sharpness(
    loss: Loss, params: Any, precond: Any, *, key: jax.Array, num_iters: int = 20, init: Any | None = None
) -> tuple[jax.Array, Any]:
    """(λ_max, u): top eigenpair of P^{1/2} H P^{1/2} by `num_iters` power iterations (one HVP each).

    `init` (param-shaped) starts the iteration instead of a random vector from `key`: a trace that passes the
    previous step's `u` back in tracks λ_max with a few iterations per step, since P and H change slowly.
    """
    root = jax.tree.map(jnp.sqrt, precond)
    leaves, treedef = jax.tree.flatten(root)
    if init is None:
        keys = jax.random.split(key, len(leaves))
        u = jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape, jnp.float32)
                                         for k, x in zip(keys, leaves, strict=True)])
    else:
        u = _f32(init)

    def normalize(t):
        norm = jnp.sqrt(_dot(t, t))
        return jax.tree.map(lambda x: x / jnp.maximum(norm, jnp.finfo(jnp.float32).tiny), t)

    def apply(t):
        h = hessian_vector_product(loss, params, jax.tree.map(jnp.multiply, root, t))
        return jax.tree.map(jnp.multiply, root, h)

    u = jax.lax.fori_loop(0, num_iters, lambda _, t: normalize(apply(t)), normalize(u))
    return _dot(u, apply(u)), u


def decoupling_stats(grads: Any, adam_state: optax.ScaleByAdamState, *, b2: float, kappa: float = 0.1) -> dict:
    """r = Σg²/Σv_{t−1}, the fraction of coordinates with g² < κ v_{t−1}, and median v_t/v_{t−1}."""
    g2 = jnp.concatenate([x.reshape(-1) ** 2 for x in jax.tree.leaves(_f32(grads))])
    v = jnp.concatenate([x.reshape(-1) for x in jax.tree.leaves(_f32(adam_state.nu))])
    tiny = jnp.finfo(jnp.float32).tiny
    return {
        "decoupling_ratio": jnp.sum(g2) / jnp.maximum(jnp.sum(v), tiny),
        "small_grad_fraction": jnp.mean((g2 < kappa * v).astype(jnp.float32)),
        "v_decay_median": jnp.median(b2 + (1 - b2) * g2 / jnp.maximum(v, tiny)),
    }


def spike_diagnostics(
    loss: Loss, params: Any, grads: Any, opt_state: Any, *, learning_rate: Any, b1: float, b2: float,
    eps: float, eps_root: float = 0.0, key: jax.Array | None = None, num_power_iters: int = 20,
    kappa: float = 0.1,
) -> dict[str, jax.Array]:
    """All monitor scalars for one step, before `optimizer.update(grads, opt_state, params)`.

    Keys: decoupling_ratio, small_grad_fraction, v_decay_median, lambda_dir (dᵀHd/gᵀd; +inf when
    gᵀd ≤ 0), predicted_loss_change (−η gᵀd + ½η² dᵀHd), lambda_max, alignment (|cos(g, top
    eigenvector)|), spike_predicted (η dᵀHd > 2 gᵀd, i.e. η λ_dir > 2; float 0/1) and sharpness_warning
    (η λ_max > 2(1+β1)/(1−β1), float 0/1). `loss(params)` is the probe-batch loss; jit-able.
    """
    adam_state = find_adam_state(opt_state)
    direction, precond = adam_direction(grads, adam_state, b1=b1, b2=b2, eps=eps, eps_root=eps_root)
    curvature, slope = directional_curvature(loss, params, grads, direction)
    key = jax.random.PRNGKey(0) if key is None else key
    lam_max, top = preconditioned_sharpness(loss, params, precond, key=key, num_iters=num_power_iters)
    g = _f32(grads)
    alignment = jnp.abs(_dot(g, top)) / jnp.maximum(jnp.sqrt(_dot(g, g)), jnp.finfo(jnp.float32).tiny)
    lr = jnp.asarray(learning_rate, jnp.float32)
    return decoupling_stats(grads, adam_state, b2=b2, kappa=kappa) | {
        "lambda_dir": jnp.where(slope > 0, curvature / jnp.where(slope > 0, slope, 1.0), jnp.inf),
        "predicted_loss_change": -lr * slope + 0.5 * lr * lr * curvature,
        "lambda_max": lam_max,
        "alignment": alignment,
        "spike_predicted": (lr * curvature > 2 * slope).astype(jnp.float32),
        "sharpness_warning": (lr * lam_max > 2 * (1 + b1) / (1 - b1)).astype(jnp.float32),
    }
