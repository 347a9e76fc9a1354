"""Tile-level pieces of blocked causal softmax attention with scalar forget gates (FoX, FiX).

Two consumers:

* the XLA paths use `softmax_start` / `softmax_step` (online softmax over the last axis of batched tiles);
* the Pallas kernels use everything else: one program per (batch, query head, block) over a [C, C] tile,
  built for a lowering mode (`kernels/_common/lowering.py`) and called through `grid_call`.

Kernel layout, one rule for every mode. Every in-kernel value is 2-D (Mosaic lowers 2-D vectors best, and
Triton needs power-of-two extents, which [C, 1] and [1, C] have):

* time-major tiles [C, F] of q, k, v (and FiX's per-channel gates). GPU layouts ("interpret", "triton")
  keep the caller's [B, Tp, H, F] and block (None, C, None, F), F padded to a power of two ≥ 16 (Triton
  loads and tl.dot). TPU layouts ("mosaic_tpu", "tpu_interpret") transpose to head-major [B, H, Tp, F] and
  block (C, F) with F whole, so the last two block dims are (multiple of 8, whole dim);
* per-step scalars (log gates and their local sums, logsumexp, δ, dS row sums) as ROWS [B, H, N, 1, C]:
  a block (1, C) or the whole (N, 1, C), legal for Mosaic at any C. A row read in a kernel is [1, C];
  a per-query value is needed as a COLUMN [C, 1] (it varies down the logits' rows): `to_col` turns one
  into the other with a masked diagonal reduction (no transpose, no reshape);
* segment ids both ways: rows [B, N, 1, C] and columns [B, N, C, 1] (exact int32 equality, no reduction).

Query-major tiles (forward, dq) hold logits s[i, j] (query i down, key j across); the dk/dv kernel works
key-major, sᵀ[j, i], so that every per-query value it walks over (λ, lse, δ, segment ids) is read as a row.

Gate sums follow `gate_sums`: the diagonal tile adds the in-block segment sums Σ_{j<l≤i} a_l (a forward
cumsum of a where-masked matrix: `jnp.cumsum` on GPU layouts, a where-masked roll-doubling scan on TPU,
where Mosaic has no cumsum), a key tile J < I adds (λ_i + gap) + ρ_j with λ, ρ precomputed local sums
(`gate_rows`) and gap the running sum of block totals walked over. Masked logits are set with `jnp.where`
(never an additive −inf), and every product with a masked zero is a `jnp.where` too, so a NaN can only
reach the pairs it belongs to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from icml26zoo.kernels._common import lowering
from icml26zoo.kernels._common.layout import pad_time, padded_length
from icml26zoo.kernels._common.precision import ACCUM_DTYPE, HIGHEST

_F32 = jnp.float32
# Triton's smallest tl.dot extent; every GPU-layout tile dim is a power of two at least this.
_MIN_TRITON_DIM = 16
# TPU blocks are multiples of 16 rows: the (16, 128) tile of packed bfloat16 (8 would do for float32).
_TPU_ROW_MULTIPLE = 16


# ---------------------------------------------------------------------------------------------- matmuls

def _precision(x: jax.Array, y: jax.Array) -> lax.Precision | None:
    """HIGHEST for float32 operands (no TF32 / bf16 passes); the default for bfloat16 ones, which are exact
    in one MXU / tensor-core pass (Mosaic's fp32 contract precision is for float32 operands)."""
    return HIGHEST if x.dtype == jnp.float32 or y.dtype == jnp.float32 else None


def dot_nt(x: jax.Array, y: jax.Array) -> jax.Array:
    """x [M, D] · y [N, D]ᵀ -> [M, N] float32."""
    return lax.dot_general(x, y, (((1,), (1,)), ((), ())), precision=_precision(x, y),
                           preferred_element_type=ACCUM_DTYPE)


def dot_nn(x: jax.Array, y: jax.Array) -> jax.Array:
    """x [M, K] · y [K, N] -> [M, N] float32."""
    return lax.dot_general(x, y, (((1,), (0,)), ((), ())), precision=_precision(x, y),
                           preferred_element_type=ACCUM_DTYPE)


# ------------------------------------------------------------------------------- online softmax (XLA)

def softmax_start(s: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Unnormalized softmax of the diagonal tile's masked logits s [..., Cq, Ck]: (m, p, Σp), m [..., Cq].

    The diagonal tile always holds j = i, so m is finite from here on and exp(s − m) of a masked (−inf)
    logit is exactly 0 (no −inf − (−inf) later).
    """
    m = jnp.max(s, axis=-1)
    p = jnp.exp(s - m[..., None])
    return m, p, jnp.sum(p, axis=-1)


def softmax_step(m: jax.Array, l_sum: jax.Array,
                 s: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One online-softmax step over key tile logits s [..., Cq, Ck]: (m_new, α = exp(m − m_new), p, Σ).

    The caller rescales its accumulator by α before adding p·V.
    """
    m_new = jnp.maximum(m, jnp.max(s, axis=-1))
    alpha = jnp.exp(m - m_new)
    p = jnp.exp(s - m_new[..., None])
    return m_new, alpha, p, alpha * l_sum + jnp.sum(p, axis=-1)


# ------------------------------------------------------------------------- geometry of one kernel call

def _next_power_of_two(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


@dataclasses.dataclass(frozen=True)
class Geometry:
    """The block C, the true length T and the padded length Tp = N·C of one call in one lowering mode."""

    mode: lowering.Mode
    block: int
    length: int
    padded: int

    @property
    def tpu(self) -> bool:
        """Whether the TPU (head-major) layout is built."""
        return lowering.is_tpu_layout(self.mode)

    @property
    def blocks(self) -> int:
        return self.padded // self.block

    def width(self, features: int) -> int:
        """The feature width F of the kernel tiles: F itself on TPU (whole-dim blocks are legal), the next
        power of two ≥ 16 on GPU layouts (Triton loads and tl.dot)."""
        return features if self.tpu else max(_MIN_TRITON_DIM, _next_power_of_two(features))


def geometry(mode: lowering.Mode, length: int, block: int) -> Geometry:
    """The kernel block for a sequence of `length` steps and a requested `block` (≥ 1).

    GPU layouts: a power of two ≥ 16, at most the next power of two above T. TPU layouts: a multiple of 16
    rows, at most T rounded up to 16. T is zero-padded to whole blocks.
    """
    if block < 1:
        raise ValueError(f"block is {block!r}, expected an int ≥ 1")
    if lowering.is_tpu_layout(mode):
        c = padded_length(min(block, length), _TPU_ROW_MULTIPLE)
    else:
        c = max(_MIN_TRITON_DIM, _next_power_of_two(min(block, length)))
    return Geometry(mode=mode, block=c, length=length, padded=padded_length(length, c))


# ------------------------------------------------------------------------------ XLA-side layout changes

def to_tiles(x: jax.Array, geo: Geometry, dtype: jnp.dtype | None = None) -> jax.Array:
    """[B, T, H, F] -> the kernel layout: [B, Tp, H, Fp] (GPU, F zero-padded) or [B, H, Tp, F] (TPU)."""
    x = pad_time(x if dtype is None else x.astype(dtype), geo.padded - x.shape[1])
    if geo.tpu:
        return jnp.swapaxes(x, 1, 2)
    extra = geo.width(x.shape[3]) - x.shape[3]
    return jnp.pad(x, [(0, 0)] * 3 + [(0, extra)]) if extra else x


def from_tiles(x: jax.Array, geo: Geometry, features: int) -> jax.Array:
    """The kernel layout back to [B, T, H, F] (padding dropped)."""
    if geo.tpu:
        x = jnp.swapaxes(x, 1, 2)
    return x[:, :geo.length, :, :features]


def tiles_shape(geo: Geometry, batch: int, heads: int, features: int) -> tuple[int, int, int, int]:
    """The kernel-layout shape of a [B, T, H, F] array."""
    if geo.tpu:
        return batch, heads, geo.padded, features
    return batch, geo.padded, heads, geo.width(features)


def to_rows(x: jax.Array, geo: Geometry) -> jax.Array:
    """Per-step scalars [B, T, H] -> float32 rows [B, H, N, 1, C] (zero-padded)."""
    b, _, h = x.shape
    x = jnp.swapaxes(pad_time(x.astype(_F32), geo.padded - geo.length), 1, 2)
    return x.reshape(b, h, geo.blocks, 1, geo.block)


def from_rows(x: jax.Array, geo: Geometry) -> jax.Array:
    """Rows [B, H, N, 1, C] -> [B, T, H]."""
    b, h = x.shape[:2]
    return jnp.swapaxes(x.reshape(b, h, geo.padded), 1, 2)[:, :geo.length]


def rows_shape(geo: Geometry, batch: int, heads: int) -> jax.ShapeDtypeStruct:
    """The float32 rows of a [B, T, H] array."""
    return jax.ShapeDtypeStruct((batch, heads, geo.blocks, 1, geo.block), _F32)


def local_sums(rows: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(λ, ρ) of log-gate rows [..., C]: the inclusive prefix and the exclusive suffix sum inside each block.

    Each entry is a plain sum of its own terms (a cumsum, and a reverse cumsum shifted by one), in XLA
    before the kernels, so no kernel needs a reverse cumsum (Triton has none, Mosaic no cumsum at all).
    """
    lam = lax.cumsum(rows, axis=rows.ndim - 1)
    rev = lax.cumsum(rows, axis=rows.ndim - 1, reverse=True)
    rho = jnp.concatenate([rev[..., 1:], jnp.zeros_like(rev[..., :1])], axis=-1)
    return lam, rho


def channel_local_sums(x: jax.Array, geo: Geometry) -> tuple[jax.Array, jax.Array]:
    """`local_sums` of per-channel log gates in the kernel tile layout (blocks of C along time).

    x: [B, Tp, H, F] (GPU) or [B, H, Tp, F] (TPU) float32. Returns (λ, ρ) in the same layout.
    """
    axis = 2 if geo.tpu else 1
    shape = x.shape[:axis] + (geo.blocks, geo.block) + x.shape[axis + 1:]
    lam, rho = local_sums(jnp.moveaxis(x.reshape(shape), axis + 1, -1))
    return (jnp.moveaxis(lam, -1, axis + 1).reshape(x.shape), jnp.moveaxis(rho, -1, axis + 1).reshape(x.shape))


def segment_layouts(segment_ids: jax.Array | None, geo: Geometry) -> tuple[jax.Array | None, jax.Array | None]:
    """segment_ids [B, T] -> int32 (rows [B, N, 1, C], columns [B, N, C, 1]), or (None, None).

    Padded steps get an id of their own, max(ids) + 1: a padded key is after every real query (the causal
    mask hides it), and a padded query (zero q and dO, dropped) must not pair with a real key either, or a
    NaN gate sum of that key's segment would reach the key's gradients through it.
    """
    if segment_ids is None:
        return None, None
    b = segment_ids.shape[0]
    seg = segment_ids.astype(jnp.int32)
    pad = geo.padded - geo.length
    if pad:
        seg = jnp.concatenate([seg, jnp.broadcast_to(jnp.max(seg) + 1, (b, pad))], axis=1)
    return seg.reshape(b, geo.blocks, 1, geo.block), seg.reshape(b, geo.blocks, geo.block, 1)


# ----------------------------------------------------------------------------------------- BlockSpecs

class Specs:
    """BlockSpecs over the grid (batch, query head, block) for one geometry.

    `groups` query heads share one key/value head (GQA): `kv=True` maps query head h to h // groups.
    Every index map takes and ignores trailing arguments (`*_`): under a scalar-prefetch grid
    (`pltpu.PrefetchScalarGridSpec`, the block-sparse kernels) Pallas passes the prefetched refs after the
    grid indices, so one set of specs serves both kinds of grid.
    """

    def __init__(self, geo: Geometry, groups: int):
        self.geo, self.groups = geo, groups
        n, c = geo.blocks, geo.block
        self.row_tile = pl.BlockSpec((None, None, None, 1, c), lambda b, h, i, *_: (b, h, i, 0, 0))
        self.row_full = pl.BlockSpec((None, None, n, 1, c), lambda b, h, i, *_: (b, h, 0, 0, 0))
        self.seg_rows = pl.BlockSpec((None, n, 1, c), lambda b, h, i, *_: (b, 0, 0, 0))
        self.seg_col = pl.BlockSpec((None, None, c, 1), lambda b, h, i, *_: (b, i, 0, 0))

    def _head(self, kv: bool) -> Callable[[Any], Any]:
        # lax.div, not //: floor division of a traced int goes through `sign`, whose Mosaic lowering asks
        # for the TPU generation (unknown when exporting on a CPU); head indices are never negative.
        groups = self.groups
        return (lambda h: lax.div(h, jnp.int32(groups))) if kv else (lambda h: h)

    def tile(self, width: int, kv: bool = False) -> pl.BlockSpec:
        """The [C, F] tile of the program's block (query block, or key block in the dk/dv kernel)."""
        c, head = self.geo.block, self._head(kv)
        if self.geo.tpu:
            return pl.BlockSpec((None, None, c, width), lambda b, h, i, *_: (b, head(h), i, 0))
        return pl.BlockSpec((None, c, None, width), lambda b, h, i, *_: (b, i, head(h), 0))

    def full(self, width: int, kv: bool = False) -> pl.BlockSpec:
        """The whole padded sequence [Tp, F], sliced in the kernel with `tile_at`."""
        tp, head = self.geo.padded, self._head(kv)
        if self.geo.tpu:
            return pl.BlockSpec((None, None, tp, width), lambda b, h, i, *_: (b, head(h), 0, 0))
        return pl.BlockSpec((None, tp, None, width), lambda b, h, i, *_: (b, 0, head(h), 0))


def grid_call(kernel: Callable[..., None], name: str, geo: Geometry, tuning: Any,
              inputs: Sequence[tuple[jax.Array | None, pl.BlockSpec]],
              outputs: Sequence[tuple[pl.BlockSpec, jax.ShapeDtypeStruct]], *, batch: int, heads: int,
              scratch_shapes: Sequence[Any] = ()) -> list[jax.Array]:
    """`pl.pallas_call` of kernel over the grid (batch, query head, block) for `geo.mode`.

    Inputs whose array is None (no gate / no segments) are left out; the kernel's flags say which are there.
    `tuning` gives the Triton launch (`num_warps`, `num_stages`). Every program writes its own output blocks,
    so all three grid axes are parallel on TPU.
    """
    kept = [(x, spec) for x, spec in inputs if x is not None]
    params = lowering.compiler_params(geo.mode, num_warps=tuning.num_warps, num_stages=tuning.num_stages,
                                      dimension_semantics=("parallel", "parallel", "parallel"))
    return pl.pallas_call(
        kernel, grid=(batch, heads, geo.blocks), in_specs=[spec for _, spec in kept],
        out_specs=[spec for spec, _ in outputs], out_shape=[shape for _, shape in outputs],
        scratch_shapes=list(scratch_shapes), interpret=lowering.interpret_arg(geo.mode),
        compiler_params=params, name=name)(*[x for x, _ in kept])


# ---------------------------------------------------------------------------------- in-kernel helpers

def unpack_refs(refs: Sequence[Any], layout: Sequence[tuple[str, bool]]) -> dict[str, Any]:
    """Map the positional refs onto names; names whose flag is False get None."""
    it = iter(refs)
    return {name: (next(it) if present else None) for name, present in layout}


def tile_at(ref: Any, j: jax.Array | int, c: int) -> jax.Array:
    """Rows [j·C, (j+1)·C) of a whole-sequence [Tp, F] ref: a [C, F] tile."""
    start = j * c if isinstance(j, int) else pl.multiple_of(j * c, c)
    return ref[pl.ds(start, c), :]


def row_at(ref: Any | None, j: jax.Array | int) -> jax.Array | None:
    """Row j [1, C] of a whole-sequence rows ref [N, 1, C] (None for an absent input)."""
    return None if ref is None else ref[j]


def iotas(shape: tuple[int, int]) -> tuple[jax.Array, jax.Array]:
    """(row index, column index) int32 grids of a 2-D shape."""
    return lax.broadcasted_iota(jnp.int32, shape, 0), lax.broadcasted_iota(jnp.int32, shape, 1)


def to_col(row: jax.Array) -> jax.Array:
    """[1, C] -> [C, 1], the same values: a where-masked diagonal reduction (NaN and −inf stay in place)."""
    c = row.shape[1]
    r, k = iotas((c, c))
    return jnp.sum(jnp.where(r == k, row, jnp.zeros((), row.dtype)), axis=1, keepdims=True)


def to_row(col: jax.Array) -> jax.Array:
    """[C, 1] -> [1, C], the same values (see `to_col`)."""
    c = col.shape[0]
    r, k = iotas((c, c))
    return jnp.sum(jnp.where(r == k, col, jnp.zeros((), col.dtype)), axis=0, keepdims=True)


def row_sum(x: jax.Array) -> jax.Array:
    """Σ over the last axis, kept as [.., 1]."""
    return jnp.sum(x, axis=1, keepdims=True)


def cumsum(x: jax.Array, axis: int, tpu: bool) -> jax.Array:
    """Inclusive forward cumsum of a 2-D x along `axis` (0 or 1).

    TPU layouts: Mosaic has no cumsum, so a Hillis-Steele scan of log2(n) rolls, each masked with
    `jnp.where` (a wrapped-around entry is dropped, never multiplied by zero), so −inf and NaN reach only
    the entries whose own sum holds them, exactly as with a sequential cumsum.
    """
    if not tpu:
        return jnp.cumsum(x, axis=axis)
    n = x.shape[axis]
    idx = lax.broadcasted_iota(jnp.int32, x.shape, axis)
    shift = 1
    while shift < n:
        x = x + jnp.where(idx >= shift, pltpu.roll(x, shift, axis), jnp.zeros((), x.dtype))
        shift *= 2
    return x


def masked(mask: jax.Array | None, x: jax.Array, fill: float = 0.0) -> jax.Array:
    """x where mask holds, `fill` elsewhere (x itself when there is no mask)."""
    return x if mask is None else jnp.where(mask, x, jnp.asarray(fill, x.dtype))


# ------------------------------------------------------------------------------------------ logits

def diag_logits(q: jax.Array, k: jax.Array, a_row: jax.Array | None, seg_col: jax.Array | None,
                seg_row: jax.Array | None, scale: float, tpu: bool) -> tuple[jax.Array, jax.Array]:
    """Query-major diagonal tile: masked logits s [C, C] (s[i, j], −inf where masked) and the mask.

    q, k [C, D]; a_row [1, C] the block's log gates (or None); seg_col [C, 1] / seg_row [1, C] its segment
    ids (or None). Bias: S[i, j] = Σ_{j<l≤i} a_l, a cumsum down the rows of M[l, j] = a_l·[l > j].
    """
    s = dot_nt(q, k) * scale
    r, k_idx = iotas(s.shape)
    if a_row is not None:
        s = s + cumsum(jnp.where(r > k_idx, to_col(a_row), 0.0), 0, tpu)
    mask = r >= k_idx
    if seg_col is not None:
        mask = mask & (seg_col == seg_row)
    return jnp.where(mask, s, -jnp.inf), mask


def diag_logits_t(k: jax.Array, q: jax.Array, a_row: jax.Array | None, seg_col: jax.Array | None,
                  seg_row: jax.Array | None, scale: float, tpu: bool) -> tuple[jax.Array, jax.Array]:
    """Key-major diagonal tile: masked sᵀ [C, C] (sᵀ[j, i]) and the mask; seg_col the keys', seg_row the
    queries' ids. Bias Sᵀ[j, i] = Σ_{j<l≤i} a_l, a cumsum across the columns of M'[j, l] = a_l·[l > j]."""
    s = dot_nt(k, q) * scale
    r, c_idx = iotas(s.shape)
    if a_row is not None:
        s = s + cumsum(jnp.where(c_idx > r, a_row, 0.0), 1, tpu)
    mask = c_idx >= r
    if seg_col is not None:
        mask = mask & (seg_col == seg_row)
    return jnp.where(mask, s, -jnp.inf), mask


def off_logits(x: jax.Array, y: jax.Array, bias: jax.Array | None, seg_col: jax.Array | None,
               seg_row: jax.Array | None, scale: float) -> tuple[jax.Array, jax.Array | None]:
    """An off-diagonal tile x·yᵀ·scale + bias (bias [C, C] by broadcasting, or None), masked to equal
    segment ids (seg_col [C, 1] of x's steps, seg_row [1, C] of y's). Query-major with (x, y) = (q, k) and
    bias (λ_i + gap) + ρ_j; key-major with (k, q) and bias ρ_j + (λ_i + gap). The mask is None without
    segments (every pair of a key block before the query block is causal)."""
    s = dot_nt(x, y) * scale
    if bias is not None:
        s = s + bias
    if seg_col is None:
        return s, None
    mask = seg_col == seg_row
    return jnp.where(mask, s, -jnp.inf), mask


# ---------------------------------------------------------------------------- online softmax (kernels)

def online_start(s: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`softmax_start` of a query-major tile with [C, 1] statistics: (m, p, Σp)."""
    m = jnp.max(s, axis=1, keepdims=True)
    p = jnp.exp(s - m)
    return m, p, row_sum(p)


def online_step(m: jax.Array, l_sum: jax.Array, s: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """`softmax_step` with [C, 1] statistics: (m_new, α, p, l_new)."""
    m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
    alpha = jnp.exp(m - m_new)
    p = jnp.exp(s - m_new)
    return m_new, alpha, p, alpha * l_sum + row_sum(p)
