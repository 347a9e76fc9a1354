"""Rotary position embeddings (RoPE, Su et al. 2021) as pure functions.

Layout is "rotate half": the first and second halves of the head dimension form the (x1, x2) pairs
rotated by angle `position · theta^(-2i/D)`. Positions are explicit `[B, T]` int32 arrays so that
packed sequences restart at 0 in every segment and decoding continues from the cache index.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def rope_inverse_frequencies(head_dim: int, theta: float) -> jax.Array:
    """[head_dim // 2] float32: theta^(-2i / head_dim) for i = 0 .. head_dim/2 - 1."""
    if head_dim % 2:
        raise ValueError(f"head_dim must be even for RoPE, got {head_dim}")
    exponents = jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim
    return jnp.asarray(theta, jnp.float32) ** -exponents


def apply_rope(x: jax.Array, positions: jax.Array, *, theta: float) -> jax.Array:
    """Rotates x: [B, T, H, D] by positions: [B, T] (int). Returns [B, T, H, D] in x.dtype.

    Angles and the rotation run in float32: bfloat16 angles are off by whole radians at position ~1000.
    """
    if x.ndim != 4:
        raise ValueError(f"x must have shape [B, T, H, D], got shape {x.shape}")
    if positions.shape != x.shape[:2] or not jnp.issubdtype(positions.dtype, jnp.integer):
        raise ValueError(
            f"positions must be an integer array of shape {x.shape[:2]} (x is [B, T, H, D] = {x.shape}), "
            f"got {positions.dtype} {positions.shape}"
        )
    inv_freq = rope_inverse_frequencies(x.shape[-1], theta)
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, D/2]
    cos = jnp.cos(angles)[:, :, None, :]  # [B, T, 1, D/2], broadcast over heads
    sin = jnp.sin(angles)[:, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)
