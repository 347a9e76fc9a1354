"""Pallas backward kernels of value-forget attention (FiX): one for dq (and dS row sums), one for dk/dv
(and dS column sums). Both recompute P = exp(S − lse) block by block from the stored logsumexp.

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md), not read from code.

With D_ij = exp(Λ^v_i − Λ^v_j) (per channel) and u_i = Σ_j P_ij D_ij ⊙ v_j:

    dP_ij = du_i · (D_ij ⊙ v_j),   dS = P ⊙ (dP − δ_i),   δ_i = du_i · u_i   (flash style, from the output)
    dv_j  = Σ_i P_ij D_ij ⊙ du_i   (per query head; the caller sums it over the GQA group)

Off the diagonal the decay splits as exp(λ_i)·exp(gap)·exp(ρ_j) (see pallas_fwd), so dP is one matmul of
du ⊙ exp(λ + gap) against V' = exp(ρ) ⊙ V; in the diagonal block it is a [C, C, Dv] masked reduction.
dq kernel, grid (B, H, N): query block i walks key blocks i, i−1, …, 0 (gaps = running sums backwards).
dkv kernel, grid (B, H, N): key block j walks query blocks j, j+1, …, N−1 (gaps = running sums forwards).
The gate gradients (row − column sums of dS for log_fgate, du ⊙ u − v ⊙ dv for log_vgate, then segmented
reverse cumsums) are formed outside the kernels.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common.gate_sums import prefix_sums, suffix_sums
from icml26zoo.kernels.value_forget_attention.pallas_fwd import (
    channel_segment_decays,
    channel_suffix_sums,
    decayed_values,
)

_F32 = jnp.float32


def _diag_pair(s: jax.Array, du: jax.Array, v: jax.Array, av: jax.Array, lse: jax.Array,
               delta: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Diagonal block: p, dS [C,C] and this block's dv [C,Dv] from s [C,C], du/v/av [C,Dv], lse/delta [C]."""
    p = jnp.exp(s - lse[:, None])
    decay = channel_segment_decays(av)
    dp = jnp.sum(du[:, None, :] * decay * v.astype(_F32)[None, :, :], axis=2)
    dv = jnp.sum(p[:, :, None] * decay * du[:, None, :], axis=0)
    return p, p * (dp - delta[:, None]), dv


def _off_pair(s: jax.Array, du_decayed: jax.Array, v_decayed: jax.Array, lse: jax.Array, delta: jax.Array,
              dtype: jnp.dtype) -> tuple[jax.Array, jax.Array]:
    """Off-diagonal pair: p, dS [Cq,Ck] from du ⊙ exp(λ + gap) [Cq,Dv] and V' = exp(ρ) ⊙ V [Ck,Dv]."""
    p = jnp.exp(s - lse[:, None])
    dp = tiles.dot_nt(du_decayed.astype(dtype), v_decayed.astype(dtype))
    return p, p * (dp - delta[:, None])


