"""Grouped matmul and capacity-limited dispatch for mixture-of-experts feed-forwards.

`grouped_matmul(x, w, group_ids, implementation=)` multiplies every row of x by the weight matrix of its
group (its expert). Two paths compute the same thing:

  "dense"       the readable reference: a one-hot [M, G] matrix selects each row's weights, and every row
                is multiplied by all G matrices ([M, G, N] intermediate, memory growing with the experts);
  "ragged_dot"  rows sorted by group and one `jax.lax.ragged_dot` call (memory independent of G).

Rows whose group id equals G (the number of groups) are dropped: their output is exactly zero on both
paths. `capacity_keep` decides which (token, slot) assignments an expert with limited capacity keeps.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

IMPLEMENTATIONS = ("dense", "ragged_dot")


def _check(x: jax.Array, w: jax.Array, group_ids: jax.Array, implementation: str | None) -> str:
    if x.ndim != 2:
        raise ValueError(f"x must have shape [M, K], got shape {x.shape}")
    if w.ndim != 3 or w.shape[1] != x.shape[1]:
        raise ValueError(f"w must have shape [G, K, N] with K = {x.shape[1]} (x's), got shape {w.shape}")
    if group_ids.shape != x.shape[:1] or not jnp.issubdtype(group_ids.dtype, jnp.integer):
        raise ValueError(f"group_ids must be an integer array of shape [{x.shape[0]}], got "
                         f"{group_ids.dtype} {group_ids.shape}")
    name = "ragged_dot" if implementation is None else implementation
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be None or one of {list(IMPLEMENTATIONS)}, got {implementation!r}")
    return name


def dense_grouped_matmul(x: jax.Array, w: jax.Array, group_ids: jax.Array) -> jax.Array:
    """Reference: x [M, K], w [G, K, N], group_ids [M] in [0, G] -> [M, N]; id G gives a zero row."""
    one_hot = jax.nn.one_hot(group_ids, w.shape[0], dtype=x.dtype)  # id G -> all-zero row
    every_group = jnp.einsum("mk,gkn->mgn", x, w.astype(x.dtype), preferred_element_type=jnp.float32)
    return jnp.einsum("mgn,mg->mn", every_group, one_hot.astype(jnp.float32)).astype(x.dtype)


def ragged_grouped_matmul(x: jax.Array, w: jax.Array, group_ids: jax.Array) -> jax.Array:
    """`jax.lax.ragged_dot` on rows sorted by group: x [M, K], w [G, K, N], group_ids [M] in [0, G] -> [M, N].

    Dropped rows (id G) sort last and lie beyond the sum of the group sizes, where ragged_dot writes zeros.
    """
    num_groups = w.shape[0]
    order = jnp.argsort(group_ids, stable=True)
    group_sizes = jnp.bincount(group_ids, length=num_groups + 1)[:num_groups].astype(jnp.int32)
    sorted_out = jax.lax.ragged_dot(x[order], w.astype(x.dtype), group_sizes, preferred_element_type=jnp.float32)
    # Rows past the last group are unspecified by ragged_dot's contract; zero them explicitly.
    sorted_out = jnp.where((group_ids[order] < num_groups)[:, None], sorted_out, 0.0)
    inverse = jnp.argsort(order)
    return sorted_out[inverse].astype(x.dtype)


def grouped_matmul(
    x: jax.Array, w: jax.Array, group_ids: jax.Array, *, implementation: str | None = None
) -> jax.Array:
    """Row m of x [M, K] times w[group_ids[m]] ([G, K, N]) -> [M, N] in x's dtype (float32 accumulation).

    group_ids [M] int in [0, G]; G marks a dropped row (output zero). implementation: None (= "ragged_dot"),
    "dense" (one-hot reference, O(M·G·N) memory) or "ragged_dot".
    """
    name = _check(x, w, group_ids, implementation)
    if name == "dense":
        return dense_grouped_matmul(x, w, group_ids)
    return ragged_grouped_matmul(x, w, group_ids)


def expert_capacity(num_tokens: int, top_k: int, num_experts: int, capacity_factor: float | None) -> int | None:
    """Assignments one expert may take: ceil(capacity_factor · tokens · k / experts); None means no limit."""
    if capacity_factor is None:
        return None
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, int | float) or capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be None or a positive number, got {capacity_factor!r}")
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
