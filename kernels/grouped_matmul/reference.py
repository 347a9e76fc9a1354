"""The grouped matmul as a one-hot contraction: the readable oracle of the ragged_dot path.

    out[m] = x[m] @ w[group_ids[m]]      (group_ids[m] = G: a dropped row, out[m] = 0)

A one-hot [M, G] matrix selects each row's weights after every row was multiplied by all G matrices, so
the memory grows as O(M·G·N): for tests and small expert counts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def grouped_matmul(x: jax.Array, w: jax.Array, group_ids: jax.Array) -> jax.Array:
    """x [M, K], w [G, K, N], group_ids [M] int in [0, G] -> [M, N] in x's dtype (float32 accumulation)."""
    one_hot = jax.nn.one_hot(group_ids, w.shape[0], dtype=x.dtype)  # id G -> an all-zero row
    every_group = jnp.einsum("mk,gkn->mgn", x, w.astype(x.dtype), preferred_element_type=jnp.float32)
    return jnp.einsum("mgn,mg->mn", every_group, one_hot.astype(jnp.float32)).astype(x.dtype)
