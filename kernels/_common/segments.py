"""Packed-sequence helpers with one convention for every op.

`segment_ids` is `[B, T]` int (or None: one segment per row). A *start* is a position t > 0 whose id
differs from position t − 1: the state resets there. Position 0 is never a start, because
`initial_state` (or a decode cache) applies to the first segment of each row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def segment_starts(segment_ids: jax.Array | None, batch: int, length: int) -> jax.Array:
    """[B, T] bool: True where a new segment starts after position 0 (all False when `segment_ids` is None)."""
    if segment_ids is None:
        return jnp.zeros((batch, length), dtype=bool)
    first = jnp.zeros((batch, 1), dtype=bool)
    return jnp.concatenate([first, segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)


def segment_counts(segment_ids: jax.Array | None, batch: int, length: int) -> jax.Array:
    """[B, T] int32: the number of starts up to and including t, so "same segment" is `k_t == k_s`.

    Works for any packed ids, monotone or not (two tokens are in one segment when no start lies between).
    """
    return jnp.cumsum(segment_starts(segment_ids, batch, length).astype(jnp.int32), axis=1)


def reverse_cumsum(x: jax.Array, axis: int = -1) -> jax.Array:
    """Σ_{s≥t} x_s along `axis`."""
    return jnp.flip(jnp.cumsum(jnp.flip(x, axis), axis=axis), axis)
