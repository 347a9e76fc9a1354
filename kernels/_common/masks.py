"""Attention masks of the materialized (reference) softmax-attention paths."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def attention_mask(length: int, segment_ids: jax.Array | None) -> jax.Array:
    """Causal (and same-segment) mask. segment_ids [B, T] or None -> bool [B or 1, 1, T, T]."""
    causal = jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]
    if segment_ids is None:
        return causal
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    return causal & same[:, None]
