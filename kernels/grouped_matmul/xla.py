"""The grouped matmul by `jax.lax.ragged_dot` on rows sorted by group: memory independent of the group count.

Rows are sorted by group id (stable), the group sizes counted, and one ragged_dot multiplies each contiguous
run of rows by its group's matrix. Dropped rows (id G) sort last, beyond the sum of the group sizes, where
ragged_dot's output is unspecified: they are zeroed explicitly. The inverse permutation restores row order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def grouped_matmul(x: jax.Array, w: jax.Array, group_ids: jax.Array) -> jax.Array:
    """x [M, K], w [G, K, N], group_ids [M] int in [0, G] -> [M, N] in x's dtype (float32 accumulation)."""
    num_groups = w.shape[0]
    order = jnp.argsort(group_ids, stable=True)
    group_sizes = jnp.bincount(group_ids, length=num_groups + 1)[:num_groups].astype(jnp.int32)
    sorted_out = jax.lax.ragged_dot(x[order], w.astype(x.dtype), group_sizes, preferred_element_type=jnp.float32)
    sorted_out = jnp.where((group_ids[order] < num_groups)[:, None], sorted_out, 0.0)
    inverse = jnp.argsort(order)
    return sorted_out[inverse].astype(x.dtype)
