"""The NOTEARS acyclicity function h(A) = tr(exp(A ∘ A)) − d and its analytic gradient (Zheng et al., "DAGs with NO
TEARS", arXiv 1803.01422): h(A) = 0 exactly when the weighted adjacency A [d, d] (A[k, j] ≠ 0: an edge k → j) has
no directed cycle, and h > 0 otherwise (tr(exp(B)) counts weighted closed walks of every length)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_float_array

__all__ = ["acyclicity", "acyclicity_grad", "check_adjacency"]


def check_adjacency(field: str, adjacency: object, *, allow_self_loops: bool = False) -> np.ndarray:
    """`adjacency` as a float64 array [d, d], d >= 2, finite; with allow_self_loops=False its diagonal must be 0.
    ValueError names `field`, the value's shape (or the offending node) and what was expected."""
    array = np.asarray(adjacency)
    if array.ndim != 2 or array.shape[0] != array.shape[1] or array.shape[0] < 2:
        raise ValueError(f"{field} must be a square adjacency matrix [d, d] with d >= 2, got shape {array.shape}")
    if array.dtype == bool:
        array = array.astype(np.float64)
    check_float_array(field, array.astype(np.float64) if array.dtype.kind in "iu" else array, (None, None), "[d, d]")
    array = array.astype(np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{field} must be finite, got {int(np.sum(~np.isfinite(array)))} non-finite entries")
    loops = np.flatnonzero(np.diagonal(array) != 0)
    if loops.size and not allow_self_loops:
        raise ValueError(f"{field} must have no self-loops (zero diagonal), got non-zero diagonal at nodes "
                         f"{loops.tolist()}")
    return array


def acyclicity(adjacency: jax.Array) -> jax.Array:
    """h(A) = tr(exp(A ∘ A)) − d for A [d, d] (any real weights); a scalar >= 0, 0 iff A is a DAG."""
    return jnp.trace(jax.scipy.linalg.expm(adjacency * adjacency)) - adjacency.shape[0]


def acyclicity_grad(adjacency: jax.Array) -> jax.Array:
    """∇h(A) = 2 A ∘ exp(A ∘ A)ᵀ [d, d], the closed form (checked against jax.grad in the tests)."""
    return 2.0 * adjacency * jax.scipy.linalg.expm(adjacency * adjacency).T
