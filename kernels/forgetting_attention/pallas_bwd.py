"""Pallas backward kernels of forgetting attention: one for dq (and dS row sums), one for dk/dv (and dS
column sums). Both recompute P = exp(S − lse) block by block from the stored logsumexp.

dq kernel, grid (B, H, N): query block i walks key blocks i, i−1, …, 0 (gap = running sum backwards).
dkv kernel, grid (B, H, N): key block j walks query blocks j, j+1, …, N−1 (gap = running sum forwards).
dk and dv are produced per *query* head and summed over the GQA group by the caller. The row and column
sums of dS give dΛ = rows − cols, turned into d log_fgate by a reverse cumsum outside the kernels.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common import gate_sums
from icml26zoo.kernels._common.precision import ACCUM_DTYPE


def _ds(s: jax.Array, do: jax.Array, v: jax.Array, lse: jax.Array,
        delta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """p = exp(s − lse) (0 where s = −inf), dS = p ⊙ (dO·Vᵀ − δ). s [Cq,Ck], do [Cq,D], v [Ck,D]."""
    p = jnp.exp(s - lse[:, None])
    return p, p * (tiles.dot_nt(do, v) - delta[:, None])


def dq_kernel(*refs: Any, c: int, scale: float, has_gate: bool, has_seg: bool) -> None:
    """refs: q [C,D], k/v [Tp,D], (a [Tp]), (seg [Tp]), do [C,D], lse [C], delta [C]
    -> dq [C,D], (rows [C])."""
    r = tiles.unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("a", has_gate), ("seg", has_seg),
                                 ("do", True), ("lse", True), ("delta", True), ("dq", True), ("rows", has_gate)])
    i = pl.program_id(2)
    q, do, lse, delta = r["q"][...], r["do"][...], r["lse"][...], r["delta"][...]
    a_q = tiles.optional_slice(r["a"], i, c)
    seg_q = tiles.optional_slice(r["seg"], i, c)
    k_i = tiles.block_slice(r["k"], i, c)
    s = tiles.diag_logits(q, k_i, a_q, seg_q, scale)
    _, ds = _ds(s, do, tiles.block_slice(r["v"], i, c), lse, delta)
    lam = gate_sums.prefix_sums(a_q) if has_gate else jnp.zeros((c,), ACCUM_DTYPE)
    carry = (tiles.dot_nn(ds.astype(k_i.dtype), k_i), jnp.sum(ds, axis=1), jnp.zeros((), ACCUM_DTYPE))

    def key_block(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        dq, rows, gap = carry
        j = i - 1 - t
        k_j = tiles.block_slice(r["k"], j, c)
        s, gap = tiles.key_logits(q, k_j, r["a"], r["seg"], j, c, lam, gap, seg_q, scale)
        _, ds = _ds(s, do, tiles.block_slice(r["v"], j, c), lse, delta)
        return dq + tiles.dot_nn(ds.astype(k_j.dtype), k_j), rows + jnp.sum(ds, axis=1), gap

    dq, rows, _ = lax.fori_loop(0, i, key_block, carry)
    r["dq"][...] = (dq * scale).astype(r["dq"].dtype)
    if has_gate:
        r["rows"][...] = rows


def dkv_kernel(*refs: Any, c: int, n: int, scale: float, has_gate: bool, has_seg: bool) -> None:
    """refs: q [Tp,D], k/v [C,D], (a [Tp]), (seg [Tp]), do [Tp,D], lse [Tp], delta [Tp]
    -> dk [C,D], dv [C,D] (this query head's share), (cols [C])."""
    r = tiles.unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("a", has_gate), ("seg", has_seg),
                                 ("do", True), ("lse", True), ("delta", True), ("dk", True), ("dv", True),
                                 ("cols", has_gate)])
    j = pl.program_id(2)
    k, v = r["k"][...], r["v"][...]
    a_k = tiles.optional_slice(r["a"], j, c)
    seg_k = tiles.optional_slice(r["seg"], j, c)
    rho = gate_sums.suffix_sums(a_k) if has_gate else None

    def pair(i: jax.Array, s: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        q_i, do_i = tiles.block_slice(r["q"], i, c), tiles.block_slice(r["do"], i, c)
        p, ds = _ds(s, do_i, v, tiles.block_slice(r["lse"], i, c), tiles.block_slice(r["delta"], i, c))
        return tiles.dot_tn(ds.astype(q_i.dtype), q_i), tiles.dot_tn(p.astype(do_i.dtype), do_i), jnp.sum(ds, axis=0)

    dk, dv, cols = pair(j, tiles.diag_logits(tiles.block_slice(r["q"], j, c), k, a_k, seg_k, scale))

    def query_block(i: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        dk, dv, cols, gap = carry
        lam_gap, gap = tiles.query_gate_terms(r["a"], i, c, gap)
        seg_q = tiles.optional_slice(r["seg"], i, c)
        s = tiles.off_logits(tiles.block_slice(r["q"], i, c), k, lam_gap, rho, seg_q, seg_k, scale)
        dk_i, dv_i, cols_i = pair(i, s)
        return dk + dk_i, dv + dv_i, cols + cols_i, gap

    dk, dv, cols, _ = lax.fori_loop(j + 1, n, query_block, (dk, dv, cols, jnp.zeros((), ACCUM_DTYPE)))
    r["dk"][...] = (dk * scale).astype(r["dk"].dtype)
    r["dv"][...] = dv.astype(r["dv"].dtype)
    if has_gate:
        r["cols"][...] = cols
