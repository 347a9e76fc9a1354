"""Tile-level pieces of blocked causal softmax attention with scalar forget gates (FoX, FiX).

Written for one [C, C] tile of a Pallas kernel program (GPU style, run with interpret=True off GPU); the
online-softmax steps act on the last axis and serve the XLA paths' batched tiles as well. A scalar log gate
enters the logits as local sums (see `gate_sums`): the diagonal tile adds in-block segment sums, a key tile
J < I adds (λ_i + gap) + ρ_j, with gap the running sum of the block totals walked over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import gate_sums
from icml26zoo.kernels._common.precision import ACCUM_DTYPE, HIGHEST


def dot_nt(x: jax.Array, y: jax.Array) -> jax.Array:
    """x [M, D] · y [N, D]ᵀ -> [M, N] float32."""
    return lax.dot_general(x, y, (((1,), (1,)), ((), ())), precision=HIGHEST, preferred_element_type=ACCUM_DTYPE)


def dot_nn(x: jax.Array, y: jax.Array) -> jax.Array:
    """x [M, K] · y [K, N] -> [M, N] float32."""
    return lax.dot_general(x, y, (((1,), (0,)), ((), ())), precision=HIGHEST, preferred_element_type=ACCUM_DTYPE)


def dot_tn(x: jax.Array, y: jax.Array) -> jax.Array:
    """x [K, M]ᵀ · y [K, N] -> [M, N] float32."""
    return lax.dot_general(x, y, (((0,), (0,)), ((), ())), precision=HIGHEST, preferred_element_type=ACCUM_DTYPE)


def unpack_refs(refs: Sequence[Any], layout: Sequence[tuple[str, bool]]) -> dict[str, Any]:
    """Map the positional refs onto names; names whose flag is False get None."""
    it = iter(refs)
    return {name: (next(it) if present else None) for name, present in layout}


def grid_call(kernel: Callable[..., None], name: str, block: int,
              inputs: Sequence[tuple[jax.Array | None, pl.BlockSpec]],
              outputs: Sequence[tuple[pl.BlockSpec, jax.ShapeDtypeStruct]], interpret: bool) -> list[jax.Array]:
    """`pl.pallas_call` of kernel from (array, BlockSpec) inputs and (BlockSpec, shape) outputs.

    The grid is (batch, query head, block), read off the first input, q [B, Tp, H, D] (Tp a multiple of block).
    Inputs whose array is None (no gate / no segments) are left out; the kernel's flags say which are there.
    """
    b, tp, h = inputs[0][0].shape[:3]
    kept = [(x, spec) for x, spec in inputs if x is not None]
    return pl.pallas_call(
        kernel, grid=(b, h, tp // block), in_specs=[spec for _, spec in kept], out_specs=[spec for spec, _ in outputs],
        out_shape=[shape for _, shape in outputs], interpret=interpret, name=name)(*[x for x, _ in kept])


def row_specs(padded: int, block: int) -> tuple[pl.BlockSpec, pl.BlockSpec, pl.BlockSpec]:
    """BlockSpecs over the grid (batch, query head, block): a [B, H, Tp] row whole and per block, and the
    [B, Tp] segment ids whole."""
    row_full = pl.BlockSpec((None, None, padded), lambda b, h, i: (b, h, 0))
    row_blk = pl.BlockSpec((None, None, block), lambda b, h, i: (b, h, i))
    seg_full = pl.BlockSpec((None, padded), lambda b, h, i: (b, 0))
    return row_full, row_blk, seg_full


def block_slice(ref: Any, j: jax.Array | int, c: int) -> jax.Array:
    """Rows [j·C, (j+1)·C) of a full-sequence ref (1-D [Tp] or 2-D [Tp, D])."""
    return ref[pl.ds(j * c, c)] if len(ref.shape) == 1 else ref[pl.ds(j * c, c), :]


def optional_slice(ref: Any | None, j: jax.Array | int, c: int) -> jax.Array | None:
    """`block_slice`, or None for an absent input."""
    return None if ref is None else block_slice(ref, j, c)


def diag_logits(q: jax.Array, k: jax.Array, a_blk: jax.Array | None, seg_blk: jax.Array | None,
                scale: float) -> jax.Array:
    """Masked logits [C, C] of the diagonal tile: causal, bias = in-block segment sums. q, k [C, D]."""
    s = dot_nt(q, k) * scale
    if a_blk is not None:
        s = s + gate_sums.segment_sums(a_blk)
    c = s.shape[0]
    mask = lax.broadcasted_iota(jnp.int32, (c, c), 0) >= lax.broadcasted_iota(jnp.int32, (c, c), 1)
    if seg_blk is not None:
        mask = mask & (seg_blk[:, None] == seg_blk[None, :])
    return jnp.where(mask, s, -jnp.inf)


def off_logits(q: jax.Array, k: jax.Array, lam_gap: jax.Array | None, rho: jax.Array | None,
               seg_q: jax.Array | None, seg_k: jax.Array | None, scale: float) -> jax.Array:
    """Masked logits [C, C] of a key tile before the query tile: bias (λ_i + gap) + ρ_j, all ≤ 0."""
    s = dot_nt(q, k) * scale
    if lam_gap is not None:
        s = s + (lam_gap[:, None] + rho[None, :])
    if seg_q is not None:
        s = jnp.where(seg_q[:, None] == seg_k[None, :], s, -jnp.inf)
    return s


def key_gate_terms(a_ref: Any | None, j: jax.Array | int, c: int, lam: jax.Array,
                   gap: jax.Array) -> tuple[jax.Array | None, jax.Array | None, jax.Array]:
    """Gate terms of key tile j while walking keys backwards from the query tile: (ρ, λ + gap, next gap).

    lam [C] is the query tile's prefix sums; the gap grows by this tile's total. (None, None, gap) without a
    gate (`a_ref` None).
    """
    if a_ref is None:
        return None, None, gap
    a_k = block_slice(a_ref, j, c)
    return gate_sums.suffix_sums(a_k), lam + gap, gap + jnp.sum(a_k)


def key_logits(q: jax.Array, k_j: jax.Array, a_ref: Any | None, seg_ref: Any | None, j: jax.Array | int, c: int,
               lam: jax.Array, gap: jax.Array, seg_q: jax.Array | None,
               scale: float) -> tuple[jax.Array, jax.Array]:
    """Masked logits [C, C] of the query tile q [C, D] against key tile j (k_j [C, D]), walking keys backwards
    from the query tile, and the next gap. lam, gap as in `key_gate_terms`; seg_q the query tile's segment ids.
    """
    rho, lam_gap, gap = key_gate_terms(a_ref, j, c, lam, gap)
    return off_logits(q, k_j, lam_gap, rho, seg_q, optional_slice(seg_ref, j, c), scale), gap


def query_gate_terms(a_ref: Any | None, i: jax.Array | int, c: int,
                     gap: jax.Array) -> tuple[jax.Array | None, jax.Array]:
    """Gate terms of query tile i while walking queries forwards from the key tile: (λ + gap, next gap).

    gap(j, i+1) = gap(j, i) + tot_i. (None, gap) without a gate (`a_ref` None).
    """
    if a_ref is None:
        return None, gap
    a_q = block_slice(a_ref, i, c)
    return gate_sums.prefix_sums(a_q) + gap, gap + jnp.sum(a_q)


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
