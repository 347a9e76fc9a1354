"""Pallas forgetting attention: `pl.pallas_call` forward and backward kernels behind a `jax.custom_vjp`.

Which Pallas lowering runs is chosen when the function is lowered, per platform (`lowering.by_platform`):
interpreted on CPU (the GPU-shaped kernel, or inside `lowering.interpret_as("tpu")` the TPU-shaped one under
the TPU interpreter), Triton on CUDA, Mosaic on TPU. Each branch lays the inputs out for its kernels
(`attention_tiles`: GPU [B, Tp, H, D] with D padded to a power of two, TPU head-major [B, H, Tp, D]; gate,
logsumexp and δ as [B, H, N, 1, C] rows) and returns mode-independent arrays, so the forward's residuals
(inputs, o, lse [B, H, T]) feed any branch of the backward. Block sizes come from `tuning.for_platform`
(a `TileConfig`).

The VJP: dq and dk/dv come from two kernels, and d log_fgate is the segmented reverse cumsum of the dS row
sums minus column sums (see `xla` for the derivation).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common import lowering
from icml26zoo.kernels._common.gate_sums import segmented_reverse_cumsum
from icml26zoo.kernels._common.tile_config import check_block_size
from icml26zoo.kernels.forgetting_attention import tuning
from icml26zoo.kernels.forgetting_attention.pallas_bwd import dkv_kernel, dq_kernel
from icml26zoo.kernels.forgetting_attention.pallas_fwd import fwd_kernel

OP = "forgetting_attention"
_F32 = jnp.float32


def _setup(mode: lowering.Mode, q: jax.Array, k: jax.Array, a: jax.Array | None, seg: jax.Array | None,
           block: int | None) -> tuple:
    """(geometry, tuning, specs, gate rows (a, λ, ρ) or Nones, segment (rows, cols) or Nones) of one call."""
    cfg = tuning.for_platform(mode, q.dtype).with_block(OP, block)
    geo = tiles.geometry(mode, q.shape[1], cfg.block)
    specs = tiles.Specs(geo, q.shape[2] // k.shape[2])
    gates = (None, None, None)
    if a is not None:
        a_rows = tiles.to_rows(a, geo)
        gates = (a_rows, *tiles.local_sums(a_rows))
    return geo, cfg, specs, gates, tiles.segment_layouts(seg, geo)


def _forward_kernels(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None, *,
                     mode: lowering.Mode, scale: float, block: int | None) -> tuple[jax.Array, jax.Array]:
    """q [B,T,H,D], k/v [B,T,Hkv,D], a [B,T,H] f32 | None, seg [B,T] | None -> o [B,T,H,D], lse [B,H,T] f32."""
    b, _, h, d = q.shape
    geo, cfg, sp, gates, (seg_rows, seg_cols) = _setup(mode, q, k, a, seg, block)
    w = geo.width(d)
    kernel = functools.partial(fwd_kernel, c=geo.block, scale=scale, has_gate=a is not None,
                               has_seg=seg is not None, tpu=geo.tpu)
    o, lse = tiles.grid_call(
        kernel, "forgetting_attention_fwd", geo, cfg,
        [(tiles.to_tiles(q, geo), sp.tile(w)), (tiles.to_tiles(k, geo), sp.full(w, kv=True)),
         (tiles.to_tiles(v, geo), sp.full(w, kv=True))]
        + [(x, sp.row_full) for x in gates] + [(seg_rows, sp.seg_rows), (seg_cols, sp.seg_col)],
        [(sp.tile(w), jax.ShapeDtypeStruct(tiles.tiles_shape(geo, b, h, d), q.dtype)),
         (sp.row_tile, tiles.rows_shape(geo, b, h))], batch=b, heads=h)
    return tiles.from_tiles(o, geo, d), jnp.swapaxes(tiles.from_rows(lse, geo), 1, 2)


def _backward_kernels(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None,
                      o: jax.Array, lse: jax.Array, do: jax.Array, *, mode: lowering.Mode, scale: float,
                      block: int | None) -> tuple:
    """Gradients dq, dk, dv (input dtypes) and dΛ = dS row sums − column sums [B,T,H] f32 (None without a gate)."""
    b, _, h, d = q.shape
    hkv = k.shape[2]
    geo, cfg, sp, gates, (seg_rows, seg_cols) = _setup(mode, q, k, a, seg, block)
    w = geo.width(d)
    has_gate = a is not None
    flags = dict(c=geo.block, scale=scale, has_gate=has_gate, has_seg=seg is not None, tpu=geo.tpu)
    delta = tiles.to_rows(jnp.sum(do.astype(_F32) * o.astype(_F32), axis=-1), geo)  # δ_i = dO_i·O_i
    lse_rows = tiles.to_rows(jnp.swapaxes(lse, 1, 2), geo)
    qt, kt, vt, dot = (tiles.to_tiles(x, geo) for x in (q, k, v, do))
    gate_rows = [(x, sp.row_full) for x in gates]
    segs = [(seg_rows, sp.seg_rows), (seg_cols, sp.seg_col)]
    rows = [(sp.row_tile, tiles.rows_shape(geo, b, h))] if has_gate else []

    dq_out = tiles.grid_call(
        functools.partial(dq_kernel, **flags), "forgetting_attention_dq", geo, cfg,
        [(qt, sp.tile(w)), (kt, sp.full(w, kv=True)), (vt, sp.full(w, kv=True))] + gate_rows + segs
        + [(dot, sp.tile(w)), (lse_rows, sp.row_tile), (delta, sp.row_tile)],
        [(sp.tile(w), jax.ShapeDtypeStruct(qt.shape, q.dtype))] + rows, batch=b, heads=h)

    # dk, dv per query head (key block j of kv head h // G), summed over the group below.
    per_head = (sp.tile(w), jax.ShapeDtypeStruct(qt.shape, _F32))
    dkv_out = tiles.grid_call(
        functools.partial(dkv_kernel, n=geo.blocks, **flags), "forgetting_attention_dkv", geo, cfg,
        [(qt, sp.full(w)), (kt, sp.tile(w, kv=True)), (vt, sp.tile(w, kv=True))] + gate_rows + segs
        + [(dot, sp.full(w)), (lse_rows, sp.row_full), (delta, sp.row_full)],
        [per_head, per_head] + rows, batch=b, heads=h)

    def group_sum(x: jax.Array, like: jax.Array) -> jax.Array:
        x = tiles.from_tiles(x, geo, d)
        return x.reshape(*x.shape[:2], hkv, h // hkv, d).sum(axis=3).astype(like.dtype)

    d_lambda = tiles.from_rows(dq_out[1] - dkv_out[2], geo) if has_gate else None
    return tiles.from_tiles(dq_out[0], geo, d), group_sum(dkv_out[0], k), group_sum(dkv_out[1], v), d_lambda


def _forward(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None, scale: float,
             block: int | None) -> tuple[jax.Array, jax.Array]:
    build = lambda mode: functools.partial(_forward_kernels, mode=mode, scale=scale, block=block)
    return lowering.by_platform(OP, build, q, k, v, a, seg)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _attention(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None, scale: float,
               block: int | None) -> jax.Array:
    return _forward(q, k, v, a, seg, scale, block)[0]


def _attention_fwd(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None,
                   scale: float, block: int | None) -> tuple[jax.Array, tuple]:
    o, lse = _forward(q, k, v, a, seg, scale, block)
    return o, (q, k, v, a, seg, o, lse)


def _attention_bwd(scale: float, block: int | None, res: tuple, do: jax.Array) -> tuple:
    q, k, v, a, seg, o, lse = res
    build = lambda mode: functools.partial(_backward_kernels, mode=mode, scale=scale, block=block)
    dq, dk, dv, d_lambda = lowering.by_platform(OP, build, q, k, v, a, seg, o, lse, do)
    # d log f_t = Σ_{i ≥ t} dΛ_i over t's own segment, in time order.
    da = None
    if d_lambda is not None:
        seg_rows = None if seg is None else seg[:, None, :]
        da = jnp.swapaxes(segmented_reverse_cumsum(jnp.swapaxes(d_lambda, 1, 2), seg_rows), 1, 2)
    return dq, dk, dv, da, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def forgetting_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None, *,
                         scale: float | None = None, segment_ids: jax.Array | None = None,
                         block_size: int | None = None) -> jax.Array:
    """Pallas forgetting attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k, v [B, T, Hkv, D]; log_fgate [B, T, H] or None (plain causal attention);
    segment_ids [B, T] int or None; block_size: the query/key tile (None: `tuning.for_platform`'s,
    rounded per mode by `attention_tiles.geometry`). Returns o [B, T, H, D] in q.dtype.
    """
    scale = q.shape[3]**-0.5 if scale is None else float(scale)
    check_block_size(OP, block_size)  # before any tracing: each lowering mode reads it in its own branch
    a = None if log_fgate is None else log_fgate.astype(_F32)
    seg = None if segment_ids is None else segment_ids.astype(jnp.int32)
    return _attention(q, k, v, a, seg, scale, block_size)
