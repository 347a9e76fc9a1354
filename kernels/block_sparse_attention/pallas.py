"""Pallas block-sparse attention: forward, dq and dk/dv kernels behind a `jax.custom_vjp`.

Absent blocks are skipped by the loop bounds, never masked: each program reads its list of block indices
and visits only those blocks (`pallas_kernels`). How the lists reach the kernels depends on the lowering
(`lowering.by_platform`, chosen when the function is lowered):
  * TPU layouts (Mosaic, and its interpreter): `pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=2)`: the
    flattened lists and their lengths are prefetched into SMEM before the grid runs, and each program reads
    its entries there (scalar loads driving the key-tile slices);
  * GPU layouts (Triton, and the generic interpreter on CPU): Triton has no scalar prefetch, so each
    program's list arrives as an int32 input row (padded with -1 to a power of two) and its length is the
    count of its non-negative entries.
The backward's dk/dv kernel walks the transposed lists (for each key block, the query blocks listing it),
built in XLA by `lists.transpose`. K/V (forward, dq) and Q/dO (dk/dv) are whole-sequence blocks sliced per
visited tile, as in the FoX kernels (`attention_tiles` layout). Block lists fix the tile, so `block_size`
must be a tile the mode accepts (GPU: a power of two ≥ 16; TPU: a multiple of 16), else ValueError.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common import lowering
from icml26zoo.kernels.block_sparse_attention import lists
from icml26zoo.kernels.block_sparse_attention.pallas_kernels import Lookup, dkv_body, dq_body, fwd_body

OP = "block_sparse_attention"
_F32 = jnp.float32


def _geometry(mode: lowering.Mode, length: int, block: int) -> tiles.Geometry:
    geo = tiles.geometry(mode, length, block)
    if geo.block != block:
        rule = "a multiple of 16" if geo.tpu else "a power of two ≥ 16"
        raise ValueError(f"{OP}: `block_size` is {block}; implementation='pallas' needs {rule} for the "
                         f"{mode} lowering (the block lists fix the tile)")
    return geo


def _next_power_of_two(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _list_call(body: Callable[..., None], name: str, geo: tiles.Geometry, idx: jax.Array, cnt: jax.Array,
               names: Sequence[str], inputs: Sequence[tuple[jax.Array | None, pl.BlockSpec]],
               outputs: Sequence[tuple[str, pl.BlockSpec, jax.ShapeDtypeStruct]], scale: float) -> list[jax.Array]:
    """`pallas_call` of a list-walking body over the grid (B, H, N) with the lists idx [B, H, N, S], cnt [B, H, N].

    names / inputs: the named input refs (None arrays are absent and reach the body as None); outputs:
    (name, spec, shape). The body gets (refs by name, Lookup, program's block index).
    """
    b, h, n, s = idx.shape
    kept = [(nm, x, spec) for nm, (x, spec) in zip(names, inputs, strict=True) if x is not None]
    ref_names = [nm for nm, _, _ in kept] + [nm for nm, _, _ in outputs]
    absent = {nm: None for nm, (x, _) in zip(names, inputs, strict=True) if x is None}

    def kernel(*refs: Any) -> None:
        bi, hi, i = pl.program_id(0), pl.program_id(1), pl.program_id(2)
        if geo.tpu:
            idx_ref, cnt_ref, *rest = refs
            base = ((bi * h + hi) * n + i) * s
            look = Lookup(entry=lambda t: idx_ref[base + t], count=cnt_ref[(bi * h + hi) * n + i])
        else:
            row, *rest = refs
            look = Lookup(entry=lambda t: row[t], count=jnp.sum((row[...] >= 0).astype(jnp.int32)))
        body({**dict(zip(ref_names, rest, strict=True)), **absent}, look, i, c=geo.block, scale=scale)

    in_specs = [spec for _, _, spec in kept]
    out_specs = [spec for _, spec, _ in outputs]
    out_shape = [shape for _, _, shape in outputs]
    params = lowering.compiler_params(geo.mode, dimension_semantics=("parallel", "parallel", "parallel"))
    if geo.tpu:
        grid_spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=2, grid=(b, h, n), in_specs=in_specs,
                                                 out_specs=out_specs)
        call = pl.pallas_call(kernel, grid_spec=grid_spec, out_shape=out_shape, name=name,
                              interpret=lowering.interpret_arg(geo.mode), compiler_params=params)
        return call(idx.reshape(-1), cnt.reshape(-1), *[x for _, x, _ in kept])
    width = _next_power_of_two(s)
    rows = jnp.pad(idx, [(0, 0)] * 3 + [(0, width - s)], constant_values=-1)
    row_spec = pl.BlockSpec((None, None, None, width), lambda bb, hh, ii: (bb, hh, ii, 0))
    call = pl.pallas_call(kernel, grid=(b, h, n), in_specs=[row_spec] + in_specs, out_specs=out_specs,
                          out_shape=out_shape, name=name, interpret=lowering.interpret_arg(geo.mode),
                          compiler_params=params)
    return call(rows, *[x for _, x, _ in kept])


def _layouts(mode: lowering.Mode, q: jax.Array, k: jax.Array, seg: jax.Array | None, block: int) -> tuple:
    geo = _geometry(mode, q.shape[1], block)
    return geo, tiles.Specs(geo, q.shape[2] // k.shape[2]), tiles.segment_layouts(seg, geo)


def _forward_kernels(q: jax.Array, k: jax.Array, v: jax.Array, idx: jax.Array, cnt: jax.Array,
                     seg: jax.Array | None, *, mode: lowering.Mode, scale: float,
                     block: int) -> tuple[jax.Array, jax.Array]:
    """q [B,T,H,D], k/v [B,T,Hkv,D], lists -> o [B,T,H,D], lse [B,H,T] float32."""
    b, _, h, d = q.shape
    geo, sp, (seg_rows, seg_cols) = _layouts(mode, q, k, seg, block)
    w = geo.width(d)
    o, lse = _list_call(
        fwd_body, "block_sparse_attention_fwd", geo, idx, cnt, ["q", "k", "v", "seg_rows", "seg_col"],
        [(tiles.to_tiles(q, geo), sp.tile(w)), (tiles.to_tiles(k, geo), sp.full(w, kv=True)),
         (tiles.to_tiles(v, geo), sp.full(w, kv=True)), (seg_rows, sp.seg_rows), (seg_cols, sp.seg_col)],
        [("o", sp.tile(w), jax.ShapeDtypeStruct(tiles.tiles_shape(geo, b, h, d), q.dtype)),
         ("lse", sp.row_tile, tiles.rows_shape(geo, b, h))], scale)
    return tiles.from_tiles(o, geo, d), jnp.swapaxes(tiles.from_rows(lse, geo), 1, 2)


def _backward_kernels(q: jax.Array, k: jax.Array, v: jax.Array, idx: jax.Array, cnt: jax.Array,
                      idx_t: jax.Array, cnt_t: jax.Array, seg: jax.Array | None, o: jax.Array, lse: jax.Array,
                      do: jax.Array, *, mode: lowering.Mode, scale: float, block: int) -> tuple:
    """dq, dk, dv in the input dtypes."""
    b, _, h, d = q.shape
    hkv = k.shape[2]
    geo, sp, (seg_rows, seg_cols) = _layouts(mode, q, k, seg, block)
    w = geo.width(d)
    delta = tiles.to_rows(jnp.sum(do.astype(_F32) * o.astype(_F32), axis=-1), geo)  # δ_i = dO_i·O_i
    lse_rows = tiles.to_rows(jnp.swapaxes(lse, 1, 2), geo)
    qt, kt, vt, dot = (tiles.to_tiles(x, geo) for x in (q, k, v, do))
    segs = [(seg_rows, sp.seg_rows), (seg_cols, sp.seg_col)]
    names = ["q", "k", "v", "seg_rows", "seg_col", "do", "lse", "delta"]

    (dq,) = _list_call(
        dq_body, "block_sparse_attention_dq", geo, idx, cnt, names,
        [(qt, sp.tile(w)), (kt, sp.full(w, kv=True)), (vt, sp.full(w, kv=True))] + segs
        + [(dot, sp.tile(w)), (lse_rows, sp.row_tile), (delta, sp.row_tile)],
        [("dq", sp.tile(w), jax.ShapeDtypeStruct(qt.shape, q.dtype))], scale)
    per_head = jax.ShapeDtypeStruct(qt.shape, _F32)
    dk, dv = _list_call(
        dkv_body, "block_sparse_attention_dkv", geo, idx_t, cnt_t, names,
        [(qt, sp.full(w)), (kt, sp.tile(w, kv=True)), (vt, sp.tile(w, kv=True))] + segs
        + [(dot, sp.full(w)), (lse_rows, sp.row_full), (delta, sp.row_full)],
        [("dk", sp.tile(w), per_head), ("dv", sp.tile(w), per_head)], scale)

    def group_sum(x: jax.Array, like: jax.Array) -> jax.Array:
        x = tiles.from_tiles(x, geo, d)
        return x.reshape(*x.shape[:2], hkv, h // hkv, d).sum(axis=3).astype(like.dtype)

    return tiles.from_tiles(dq, geo, d), group_sum(dk, k), group_sum(dv, v)


def _forward(q: jax.Array, k: jax.Array, v: jax.Array, idx: jax.Array, seg: jax.Array | None, scale: float,
             block: int) -> tuple[jax.Array, jax.Array]:
    idx, cnt = lists.normalize(idx)
    build = lambda mode: functools.partial(_forward_kernels, mode=mode, scale=scale, block=block)
    return lowering.by_platform(OP, build, q, k, v, idx, cnt, seg)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _attention(q: jax.Array, k: jax.Array, v: jax.Array, idx: jax.Array, seg: jax.Array | None, scale: float,
               block: int) -> jax.Array:
    return _forward(q, k, v, idx, seg, scale, block)[0]


def _attention_fwd(q: jax.Array, k: jax.Array, v: jax.Array, idx: jax.Array, seg: jax.Array | None,
                   scale: float, block: int) -> tuple[jax.Array, tuple]:
    o, lse = _forward(q, k, v, idx, seg, scale, block)
    return o, (q, k, v, idx, seg, o, lse)


def _attention_bwd(scale: float, block: int, res: tuple, do: jax.Array) -> tuple:
    q, k, v, idx, seg, o, lse = res
    idx_s, cnt = lists.normalize(idx)
    idx_t, cnt_t = lists.transpose(idx)
    build = lambda mode: functools.partial(_backward_kernels, mode=mode, scale=scale, block=block)
    dq, dk, dv = lowering.by_platform(OP, build, q, k, v, idx_s, cnt, idx_t, cnt_t, seg, o, lse, do)
    return dq, dk, dv, None, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def block_sparse_attention(q: jax.Array, k: jax.Array, v: jax.Array, block_indices: jax.Array, *,
                           block_size: int, scale: float | None = None,
                           segment_ids: jax.Array | None = None) -> jax.Array:
    """Pallas block-sparse attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k, v [B, T, Hkv, D]; block_indices [B, H, N, S] (lists.py) with N = ceil(T / block_size);
    segment_ids [B, T] int or None. Returns o [B, T, H, D] in q.dtype.
    """
    scale = q.shape[3] ** -0.5 if scale is None else float(scale)
    seg = None if segment_ids is None else segment_ids.astype(jnp.int32)
    _geometry(lowering.cpu_mode(), q.shape[1], block_size)  # fail before tracing when the CPU branch can't run
    return _attention(q, k, v, block_indices.astype(jnp.int32), seg, scale, int(block_size))
