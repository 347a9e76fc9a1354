"""Surplus kernels k(x, y) of the GCF layer, evaluated on all pairs: x [B, n], y [J, m] -> [B, J].

    inner_product               ⟨x, y⟩ (n = m): its finitely convex functions are the max-affine convex functions
    negative_squared_distance   −‖x − y‖²: with sense "max", the c-concave potentials of the quadratic cost c = ‖x − y‖²
    squared_distance            ‖x − y‖² (the quadratic cost itself): with sense "min", u(x) = min_j ‖x − y_j‖² − b_j,
                                the form the OT dual uses here (∇u(x) = 2(x − y_{j*}), so T(x) = x − ½∇u(x) = y_{j*})
A kernel may also be any callable pair_kernel(x [n], y [m]) -> scalar; `pairwise` maps it over all pairs.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_choice

PairKernel = Callable[[jax.Array, jax.Array], jax.Array]


def inner_product(x: jax.Array, y: jax.Array) -> jax.Array:
    """⟨x_b, y_j⟩ [B, J]."""
    return x @ y.T


def squared_distance(x: jax.Array, y: jax.Array) -> jax.Array:
    """‖x_b − y_j‖² [B, J], as a sum of squared differences (exact at x = y, unlike the expanded form)."""
    return jnp.sum(jnp.square(x[:, None, :] - y[None, :, :]), axis=-1)


def negative_squared_distance(x: jax.Array, y: jax.Array) -> jax.Array:
    """−‖x_b − y_j‖² [B, J]."""
    return -squared_distance(x, y)


KERNELS = {"inner_product": inner_product, "squared_distance": squared_distance,
           "negative_squared_distance": negative_squared_distance}
# The kernels whose x and y must have the same dimension.
SAME_DIMENSION = frozenset(KERNELS)


def pairwise(pair_kernel: PairKernel) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """The all-pairs form [B, J] of a kernel on one pair (x [n], y [m]) -> scalar."""
    return jax.vmap(jax.vmap(pair_kernel, in_axes=(None, 0)), in_axes=(0, None))


def resolve_kernel(kernel: str | PairKernel) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """The all-pairs function of a kernel name (KERNELS) or of a callable on one pair."""
    if callable(kernel):
        return pairwise(kernel)
    return KERNELS[check_choice("kernel", kernel, tuple(KERNELS))]
