"""The adaptive group lasso on first-layer columns (Zou 2006, "The adaptive lasso and its oracle properties"; Wang
& Leng 2008, "A note on adaptive group lasso"), as the ICML 2026 paper "Identifiable Nonlinear Differentiable Causal
Discovery via Independence and Adaptive Group Sparsity" applies it to NOTIME: the group of edge k → j is the column
w1[j, :, k]; its penalty λ w_kj ‖w1[j, :, k]‖₂ is handled by a proximal step (group soft-thresholding), which
sets whole columns exactly to zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_non_negative, check_positive

__all__ = ["adaptive_weights", "group_penalty", "group_soft_threshold"]


def group_soft_threshold(w1: jax.Array, thresholds: jax.Array) -> jax.Array:
    """The proximal map of Σ_kj t_kj ‖w1[j, :, k]‖₂ for w1 [d, m, d] and thresholds t [d, d] (t[k, j] for edge
    k → j, t >= 0): each column is scaled by max(0, 1 − t_kj / ‖w1[j, :, k]‖₂), i.e. it is
    argmin_v ½‖v − w‖² + t‖v‖ in closed form; a column with norm <= t becomes exactly 0."""
    norms = jnp.sqrt(jnp.sum(w1**2, axis=1, keepdims=True))  # [d, 1, d]
    t = thresholds.T[:, None, :]  # [node j, 1, input k]
    factor = jnp.maximum(0.0, 1.0 - t / jnp.maximum(norms, 1e-30))
    return w1 * jnp.where(norms > t, factor, 0.0)


def adaptive_weights(strengths: jax.Array, *, gamma: float = 1.0, eps: float = 1e-3) -> jax.Array:
    """w_kj = 1 / (A_kj^γ + ε) [d, d] from the first stage's edge strengths A [d, d]: weak first-stage edges are
    penalised hard, strong ones barely (the adaptive lasso's route to the oracle property)."""
    check_positive("gamma", gamma, finite=True)
    check_positive("eps", eps, finite=True)
    return 1.0 / (strengths**gamma + eps)


def group_penalty(strengths: jax.Array, weights: jax.Array, lam: float) -> jax.Array:
    """λ Σ_kj w_kj A_kj, the penalty's value (reported; the fit applies it through the proximal step)."""
    check_non_negative("lam", lam, finite=True)
    return lam * jnp.sum(weights * strengths)
