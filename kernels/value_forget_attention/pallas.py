"""Pallas value-forget attention (FiX): `pl.pallas_call` forward and backward kernels behind a `jax.custom_vjp`.

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md), not read from code.

The kernels are GPU style (Pallas Triton) and run with `interpret=True` off GPU; api.py registers this path
for the CPU backend only, because the compiled lowering has not been checked on a device. The kernels live
in `pallas_fwd` and `pallas_bwd`; this module pads T to a multiple of the block, lays out the scalar gate
row as [B, H, Tp] float32, and wires the VJP: the residuals are (inputs, u in float32, lse), dq and dk/dv
come from two kernels, and the gate gradients are segmented reverse cumsums (in XLA) of

    dΛ^f_i = Σ_j dS_ij − Σ_j dS_ji            (row sums minus column sums, as in FoX)
    dΛ^v_i = du_i ⊙ u_i − v_i ⊙ dv_i           (dv_i: the gradient of v_i for this query head)
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
from icml26zoo.kernels.value_forget_attention.pallas_bwd import dkv_kernel, dq_kernel
from icml26zoo.kernels.value_forget_attention.pallas_fwd import fwd_kernel

DEFAULT_BLOCK_SIZE = 64
_F32 = jnp.float32


class _Specs:
    """BlockSpecs over the grid (batch, query head, block) for padded length tp, block c and GQA groups."""

    def __init__(self, tp: int, c: int, d: int, dv: int, groups: int):
        def tile(rows: int, width: int, kv: bool) -> pl.BlockSpec:
            head = (lambda h: h // groups) if kv else (lambda h: h)
            if rows == c:
                return pl.BlockSpec((None, c, None, width), lambda b, h, i: (b, i, head(h), 0))
            return pl.BlockSpec((None, tp, None, width), lambda b, h, i: (b, 0, head(h), 0))

        self.q_blk, self.q_full = tile(c, d, False), tile(tp, d, False)
        self.k_blk, self.k_full = tile(c, d, True), tile(tp, d, True)
        self.v_blk, self.v_full = tile(c, dv, True), tile(tp, dv, True)
        # Per query head, Dv wide: the value gate, u, du and the per-head dv.
        self.hv_blk, self.hv_full = tile(c, dv, False), tile(tp, dv, False)
        self.row_full, self.row_blk, self.seg_full = tiles.row_specs(tp, c)


def _specs(q: jax.Array, k: jax.Array, v: jax.Array, c: int) -> _Specs:
    return _Specs(q.shape[1], c, q.shape[3], v.shape[3], q.shape[2] // k.shape[2])


def _forward(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None, seg: jax.Array | None,
             scale: float, c: int, interpret: bool) -> list[jax.Array]:
    """q [B,Tp,H,D], k [B,Tp,Hkv,D], v [B,Tp,Hkv,Dv], av [B,Tp,H,Dv] f32, af [B,H,Tp] f32 | None,
    seg [B,Tp] | None -> u [B,Tp,H,Dv] f32, lse [B,H,Tp] f32."""
    b, tp, h, _ = q.shape
    sp = _specs(q, k, v, c)
    kernel = functools.partial(fwd_kernel, c=c, scale=scale, has_fgate=af is not None, has_seg=seg is not None)
    return tiles.grid_call(
        kernel, "value_forget_attention_fwd", c,
        [(q, sp.q_blk), (k, sp.k_full), (v, sp.v_full), (av, sp.hv_full), (af, sp.row_full), (seg, sp.seg_full)],
        [(sp.hv_blk, jax.ShapeDtypeStruct(av.shape, _F32)), (sp.row_blk, jax.ShapeDtypeStruct((b, h, tp), _F32))],
        interpret)


def _backward(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None, seg: jax.Array | None,
              u: jax.Array, lse: jax.Array, du: jax.Array, scale: float, c: int, interpret: bool) -> tuple:
    """dq, dk, dv (input dtypes), d log_vgate [B,Tp,H,Dv] f32 and d log_fgate [B,H,Tp] f32 (or None)."""
    b, tp, h, d = q.shape
    hkv = k.shape[2]
    sp = _specs(q, k, v, c)
    has_fgate, has_seg = af is not None, seg is not None
    du = du.astype(_F32)
    delta = jnp.swapaxes(jnp.sum(du * u, axis=-1), 1, 2)  # δ_i = du_i · u_i, [B,H,Tp]
    flags = dict(c=c, scale=scale, has_fgate=has_fgate, has_seg=has_seg)
    rows = [(sp.row_blk, jax.ShapeDtypeStruct((b, h, tp), _F32))] if has_fgate else []

    dq_out = tiles.grid_call(
        functools.partial(dq_kernel, **flags), "value_forget_attention_dq", c,
        [(q, sp.q_blk), (k, sp.k_full), (v, sp.v_full), (av, sp.hv_full), (af, sp.row_full), (seg, sp.seg_full),
         (du, sp.hv_blk), (lse, sp.row_blk), (delta, sp.row_blk)],
        [(sp.q_blk, jax.ShapeDtypeStruct(q.shape, q.dtype))] + rows, interpret)

    # dk and dv per query head, summed over the GQA group below; dv per head also feeds dΛ^v.
    dkv_out = tiles.grid_call(
        functools.partial(dkv_kernel, n=tp // c, **flags), "value_forget_attention_dkv", c,
        [(q, sp.q_full), (k, sp.k_blk), (v, sp.v_blk), (av, sp.hv_full), (af, sp.row_full), (seg, sp.seg_full),
         (du, sp.hv_full), (lse, sp.row_full), (delta, sp.row_full)],
        [(sp.q_blk, jax.ShapeDtypeStruct(q.shape, _F32)), (sp.hv_blk, jax.ShapeDtypeStruct(av.shape, _F32))] + rows,
        interpret)

    def group_sum(x: jax.Array, like: jax.Array) -> jax.Array:
        return x.reshape(b, tp, hkv, h // hkv, x.shape[3]).sum(axis=3).astype(like.dtype)

    dv_per_head = dkv_out[1]
    v_per_head = jnp.repeat(v.astype(_F32), h // hkv, axis=2)
    dlam_v = jnp.transpose(du * u - v_per_head * dv_per_head, (0, 2, 3, 1))  # [B,H,Dv,Tp]
    dav = segmented_reverse_cumsum(dlam_v, None if seg is None else seg[:, None, None, :])
    daf = None
    if has_fgate:
        daf = segmented_reverse_cumsum(dq_out[1] - dkv_out[2], None if seg is None else seg[:, None, :])
    return dq_out[0], group_sum(dkv_out[0], k), group_sum(dv_per_head, v), jnp.transpose(dav, (0, 3, 1, 2)), daf


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8))
def _attention(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None, seg: jax.Array | None,
               scale: float, c: int, interpret: bool) -> jax.Array:
    return _forward(q, k, v, av, af, seg, scale, c, interpret)[0]


def _attention_fwd(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None,
                   seg: jax.Array | None, scale: float, c: int, interpret: bool) -> tuple[jax.Array, tuple]:
    u, lse = _forward(q, k, v, av, af, seg, scale, c, interpret)
    return u, (q, k, v, av, af, seg, u, lse)


def _attention_bwd(scale: float, c: int, interpret: bool, res: tuple, du: jax.Array) -> tuple:
    q, k, v, av, af, seg, u, lse = res
    dq, dk, dv, dav, daf = _backward(q, k, v, av, af, seg, u, lse, du, scale, c, interpret)
    return dq, dk, dv, dav, daf, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def value_forget_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array, *,
                           log_fgate: jax.Array | None = None, scale: float | None = None,
                           segment_ids: jax.Array | None = None, block_size: int | None = None,
                           interpret: bool | None = None) -> jax.Array:
    """Pallas FiX attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k [B, T, Hkv, D]; v [B, T, Hkv, Dv]; log_vgate [B, T, H, Dv] (≤ 0);
    log_fgate [B, T, H] (≤ 0) or None; segment_ids [B, T] int or None; block_size None means 64.
    interpret=None means "interpret unless the backend is a GPU".
    Returns u [B, T, H, Dv] in v.dtype: Σ_j P_ij exp(Λ^v_i − Λ^v_j) ⊙ v_j, softmax-normalized, no RMSNorm.
    """
    t, d = q.shape[1], q.shape[3]
    scale = d**-0.5 if scale is None else float(scale)
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    c, tp = block_length(t, DEFAULT_BLOCK_SIZE if block_size is None else block_size)

    def pad(x: jax.Array) -> jax.Array:
        return pad_time(x, tp - t)

    av = pad(log_vgate.astype(_F32))
    af = None if log_fgate is None else jnp.swapaxes(pad(log_fgate.astype(_F32)), 1, 2)
    seg = None if segment_ids is None else pad(segment_ids.astype(jnp.int32))
    u = _attention(pad(q), pad(k), pad(v), av, af, seg, scale, c, interpret)
    return u[:, :t].astype(v.dtype)
