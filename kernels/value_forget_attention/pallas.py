"""Pallas value-forget attention (FiX): `pl.pallas_call` forward and backward kernels behind a `jax.custom_vjp`.

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md), not read from code.

Which Pallas lowering runs is chosen when the function is lowered, per platform (`lowering.by_platform`):
interpreted on CPU (the GPU-shaped kernels, or inside `lowering.interpret_as("tpu")` the TPU-shaped ones
under the TPU interpreter), Triton on CUDA, Mosaic on TPU. Each branch lays the inputs out for its kernels
(`attention_tiles`: GPU [B, Tp, H, F] with F padded to a power of two, TPU head-major [B, H, Tp, F]; the FoX
gate, logsumexp and δ as [B, H, N, 1, C] rows), precomputes the value gates' local sums λ^v, ρ^v, and
returns mode-independent arrays: the residuals are (inputs, u [B, T, H, Dv] float32, lse [B, H, T]).
Block sizes come from `tuning.for_platform` (a `TileConfig`). The gate gradients are segmented reverse
cumsums (in XLA) of

    dΛ^f_i = Σ_j dS_ij − Σ_j dS_ji            (row sums minus column sums, as in FoX)
    dΛ^v_i = du_i ⊙ u_i − v_i ⊙ dv_i           (dv_i: the gradient of v_i for this query head)
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common import lowering
from icml26zoo.kernels._common.gate_sums import segmented_reverse_cumsum
from icml26zoo.kernels._common.tile_config import check_block_size
from icml26zoo.kernels.value_forget_attention import tuning
from icml26zoo.kernels.value_forget_attention.pallas_bwd import dkv_kernel, dq_kernel
from icml26zoo.kernels.value_forget_attention.pallas_fwd import fwd_kernel

OP = "value_forget_attention"
_F32 = jnp.float32


class _Call:
    """The layout of one call in one mode: geometry, tuning, specs, and the gate / segment operands."""

    def __init__(self, mode: lowering.Mode, q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array,
                 af: jax.Array | None, seg: jax.Array | None, block: int | None):
        self.b, _, self.h, self.d = q.shape
        self.hkv, self.dv = k.shape[2], v.shape[3]
        self.cfg = tuning.for_platform(mode, q.dtype).with_block(OP, block)
        self.geo = geo = tiles.geometry(mode, q.shape[1], self.cfg.block)
        self.sp = tiles.Specs(geo, self.h // self.hkv)
        self.wd, self.wv = geo.width(self.d), geo.width(self.dv)
        self.av = tiles.to_tiles(av, geo, _F32)
        self.lamv, self.rhov = tiles.channel_local_sums(self.av, geo)
        self.fgate = (None, None, None)
        if af is not None:
            rows = tiles.to_rows(af, geo)
            self.fgate = (rows, *tiles.local_sums(rows))
        self.seg_rows, self.seg_cols = tiles.segment_layouts(seg, geo)
        self.flags = dict(c=geo.block, has_fgate=af is not None, has_seg=seg is not None, tpu=geo.tpu)

    def scratch(self, squares: int, value_rows: bool = False) -> list:
        """VMEM scratch of the TPU kernels (the GPU ones take none): `squares` [C, C] float32 buffers, then
        (value_rows) one [C, Dv] float32."""
        if not self.geo.tpu:
            return []
        c = self.geo.block
        rows = [pltpu.VMEM((c, self.wv), _F32)] if value_rows else []
        return [pltpu.VMEM((c, c), _F32) for _ in range(squares)] + rows

    def gates(self, lamv_spec: object, rhov_spec: object) -> list:
        """(array, spec) of av (whole sequence), λv, ρv, the FoX gate rows and the segment ids."""
        sp = self.sp
        return ([(self.av, sp.full(self.wv)), (self.lamv, lamv_spec), (self.rhov, rhov_spec)]
                + [(x, sp.row_full) for x in self.fgate]
                + [(self.seg_rows, sp.seg_rows), (self.seg_cols, sp.seg_col)])

    def call(self, kernel: object, name: str, inputs: list, outputs: list, scratch: list) -> list[jax.Array]:
        return tiles.grid_call(kernel, name, self.geo, self.cfg, inputs, outputs, batch=self.b, heads=self.h,
                               scratch_shapes=scratch)

    def out(self, width: int, dtype: jnp.dtype) -> jax.ShapeDtypeStruct:
        """A per-query-head [B, T, H, width] output in the kernel layout."""
        return jax.ShapeDtypeStruct(tiles.tiles_shape(self.geo, self.b, self.h, width), dtype)


def _forward_kernels(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None,
                     seg: jax.Array | None, *, mode: lowering.Mode, scale: float,
                     block: int | None) -> tuple[jax.Array, jax.Array]:
    """q [B,T,H,D], k [B,T,Hkv,D], v [B,T,Hkv,Dv], av [B,T,H,Dv] f32, af [B,T,H] f32 | None, seg [B,T] | None
    -> u [B,T,H,Dv] f32, lse [B,H,T] f32."""
    x = _Call(mode, q, k, v, av, af, seg, block)
    sp, geo = x.sp, x.geo
    u, lse = x.call(
        functools.partial(fwd_kernel, scale=scale, **x.flags), "value_forget_attention_fwd",
        [(tiles.to_tiles(q, geo), sp.tile(x.wd)), (tiles.to_tiles(k, geo), sp.full(x.wd, kv=True)),
         (tiles.to_tiles(v, geo), sp.full(x.wv, kv=True))] + x.gates(sp.tile(x.wv), sp.full(x.wv)),
        [(sp.tile(x.wv), x.out(x.dv, _F32)), (sp.row_tile, tiles.rows_shape(geo, x.b, x.h))], scratch=x.scratch(1))
    return tiles.from_tiles(u, geo, x.dv), jnp.swapaxes(tiles.from_rows(lse, geo), 1, 2)


def _backward_kernels(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None,
                      seg: jax.Array | None, u: jax.Array, lse: jax.Array, du: jax.Array, *, mode: lowering.Mode,
                      scale: float, block: int | None) -> tuple:
    """dq, dk, dv (input dtypes), dΛ^v [B,T,H,Dv] f32 and dΛ^f = row − column sums of dS [B,T,H] f32 (or None)."""
    x = _Call(mode, q, k, v, av, af, seg, block)
    sp, geo = x.sp, x.geo
    du = du.astype(_F32)
    delta = tiles.to_rows(jnp.sum(du * u, axis=-1), geo)  # δ_i = du_i · u_i
    lse_rows = tiles.to_rows(jnp.swapaxes(lse, 1, 2), geo)
    qt, kt, vt = tiles.to_tiles(q, geo), tiles.to_tiles(k, geo), tiles.to_tiles(v, geo)
    dut = tiles.to_tiles(du, geo)
    rows = [(sp.row_tile, tiles.rows_shape(geo, x.b, x.h))] if af is not None else []

    dq_out = x.call(
        functools.partial(dq_kernel, scale=scale, **x.flags), "value_forget_attention_dq",
        [(qt, sp.tile(x.wd)), (kt, sp.full(x.wd, kv=True)), (vt, sp.full(x.wv, kv=True))]
        + x.gates(sp.tile(x.wv), sp.full(x.wv))
        + [(dut, sp.tile(x.wv)), (lse_rows, sp.row_tile), (delta, sp.row_tile)],
        [(sp.tile(x.wd), jax.ShapeDtypeStruct(qt.shape, q.dtype))] + rows, scratch=x.scratch(1))

    # dk and dv per query head, summed over the GQA group below; dv per head also feeds dΛ^v.
    dkv_out = x.call(
        functools.partial(dkv_kernel, n=geo.blocks, scale=scale, **x.flags), "value_forget_attention_dkv",
        [(qt, sp.full(x.wd)), (kt, sp.tile(x.wd, kv=True)), (vt, sp.tile(x.wv, kv=True))]
        + x.gates(sp.full(x.wv), sp.tile(x.wv))
        + [(dut, sp.full(x.wv)), (lse_rows, sp.row_full), (delta, sp.row_full)],
        [(sp.tile(x.wd), x.out(x.d, _F32)), (sp.tile(x.wv), x.out(x.dv, _F32))] + rows,
        scratch=x.scratch(2, value_rows=True))

    groups = x.h // x.hkv

    def group_sum(y: jax.Array, like: jax.Array) -> jax.Array:
        return y.reshape(*y.shape[:2], x.hkv, groups, y.shape[3]).sum(axis=3).astype(like.dtype)

    dk_heads = tiles.from_tiles(dkv_out[0], geo, x.d)
    dv_heads = tiles.from_tiles(dkv_out[1], geo, x.dv)
    d_lambda_v = du * u - jnp.repeat(v.astype(_F32), groups, axis=2) * dv_heads
    d_lambda_f = tiles.from_rows(dq_out[1] - dkv_out[2], geo) if af is not None else None
    return (tiles.from_tiles(dq_out[0], geo, x.d), group_sum(dk_heads, k), group_sum(dv_heads, v), d_lambda_v,
            d_lambda_f)


def _forward(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None, seg: jax.Array | None,
             scale: float, block: int | None) -> tuple[jax.Array, jax.Array]:
    build = lambda mode: functools.partial(_forward_kernels, mode=mode, scale=scale, block=block)
    return lowering.by_platform(OP, build, q, k, v, av, af, seg)


def _time_reverse_cumsum(x: jax.Array, seg: jax.Array | None) -> jax.Array:
    """Σ_{i ≥ t, same segment} x_i along axis 1 (time) of x [B, T, ...]."""
    moved = jnp.moveaxis(x, 1, -1)
    seg_b = None if seg is None else seg.reshape(seg.shape[0], *([1] * (moved.ndim - 2)), seg.shape[1])
    return jnp.moveaxis(segmented_reverse_cumsum(moved, seg_b), -1, 1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7))
def _attention(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None, seg: jax.Array | None,
               scale: float, block: int | None) -> jax.Array:
    return _forward(q, k, v, av, af, seg, scale, block)[0]


def _attention_fwd(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None,
                   seg: jax.Array | None, scale: float, block: int | None) -> tuple[jax.Array, tuple]:
    u, lse = _forward(q, k, v, av, af, seg, scale, block)
    return u, (q, k, v, av, af, seg, u, lse)


def _attention_bwd(scale: float, block: int | None, res: tuple, du: jax.Array) -> tuple:
    q, k, v, av, af, seg, u, lse = res
    build = lambda mode: functools.partial(_backward_kernels, mode=mode, scale=scale, block=block)
    dq, dk, dv, d_lambda_v, d_lambda_f = lowering.by_platform(OP, build, q, k, v, av, af, seg, u, lse, du)
    daf = None if d_lambda_f is None else _time_reverse_cumsum(d_lambda_f, seg)
    return dq, dk, dv, _time_reverse_cumsum(d_lambda_v, seg), daf, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def value_forget_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array, *,
                           log_fgate: jax.Array | None = None, scale: float | None = None,
                           segment_ids: jax.Array | None = None, block_size: int | None = None) -> jax.Array:
    """Pallas FiX attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k [B, T, Hkv, D]; v [B, T, Hkv, Dv]; log_vgate [B, T, H, Dv] (≤ 0);
    log_fgate [B, T, H] (≤ 0) or None; segment_ids [B, T] int or None; block_size: the query/key tile (None:
    `tuning.for_platform`'s, rounded per mode by `attention_tiles.geometry`).
    Returns u [B, T, H, Dv] in v.dtype: Σ_j P_ij exp(Λ^v_i − Λ^v_j) ⊙ v_j, softmax-normalized, no RMSNorm.
    """
    scale = q.shape[3]**-0.5 if scale is None else float(scale)
    check_block_size(OP, block_size)  # before any tracing: each lowering mode reads it in its own branch
    av = log_vgate.astype(_F32)
    af = None if log_fgate is None else log_fgate.astype(_F32)
    seg = None if segment_ids is None else segment_ids.astype(jnp.int32)
    return _attention(q, k, v, av, af, seg, scale, block_size).astype(v.dtype)
