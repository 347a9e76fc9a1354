"""The causal long convolution by FFT (Hyena, arXiv 2302.10866), and an exact blocked form for packed rows.

Without segments: u and h are zero-padded to n ≥ 2T (the next power of two, for fast FFT sizes) before
`rfft`, so the product of spectra is a *linear* convolution of length ≥ 2T − 1 and its first T entries are
the causal outputs. Padding only to T would make the convolution circular: y_t would pick up h_{t−s+n} u_s
for s > t, i.e. future tokens would leak into the past. Cost O(B·D·T log T).

With segment_ids (packed rows): the sum must stop at each token's segment start, which is not a
convolution any more (the cut depends on t). The FFT cannot express that for an unknown number of
segments, so this path is the exact masked (block-diagonal) Toeplitz sum, evaluated one block of
`_BLOCK` query rows at a time to keep the memory at O(B·_BLOCK·T·D) instead of O(B·T²·D). It costs
O(B·T²·D) compute: correct, but meant for moderate T. The zoo only packs short rows in tests and the
tiny presets; an FFT path for packed rows (e.g. one FFT per segment with a static segment bound) is future work.
A batch in which every row is a single segment is detected at run time (`lax.cond`) and takes the FFT.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_BLOCK = 64  # query rows per step of the packed (segmented) path


def _fft_size(length: int) -> int:
    """The smallest power of two ≥ 2·length: ≥ 2T − 1 avoids wrap-around, a power of two is fast."""
    return 1 << max(1, (2 * length - 1).bit_length())


def _fft_conv(u32: jax.Array, h32: jax.Array) -> jax.Array:
    """u [B, T, D] float32, h [L, D] float32 (L ≤ T) -> [B, T, D] float32, the causal linear convolution."""
    length = u32.shape[1]
    n = _fft_size(length)
    u_f = jnp.fft.rfft(u32, n=n, axis=1)  # rfft zero-pads to n: no circular wrap into t < T
    h_f = jnp.fft.rfft(h32, n=n, axis=0)
    # irfft with the default "backward" norm divides by n once: the plain linear convolution.
    return jnp.fft.irfft(u_f * h_f[None], n=n, axis=1)[:, :length]


def _segmented_conv(u32: jax.Array, h32: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """Exact Σ_{s ≤ t, seg(s) = seg(t)} h[t − s] u[s], in blocks of query rows: [B, T, D] float32."""
    batch, length, dim = u32.shape
    block = min(_BLOCK, length)
    num_blocks = -(-length // block)
    padded = num_blocks * block
    seg = jnp.pad(segment_ids, ((0, 0), (0, padded - length)), constant_values=-1)
    source = jnp.arange(length)

    def one_block(start: jax.Array) -> jax.Array:
        rows = start + jnp.arange(block)  # [C] query positions
        lag = rows[:, None] - source[None, :]  # [C, T]
        valid = (lag >= 0) & (lag < h32.shape[0])
        taps = jnp.where(valid[..., None], h32[jnp.clip(lag, 0, h32.shape[0] - 1)], 0.0)  # [C, T, D]
        seg_rows = jax.lax.dynamic_slice_in_dim(seg, start, block, axis=1)  # [B, C]
        same = seg_rows[:, :, None] == segment_ids[:, None, :]  # [B, C, T]
        return jnp.einsum("bcs,csd,bsd->bcd", same.astype(jnp.float32), taps, u32,
                          precision=jax.lax.Precision.HIGHEST)

    starts = jnp.arange(num_blocks, dtype=jnp.int32) * block
    blocks = jax.lax.map(one_block, starts)  # [num_blocks, B, C, D]
    return jnp.moveaxis(blocks, 0, 1).reshape(batch, padded, dim)[:, :length]


def direct_long_conv(u: jax.Array, h: jax.Array, *, segment_ids: jax.Array | None = None) -> jax.Array:
    """The blocked masked sum for every row (no FFT): exactly causal, O(B·T²·D) compute -> [B, T, D] u.dtype.

    FFT round-off spreads ~1e-7 relative of every input over all outputs, so under the FFT a future token's
    gradient into a past output is tiny but not zero. This path masks before summing: an exact zero.
    """
    seg = jnp.zeros(u.shape[:2], jnp.int32) if segment_ids is None else segment_ids
    return _segmented_conv(u.astype(jnp.float32), h.astype(jnp.float32), seg).astype(u.dtype)


def causal_long_conv(u: jax.Array, h: jax.Array, *, segment_ids: jax.Array | None = None) -> jax.Array:
    """u [B, T, D], h [L, D] (L ≤ T), segment_ids [B, T] int or None -> y [B, T, D] in u.dtype.

    Computed in float32 whatever the input dtype (FFT round-off in bfloat16 would swamp short filters).
    """
    u32, h32 = u.astype(jnp.float32), h.astype(jnp.float32)
    if segment_ids is None:
        y = _fft_conv(u32, h32)
    else:
        # A batch whose rows each hold one segment (documents longer than the row, one sequence per row)
        # needs no mask: take the FFT at run time and keep the O(T²) exact sum for truly packed batches.
        one_segment_per_row = jnp.all(segment_ids == segment_ids[:, :1])
        y = jax.lax.cond(one_segment_per_row, _fft_conv, lambda u, h: _segmented_conv(u, h, segment_ids), u32, h32)
    return y.astype(u.dtype)
