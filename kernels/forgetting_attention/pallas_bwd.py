"""Pallas backward kernels of forgetting attention: one for dq (and dS row sums), one for dk/dv (and dS
column sums). Both recompute P = exp(S − lse) block by block from the stored logsumexp.

dq kernel, grid (B, H, N), query-major: query block i walks key blocks i, i−1, …, 0 (gap = running sum
backwards). dkv kernel, grid (B, H, N), key-major (tiles sᵀ[j, i], so that the per-query λ, lse, δ and
segment ids it walks over are read as rows): key block j walks query blocks j, j+1, …, N−1 (gap = running
sum forwards). dk and dv are produced per *query* head and summed over the GQA group by the caller. The row
and column sums of dS give dΛ = rows − cols, turned into d log_fgate by a reverse cumsum outside the kernels.
P and dS are set to zero with `jnp.where` on masked pairs, never by multiplying a masked zero.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common.precision import ACCUM_DTYPE

_IN = [("q", True), ("k", True), ("v", True)]


def _gate_refs(has_gate: bool, has_seg: bool) -> list[tuple[str, bool]]:
    return [("a", has_gate), ("lam", has_gate), ("rho", has_gate), ("seg_rows", has_seg), ("seg_col", has_seg)]


def _ds(s: jax.Array, mask: jax.Array | None, dp: jax.Array, lse: jax.Array,
        delta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """p = exp(s − lse) and dS = p ⊙ (dP − δ), both 0 on masked pairs (lse, δ broadcast along the query axis)."""
    p = tiles.masked(mask, jnp.exp(s - lse))
    return p, tiles.masked(mask, p * (dp - delta))


def dq_kernel(*refs: Any, c: int, scale: float, has_gate: bool, has_seg: bool, tpu: bool) -> None:
    """refs: q [C,D], k/v [Tp,D], (a, λ, ρ rows [N,1,C]), (seg rows, seg col [C,1]), do [C,D], lse row [1,C],
    δ row [1,C] -> dq [C,D], (dS row sums, row [1,C])."""
    r = tiles.unpack_refs(refs, _IN + _gate_refs(has_gate, has_seg) + [
        ("do", True), ("lse", True), ("delta", True), ("dq", True), ("rows", has_gate)])
    i = pl.program_id(2)
    q, do = r["q"][...], r["do"][...]
    lse, delta = tiles.to_col(r["lse"][...]), tiles.to_col(r["delta"][...])
    seg_q = r["seg_col"][...] if has_seg else None
    k_i = tiles.tile_at(r["k"], i, c)
    s, mask = tiles.diag_logits(q, k_i, tiles.row_at(r["a"], i), seg_q, tiles.row_at(r["seg_rows"], i), scale, tpu)
    _, ds = _ds(s, mask, tiles.dot_nt(do, tiles.tile_at(r["v"], i, c)), lse, delta)
    lam = tiles.to_col(r["lam"][i]) if has_gate else None
    carry = (tiles.dot_nn(ds.astype(k_i.dtype), k_i), tiles.row_sum(ds), jnp.zeros((1, 1), ACCUM_DTYPE))

    def key_block(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        dq, rows, gap = carry
        j = i - 1 - t
        bias = None
        if has_gate:
            bias = (lam + gap) + r["rho"][j]
            gap = gap + tiles.row_sum(r["a"][j])
        k_j = tiles.tile_at(r["k"], j, c)
        s, mask = tiles.off_logits(q, k_j, bias, seg_q, tiles.row_at(r["seg_rows"], j), scale)
        _, ds = _ds(s, mask, tiles.dot_nt(do, tiles.tile_at(r["v"], j, c)), lse, delta)
        return dq + tiles.dot_nn(ds.astype(k_j.dtype), k_j), rows + tiles.row_sum(ds), gap

    dq, rows, _ = lax.fori_loop(0, i, key_block, carry)
    r["dq"][...] = (dq * scale).astype(r["dq"].dtype)
    if has_gate:
        r["rows"][...] = tiles.to_row(rows)


def dkv_kernel(*refs: Any, c: int, n: int, scale: float, has_gate: bool, has_seg: bool, tpu: bool) -> None:
    """refs: q [Tp,D], k/v [C,D], (a, λ, ρ rows [N,1,C]), (seg rows, seg col [C,1] of the keys), do [Tp,D],
    lse / δ rows [N,1,C] -> dk [C,D], dv [C,D] (this query head's share), (dS column sums, row [1,C])."""
    r = tiles.unpack_refs(refs, _IN + _gate_refs(has_gate, has_seg) + [
        ("do", True), ("lse", True), ("delta", True), ("dk", True), ("dv", True), ("cols", has_gate)])
    j = pl.program_id(2)
    k, v = r["k"][...], r["v"][...]
    seg_k = r["seg_col"][...] if has_seg else None
    rho = tiles.to_col(r["rho"][j]) if has_gate else None

    def pair(i: jax.Array, s: jax.Array, mask: jax.Array | None) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(dk, dv, column sums) of key block j against query block i from sᵀ [Ck, Cq]."""
        q_i, do_i = tiles.tile_at(r["q"], i, c), tiles.tile_at(r["do"], i, c)
        p, ds = _ds(s, mask, tiles.dot_nt(v, do_i), r["lse"][i], r["delta"][i])
        return (tiles.dot_nn(ds.astype(q_i.dtype), q_i), tiles.dot_nn(p.astype(do_i.dtype), do_i),
                tiles.row_sum(ds))

    s, mask = tiles.diag_logits_t(k, tiles.tile_at(r["q"], j, c), tiles.row_at(r["a"], j), seg_k,
                                  tiles.row_at(r["seg_rows"], j), scale, tpu)
    dk, dv, cols = pair(j, s, mask)

    def query_block(i: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        dk, dv, cols, gap = carry
        bias = None
        if has_gate:
            bias = rho + (r["lam"][i] + gap)
            gap = gap + tiles.row_sum(r["a"][i])
        s, mask = tiles.off_logits(k, tiles.tile_at(r["q"], i, c), bias, seg_k, tiles.row_at(r["seg_rows"], i),
                                   scale)
        dk_i, dv_i, cols_i = pair(i, s, mask)
        return dk + dk_i, dv + dv_i, cols + cols_i, gap

    dk, dv, cols, _ = lax.fori_loop(j + 1, n, query_block, (dk, dv, cols, jnp.zeros((1, 1), ACCUM_DTYPE)))
    r["dk"][...] = (dk * scale).astype(r["dk"].dtype)
    r["dv"][...] = dv.astype(r["dv"].dtype)
    if has_gate:
        r["cols"][...] = tiles.to_row(cols)
