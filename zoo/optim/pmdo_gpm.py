"""PMDO's subspace projection (part (a) of the stability-aware trajectory regulation), GPM-style. Experimental.

**[RECONSTRUCTION]**: "Parameter-Masked Decoupled Optimization for Cross-Domain Class-Incremental Learning"
(ICML 2026; no arXiv text or code found) names a "stability-aware trajectory regulation" only. The zoo builds its
first part on Gradient Projection Memory (Saha, Garg, Roy, "Gradient Projection Memory for Continual Learning",
ICLR 2021, arXiv 2103.09762): every protected dense layer keeps an orthonormal basis U [in, k] of the inputs it saw
on earlier domains, and its kernel gradient is projected off that span, so the layer's outputs on those inputs
do not move (exactly for a bias-free layer under SGD).

Flax kernels are [in, out] (y = x K), so the projection is g ← g − U Uᵀ g (GPM's torch form g − g U Uᵀ is for
[out, in] weights). Bases are kept padded to a static [in, in] with zero columns past the k found so far, so a
jitted step never recompiles as they grow: zero columns leave U Uᵀ unchanged.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26zoo.validation import check_interval

__all__ = ["basis_size", "captured_energy", "empty_basis", "project", "project_gradients", "truncate_basis",
           "update_basis"]

# A padded column whose norm is below this is padding (real columns have norm 1).
_COLUMN_PRESENT = 0.5


def empty_basis(width: int) -> jax.Array:
    """A basis holding nothing yet for a layer with `width` inputs: zeros float32 [in, in]."""
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got {width!r}")
    return jnp.zeros((width, width), jnp.float32)


def _check_basis(basis: Any) -> np.ndarray:
    basis = np.asarray(basis, np.float64)
    if basis.ndim != 2 or basis.shape[0] != basis.shape[1]:
        raise ValueError(f"basis must be a square [in, in] padded basis, got shape {basis.shape}")
    return basis


def basis_size(basis: Any) -> int:
    """k: the number of basis vectors held in a padded basis [in, in]."""
    basis = _check_basis(basis)
    return int(np.sum(np.linalg.norm(basis, axis=0) > _COLUMN_PRESENT))


def captured_energy(basis: Any, acts: Any) -> float:
    """‖U Uᵀ R‖² / ‖R‖² with R = actsᵀ [in, n]: the fraction of the activations' energy inside span(U)."""
    basis = _check_basis(basis)
    rep = np.asarray(acts, np.float64).T
    total = float(np.sum(rep**2))
    return float(np.sum((basis.T @ rep) ** 2) / total) if total > 0 else 1.0


def update_basis(basis: Any, acts: Any, threshold: float) -> jax.Array:
    """GPM's basis update after a task (eager, not jitted: k is data-dependent).

    Args:
      basis: the padded basis so far, float [in, in] (`empty_basis(in)` before the first task).
      acts: the layer's inputs on the finished task's data, [n, in] (GPM uses a few hundred samples).
      threshold: ε in (0, 1]: vectors are added from the residual R − U Uᵀ R, largest singular value first,
        until U captures at least this fraction of ‖R‖² (k is capped at `in`).
    Returns:
      The new padded basis float32 [in, in]: orthonormal columns first, zeros after.
    """
    check_interval("threshold", threshold, 0.0, 1.0, closed="right")
    basis = _check_basis(basis)
    acts = np.asarray(acts, np.float64)
    width = basis.shape[0]
    if acts.ndim != 2 or acts.shape[1] != width or acts.shape[0] < 1:
        raise ValueError(f"acts must be [n, {width}] with n >= 1 (the layer's inputs), got shape {acts.shape}")
    k = basis_size(basis)
    held = basis[:, :k]
    rep = acts.T  # R [in, n]
    total = float(np.sum(rep**2))
    if total == 0.0 or k == width:
        return jnp.asarray(basis, jnp.float32)
    residual = rep - held @ (held.T @ rep)
    u, s, _ = np.linalg.svd(residual, full_matrices=False)
    captured = (total - float(np.sum(residual**2))) / total  # energy already inside span(U)
    gains = np.cumsum(s**2) / total
    if captured >= threshold:
        extra = 0
    else:
        # The first count of residual directions with captured + gain >= ε (all of them if rounding falls short).
        reached = np.nonzero(captured + gains >= threshold - 1e-12)[0]
        extra = int(reached[0]) + 1 if reached.size else int(np.sum(s > 0))
    extra = min(extra, width - k)
    # Re-orthonormalise held + new columns (QR): the residual's singular vectors are orthogonal to U only up
    # to rounding, which accumulates over many tasks.
    q, _ = np.linalg.qr(np.concatenate([held, u[:, :extra]], axis=1))
    out = np.zeros((width, width))
    out[:, : k + extra] = q
    return jnp.asarray(out, jnp.float32)


def project(grad: jax.Array, basis: jax.Array) -> jax.Array:
    """g − U (Uᵀ g) for a kernel gradient g [in, out] and a basis U [in, k], k <= in (zero columns are padding:
    the padded [in, in] form, or its first columns `truncate_basis` keeps, which costs in·k·out, not in²·out)."""
    if grad.ndim != 2 or basis.ndim != 2 or basis.shape[0] != grad.shape[0] or basis.shape[1] > grad.shape[0]:
        raise ValueError(f"project needs a kernel gradient [in, out] and a basis [in, k] with k <= in; got "
                         f"gradient {grad.shape} and basis {basis.shape}")
    basis = basis.astype(grad.dtype)
    return grad - basis @ (basis.T @ grad)


def truncate_basis(basis: Any, multiple: int = 32) -> jax.Array:
    """The first columns of a padded basis [in, in] that hold its k vectors, rounded up to a multiple of
    `multiple` (at least `multiple`, at most in): [in, k'] with the same projection and few distinct shapes, so
    a jitted step recompiles only when k crosses a multiple."""
    if not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"multiple must be an integer >= 1, got {multiple!r}")
    width = _check_basis(basis).shape[0]
    keep = min(width, max(multiple, -(-basis_size(basis) // multiple) * multiple))
    return jnp.asarray(basis)[:, :keep]


def _projected(updates: Any, bases: Any) -> Any:
    """Projects the leaves of `updates` that have a basis (`bases`: a tree like params, None for leaves
    without one)."""
    if bases is None:
        return updates
    try:
        return jax.tree.map(lambda b, u: u if b is None else project(u, b), bases, updates,
                            is_leaf=lambda x: x is None)
    except ValueError as error:
        raise ValueError(f"bases must be a tree like the parameters with a [in, in] basis or None per leaf: "
                         f"{error}") from error


def project_gradients() -> optax.GradientTransformationExtraArgs:
    """An optax transformation projecting each kernel update off its layer's basis.

    The bases arrive as the extra argument `bases` of `update` (a tree like params: a padded [in, in] basis for
    each projected kernel, None elsewhere; `bases=None` or absent: identity), so one jitted step serves every
    task while the bases grow.
    """

    def init_fn(params: Any) -> optax.EmptyState:
        del params
        return optax.EmptyState()

    def update_fn(updates: Any, state: optax.EmptyState, params: Any = None, *, bases: Any = None,
                  **extra_args: Any) -> tuple[Any, optax.EmptyState]:
        del params, extra_args
        return _projected(updates, bases), state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
