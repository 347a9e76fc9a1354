"""The causal long convolution as a direct O(T²) sum in float32: the oracle for the FFT path.

    y[b, t, d] = Σ_{s ≤ t, seg(b, s) = seg(b, t)} h[t − s, d] · u[b, s, d]        (h[k] = 0 for k ≥ L)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def toeplitz(h: jax.Array, length: int) -> jax.Array:
    """h [L, D] -> [T, T, D] with entry (t, s) = h[t − s] for 0 ≤ t − s < L, else 0 (lower triangular)."""
    lag = jnp.arange(length)[:, None] - jnp.arange(length)[None, :]  # [T, T]
    valid = (lag >= 0) & (lag < h.shape[0])
    taps = h.astype(jnp.float32)[jnp.clip(lag, 0, h.shape[0] - 1)]  # [T, T, D]
    return jnp.where(valid[..., None], taps, 0.0)


def causal_long_conv(u: jax.Array, h: jax.Array, *, segment_ids: jax.Array | None = None) -> jax.Array:
    """u [B, T, D], h [L, D] (L ≤ T), segment_ids [B, T] int or None -> y [B, T, D] in u.dtype.

    Builds the full [T, T, D] Toeplitz tensor (O(T²·D) memory): for tests and small T only.
    """
    length = u.shape[1]
    kernel = toeplitz(h, length)  # [T, T, D]
    u32 = u.astype(jnp.float32)
    if segment_ids is None:
        y = jnp.einsum("tsd,bsd->btd", kernel, u32, precision=jax.lax.Precision.HIGHEST)
    else:
        same = segment_ids[:, :, None] == segment_ids[:, None, :]  # [B, T, T]: no mixing across segments
        y = jnp.einsum("btsd,bsd->btd", jnp.where(same[..., None], kernel[None], 0.0), u32,
                       precision=jax.lax.Precision.HIGHEST)
    return y.astype(u.dtype)
