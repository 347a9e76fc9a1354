"""Capacity-limited dispatch for mixture-of-experts feed-forwards: how many assignments an expert may take,
and which (token, slot) assignments it keeps. The experts themselves run as one grouped matmul per projection
(`icml26zoo.kernels.grouped_matmul`); a dropped assignment gets the group id E there (a zero output row).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_positive


def expert_capacity(num_tokens: int, top_k: int, num_experts: int, capacity_factor: float | None) -> int | None:
    """Assignments one expert may take: ceil(capacity_factor · tokens · k / experts); None means no limit."""
    if capacity_factor is None:
        return None
    check_positive("capacity_factor", capacity_factor)
    return max(1, math.ceil(capacity_factor * num_tokens * top_k / num_experts))


def capacity_keep(indices: jax.Array, mask: jax.Array, num_experts: int, capacity: int | None) -> jax.Array:
    """Which assignments survive expert capacity: indices [N, k] int, mask [N] bool (real tokens) -> [N, k] bool.

    Priority goes slot by slot (every token's first choice before any second choice), then token order, as
    in the Switch Transformer. Padding tokens (mask False) are never kept and take no capacity.
    """
    keep = jnp.broadcast_to(mask[:, None], indices.shape)
    if capacity is None:
        return keep
    slot_major = indices.T.reshape(-1)  # [k·N]: all first choices, then all second choices, ...
    one_hot = jax.nn.one_hot(slot_major, num_experts, dtype=jnp.int32) * keep.T.reshape(-1, 1).astype(jnp.int32)
    position = jnp.sum((jnp.cumsum(one_hot, axis=0) - 1) * one_hot, axis=1)  # place in its expert's queue
    within = (position < capacity).reshape(indices.shape[1], indices.shape[0]).T
    return keep & within