def dq_kernel(*refs: Any, c: int, scale: float, has_fgate: bool, has_seg: bool) -> None:
    """refs: q [C,D], k [Tp,D], v [Tp,Dv], av [Tp,Dv], (af [Tp]), (seg [Tp]), du [C,Dv], lse [C], delta [C]
    -> dq [C,D], (rows [C])."""
    r = tiles.unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("av", True), ("af", has_fgate),
                                 ("seg", has_seg), ("du", True), ("lse", True), ("delta", True), ("dq", True),
                                 ("rows", has_fgate)])
    i = pl.program_id(2)
    q, lse, delta = r["q"][...], r["lse"][...], r["delta"][...]
    du = r["du"][...].astype(_F32)
    av_q = tiles.block_slice(r["av"], i, c)
    af_q = tiles.optional_slice(r["af"], i, c)
    seg_q = tiles.optional_slice(r["seg"], i, c)
    k_i = tiles.block_slice(r["k"], i, c)
    s = tiles.diag_logits(q, k_i, af_q, seg_q, scale)
    _, ds, _ = _diag_pair(s, du, tiles.block_slice(r["v"], i, c), av_q, lse, delta)
    lam_f = prefix_sums(af_q) if has_fgate else jnp.zeros((c,), _F32)
    lam_v = jnp.cumsum(av_q, axis=0)
    carry = (tiles.dot_nn(ds.astype(k_i.dtype), k_i), jnp.sum(ds, axis=1), jnp.zeros(lam_v.shape[1:], _F32),
             jnp.zeros((), _F32))

    def key_block(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        dq, rows, gap_v, gap_f = carry
        j = i - 1 - t
        k_j, v_j = tiles.block_slice(r["k"], j, c), tiles.block_slice(r["v"], j, c)
        av_k = tiles.block_slice(r["av"], j, c)
        s, gap_f = tiles.key_logits(q, k_j, r["af"], r["seg"], j, c, lam_f, gap_f, seg_q, scale)
        du_decayed = du * jnp.exp(lam_v + gap_v[None, :])
        _, ds = _off_pair(s, du_decayed, decayed_values(av_k, v_j), lse, delta, v_j.dtype)
        gap_v = gap_v + jnp.sum(av_k, axis=0)
        return dq + tiles.dot_nn(ds.astype(k_j.dtype), k_j), rows + jnp.sum(ds, axis=1), gap_v, gap_f

    dq, rows, _, _ = lax.fori_loop(0, i, key_block, carry)
    r["dq"][...] = (dq * scale).astype(r["dq"].dtype)
    if has_fgate:
        r["rows"][...] = rows


def dkv_kernel(*refs: Any, c: int, n: int, scale: float, has_fgate: bool, has_seg: bool) -> None:
    """refs: q [Tp,D], k [C,D], v [C,Dv], av [Tp,Dv], (af [Tp]), (seg [Tp]), du [Tp,Dv], lse [Tp],
    delta [Tp] -> dk [C,D], dv [C,Dv] (this query head's share, f32), (cols [C])."""
    r = tiles.unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("av", True), ("af", has_fgate),
                                 ("seg", has_seg), ("du", True), ("lse", True), ("delta", True), ("dk", True),
                                 ("dv", True), ("cols", has_fgate)])
    j = pl.program_id(2)
    k, v = r["k"][...], r["v"][...]
    av_k = tiles.block_slice(r["av"], j, c)
    af_k = tiles.optional_slice(r["af"], j, c)
    seg_k = tiles.optional_slice(r["seg"], j, c)
    rho_f = suffix_sums(af_k) if has_fgate else None
    rho_v = jnp.exp(channel_suffix_sums(av_k))
    v_decayed = rho_v * v.astype(_F32)

    q_j, du_j = tiles.block_slice(r["q"], j, c), tiles.block_slice(r["du"], j, c).astype(_F32)
    s = tiles.diag_logits(q_j, k, af_k, seg_k, scale)
    lse_j, delta_j = tiles.block_slice(r["lse"], j, c), tiles.block_slice(r["delta"], j, c)
    _, ds, dv_diag = _diag_pair(s, du_j, v, av_k, lse_j, delta_j)
    carry = (tiles.dot_tn(ds.astype(q_j.dtype), q_j), jnp.zeros(dv_diag.shape, _F32), jnp.sum(ds, axis=0),
             jnp.zeros(dv_diag.shape[1:], _F32), jnp.zeros((), _F32))

    def query_block(i: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        dk, dv, cols, gap_v, gap_f = carry
        lam_gap_f, gap_f = tiles.query_gate_terms(r["af"], i, c, gap_f)
        q_i, av_q = tiles.block_slice(r["q"], i, c), tiles.block_slice(r["av"], i, c)
        s = tiles.off_logits(q_i, k, lam_gap_f, rho_f, tiles.optional_slice(r["seg"], i, c), seg_k, scale)
        du_decayed = tiles.block_slice(r["du"], i, c).astype(_F32) * jnp.exp(jnp.cumsum(av_q, axis=0) + gap_v[None, :])
        lse_i, delta_i = tiles.block_slice(r["lse"], i, c), tiles.block_slice(r["delta"], i, c)
        p, ds = _off_pair(s, du_decayed, v_decayed, lse_i, delta_i, v.dtype)
        dk = dk + tiles.dot_tn(ds.astype(q_i.dtype), q_i)
        dv = dv + tiles.dot_tn(p.astype(v.dtype), du_decayed.astype(v.dtype))
        return dk, dv, cols + jnp.sum(ds, axis=0), gap_v + jnp.sum(av_q, axis=0), gap_f

    dk, dv, cols, _, _ = lax.fori_loop(j + 1, n, query_block, carry)
    r["dk"][...] = (dk * scale).astype(r["dk"].dtype)
    r["dv"][...] = dv_diag + rho_v * dv
    if has_fgate:
        r["cols"][...] = cols
