"""ALiBi (Press, Smith, Lewis 2022): a per-head linear recency bias on attention logits instead of RoPE.

Head h adds `-slope_h · (i - j)` to the logit of query position i on key position j. Positions are the
explicit `[B, T]` arrays the mixers receive, so packed segments restart at 0 as with RoPE.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_int


def alibi_slopes(num_heads: int) -> np.ndarray:
    """ALiBi head slopes [num_heads], with the standard interleaved extension for non-powers of two."""
    check_int("num_heads", num_heads)

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: num_heads - closest]
    return np.asarray(slopes, np.float64)


def alibi_bias(query_positions: jax.Array, key_positions: jax.Array, num_heads: int) -> jax.Array:
    """The logit bias float32 [B, H, T, S] = -slope_h · (query_positions[b, i] - key_positions[b, j]).

    query_positions: [B, T] int; key_positions: [B, S] int (the same array in training, the cache slots
    when decoding). Pairs with j > i are masked by the caller, so their (positive) bias never matters.
    """
    if query_positions.ndim != 2 or key_positions.ndim != 2 or query_positions.shape[0] != key_positions.shape[0]:
        raise ValueError(f"query_positions [B, T] and key_positions [B, S] must share B, got shapes "
                         f"{query_positions.shape} and {key_positions.shape}")
    distance = query_positions[:, :, None].astype(jnp.float32) - key_positions[:, None, :].astype(jnp.float32)
    slopes = jnp.asarray(alibi_slopes(num_heads), jnp.float32)
    return -slopes[None, :, None, None] * distance[:, None]
