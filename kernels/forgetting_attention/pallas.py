"""Pallas forgetting attention: `pl.pallas_call` forward and backward kernels behind a `jax.custom_vjp`.

On a GPU backend the kernels are compiled (Pallas Triton); elsewhere they run with `interpret=True`
(that is how CPU CI tests them). The kernels live in `pallas_fwd` and `pallas_bwd`; this module pads T to
a multiple of the block, lays out the gate row as [B, H, Tp] float32, and wires the VJP: the residuals
are (inputs, o, lse), dq and dk/dv come from two kernels, and d log_fgate is the reverse cumsum of the
dS row sums minus column sums (see `xla` for the derivation).

Note for GPU: Triton needs power-of-two block extents, so the padded length Tp (a full-sequence block
for K, V and the gate row) must be a power of two there; interpret mode has no such limit.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common.blocks import block_length
from icml26zoo.kernels._common.gate_sums import segmented_reverse_cumsum
from icml26zoo.kernels._common.layout import pad_time
from icml26zoo.kernels.forgetting_attention.pallas_bwd import dkv_kernel, dq_kernel
from icml26zoo.kernels.forgetting_attention.pallas_fwd import fwd_kernel

DEFAULT_BLOCK_SIZE = 64
_F32 = jnp.float32


class _Specs:
    """BlockSpecs over the grid (batch, query head, block) for a padded length tp and block c."""

    def __init__(self, tp: int, c: int, d: int, groups: int):
        self.blk = pl.BlockSpec((None, c, None, d), lambda b, h, i: (b, i, h, 0))
        self.kv_blk = pl.BlockSpec((None, c, None, d), lambda b, h, i: (b, i, h // groups, 0))
        self.full = pl.BlockSpec((None, tp, None, d), lambda b, h, i: (b, 0, h, 0))
        self.kv_full = pl.BlockSpec((None, tp, None, d), lambda b, h, i: (b, 0, h // groups, 0))
        self.row_full, self.row_blk, self.seg_full = tiles.row_specs(tp, c)


def _forward(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None, scale: float,
             c: int, interpret: bool) -> list[jax.Array]:
    """q [B,Tp,H,D], k/v [B,Tp,Hkv,D], a [B,H,Tp] f32 | None, seg [B,Tp] | None -> o, lse [B,H,Tp]."""
    b, tp, h, d = q.shape
    sp = _Specs(tp, c, d, h // k.shape[2])
    kernel = functools.partial(fwd_kernel, c=c, scale=scale, has_gate=a is not None,
                               has_seg=seg is not None)
    return tiles.grid_call(
        kernel, "forgetting_attention_fwd", c,
        [(q, sp.blk), (k, sp.kv_full), (v, sp.kv_full), (a, sp.row_full), (seg, sp.seg_full)],
        [(sp.blk, jax.ShapeDtypeStruct(q.shape, q.dtype)), (sp.row_blk, jax.ShapeDtypeStruct((b, h, tp), _F32))],
        interpret)


def _backward(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None, o: jax.Array,
              lse: jax.Array, do: jax.Array, scale: float, c: int,
              interpret: bool) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]:
    """Gradients dq, dk, dv (input dtypes) and d log_fgate [B,H,Tp] f32 (None without a gate)."""
    b, tp, h, d = q.shape
    hkv = k.shape[2]
    sp = _Specs(tp, c, d, h // hkv)
    has_gate, has_seg = a is not None, seg is not None
    delta = jnp.swapaxes(jnp.sum(do.astype(_F32) * o.astype(_F32), axis=-1), 1, 2)  # [B,H,Tp]
    flags = dict(c=c, scale=scale, has_gate=has_gate, has_seg=has_seg)
    rows = [(sp.row_blk, jax.ShapeDtypeStruct((b, h, tp), _F32))] if has_gate else []

    dq_out = tiles.grid_call(
        functools.partial(dq_kernel, **flags), "forgetting_attention_dq", c,
        [(q, sp.blk), (k, sp.kv_full), (v, sp.kv_full), (a, sp.row_full), (seg, sp.seg_full), (do, sp.blk),
         (lse, sp.row_blk), (delta, sp.row_blk)],
        [(sp.blk, jax.ShapeDtypeStruct(q.shape, q.dtype))] + rows, interpret)

    # dk, dv per query head, summed over the group below
    per_head = (sp.blk, jax.ShapeDtypeStruct(q.shape, _F32))
    dkv_out = tiles.grid_call(
        functools.partial(dkv_kernel, n=tp // c, **flags), "forgetting_attention_dkv", c,
        [(q, sp.full), (k, sp.kv_blk), (v, sp.kv_blk), (a, sp.row_full), (seg, sp.seg_full), (do, sp.full),
         (lse, sp.row_full), (delta, sp.row_full)],
        [per_head, per_head] + rows, interpret)

    def group_sum(x: jax.Array, like: jax.Array) -> jax.Array:
        return x.reshape(b, tp, hkv, h // hkv, d).sum(axis=3).astype(like.dtype)

    seg_rows = None if seg is None else seg[:, None, :]
    da = segmented_reverse_cumsum(dq_out[1] - dkv_out[2], seg_rows) if has_gate else None
    return dq_out[0], group_sum(dkv_out[0], k), group_sum(dkv_out[1], v), da


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _attention(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None, scale: float,
               c: int, interpret: bool) -> jax.Array:
    return _forward(q, k, v, a, seg, scale, c, interpret)[0]


def _attention_fwd(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None,
                   scale: float, c: int, interpret: bool) -> tuple[jax.Array, tuple]:
    o, lse = _forward(q, k, v, a, seg, scale, c, interpret)
    return o, (q, k, v, a, seg, o, lse)


def _attention_bwd(scale: float, c: int, interpret: bool, res: tuple, do: jax.Array) -> tuple:
    q, k, v, a, seg, o, lse = res
    dq, dk, dv, da = _backward(q, k, v, a, seg, o, lse, do, scale, c, interpret)
    return dq, dk, dv, da, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def forgetting_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None, *,
                         scale: float | None = None, segment_ids: jax.Array | None = None,
                         block_size: int = DEFAULT_BLOCK_SIZE, interpret: bool | None = None) -> jax.Array:
    """Pallas forgetting attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k, v [B, T, Hkv, D]; log_fgate [B, T, H] or None (plain causal attention);
    segment_ids [B, T] int or None. interpret=None means "interpret unless the backend is a GPU".
    Returns o [B, T, H, D] in q.dtype.
    """
    t, d = q.shape[1], q.shape[3]
    scale = d**-0.5 if scale is None else float(scale)
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    c, tp = block_length(t, block_size)

    def pad(x: jax.Array) -> jax.Array:
        return pad_time(x, tp - t)

    a = None if log_fgate is None else jnp.swapaxes(pad(log_fgate.astype(_F32)), 1, 2)
    seg = None if segment_ids is None else pad(segment_ids.astype(jnp.int32))
    o = _attention(pad(q), pad(k), pad(v), a, seg, scale, c, interpret)
    return o[:, :t]
