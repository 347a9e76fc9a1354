"""Block layout of the blocked softmax-attention paths (FoX, FiX): time padded to whole blocks, block index first.

`[B, T, H, ...]` arrays become `[N, B, Hkv, G, C, ...]` (N blocks of C steps, H = Hkv·G query heads grouped
by their key/value head), so a `lax.scan` over blocks reads `x[i]`. Padded steps sit at the end: a padded key
is only visible to padded queries, which are dropped by `from_blocks(...)[:, :T]`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.gate_sums import segmented_reverse_cumsum
from icml26zoo.kernels._common.layout import pad_time, padded_length


def block_length(length: int, block_size: int) -> tuple[int, int]:
    """(C, Tp): the block C = min(block_size, T) (at least 1) and the padded length Tp, a multiple of C."""
    c = max(1, min(block_size, length))
    return c, padded_length(length, c)


def to_blocks(x: jax.Array, block: int, num_kv_heads: int) -> jax.Array:
    """[B, Tp, H, *F] -> [N, B, Hkv, G, C, *F] (Tp = N·C, H = Hkv·G)."""
    b, tp, h = x.shape[:3]
    x = x.reshape(b, tp // block, block, num_kv_heads, h // num_kv_heads, *x.shape[3:])
    return jnp.moveaxis(x, (1, 3, 4), (0, 2, 3))


def from_blocks(x: jax.Array) -> jax.Array:
    """[N, B, Hkv, G, C, D] -> [B, N·C, Hkv·G, D]."""
    n, b, hkv, g, c, d = x.shape
    return jnp.moveaxis(x, (0, 2, 3), (1, 3, 4)).reshape(b, n * c, hkv * g, d)


def padded_blocks(x: jax.Array, block: int, padded: int, num_kv_heads: int) -> jax.Array:
    """x [B, T, H, *F] zero-padded to `padded` steps, then `to_blocks`: [N, B, Hkv, G, C, *F]."""
    return to_blocks(pad_time(x, padded - x.shape[1]), block, num_kv_heads)


def kv_blocks(x: jax.Array, block: int, padded: int) -> jax.Array:
    """Keys or values [B, T, Hkv, F] -> [N, B, Hkv, C, F] (one head per group)."""
    return padded_blocks(x, block, padded, x.shape[2])[:, :, :, 0]


def gate_blocks(log_gate: jax.Array | None, block: int, padded: int, num_kv_heads: int) -> jax.Array | None:
    """A scalar log gate [B, T, H] (or None) -> float32 [N, B, Hkv, G, C] (or None)."""
    if log_gate is None:
        return None
    return padded_blocks(log_gate.astype(jnp.float32)[..., None], block, padded, num_kv_heads)[..., 0]


def segment_blocks(segment_ids: jax.Array | None, block: int, padded: int) -> jax.Array | None:
    """segment_ids [B, T] int (or None) -> int32 [N, B, C] (or None)."""
    if segment_ids is None:
        return None
    seg = pad_time(segment_ids.astype(jnp.int32), padded - segment_ids.shape[1])
    return seg.reshape(-1, padded // block, block).swapaxes(0, 1)


class AttentionBlocks(NamedTuple):
    """One attention call in block layout: q [N, B, Hkv, G, C, D], k [N, B, Hkv, C, D], v [N, B, Hkv, C, Dv],
    seg [N, B, C] (or None), the logit scale, and the layout (block C, padded length Tp, Hkv)."""

    q: jax.Array
    k: jax.Array
    v: jax.Array
    seg: jax.Array | None
    scale: float
    block: int
    padded: int
    num_kv_heads: int


def attention_blocks(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None, scale: float | None,
                     block_size: int) -> AttentionBlocks:
    """q [B, T, H, D], k [B, T, Hkv, D], v [B, T, Hkv, Dv], segment_ids [B, T] or None -> block layout.

    scale None means D**-0.5; the block is C = min(block_size, T) and T is zero-padded to whole blocks.
    """
    t, d = q.shape[1], q.shape[3]
    hkv = k.shape[2]
    c, tp = block_length(t, block_size)
    return AttentionBlocks(q=padded_blocks(q, c, tp, hkv), k=kv_blocks(k, c, tp), v=kv_blocks(v, c, tp),
                           seg=segment_blocks(segment_ids, c, tp), scale=d**-0.5 if scale is None else float(scale),
                           block=c, padded=tp, num_kv_heads=hkv)


def pick(x: jax.Array | None, i: jax.Array | int) -> jax.Array | None:
    """Block i of a block-major array, or None for an absent input."""
    return None if x is None else x[i]


def blocked_reverse_cumsum(d_lambda: jax.Array, seg: jax.Array | None) -> jax.Array:
    """Per-block dΛ [N, ..., C] -> d log gate = Σ_{i ≥ t, same segment} dΛ_i, in the same block layout.

    seg: the [N, B, C] segment blocks or None; the sum runs in time order over the whole padded sequence.
    """
    n, c = d_lambda.shape[0], d_lambda.shape[-1]
    flat = jnp.moveaxis(d_lambda, 0, -2).reshape(*d_lambda.shape[1:-1], n * c)
    seg_flat = None
    if seg is not None:
        seg_flat = jnp.moveaxis(seg, 0, 1).reshape(seg.shape[1], *([1] * (flat.ndim - 2)), n * c)
    summed = segmented_reverse_cumsum(flat, seg_flat)
    return jnp.moveaxis(summed.reshape(*d_lambda.shape[1:-1], n, c), -2, 0)
