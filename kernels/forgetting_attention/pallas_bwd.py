"""Pallas backward kernels of forgetting attention: one for dq (and dS row sums), one for dk/dv (and dS
column sums). Both recompute P = exp(S − lse) block by block from the stored logsumexp.

dq kernel, grid (B, H, N): query block i walks key blocks i, i−1, …, 0 (gap = running sum backwards).
dkv kernel, grid (B, H, N): key block j walks query blocks j, j+1, …, N−1 (gap = running sum forwards).
dk and dv are produced per *query* head and summed over the GQA group by the caller. The row and column
sums of dS give dΛ = rows − cols, turned into d log_fgate by a reverse cumsum outside the kernels.
"""

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from kernels.forgetting_attention import _gates
from kernels.forgetting_attention.pallas_fwd import (
    block_slice,
    diag_logits,
    dot_nn,
    dot_nt,
    dot_tn,
    off_logits,
    unpack_refs,
)

_F32 = jnp.float32


def _ds(s, do, v, lse, delta):
    """p = exp(s − lse) (0 where s = −inf), dS = p ⊙ (dO·Vᵀ − δ). s [Cq,Ck], do [Cq,D], v [Ck,D]."""
    p = jnp.exp(s - lse[:, None])
    return p, p * (dot_nt(do, v) - delta[:, None])


def dq_kernel(*refs, c, scale, has_gate, has_seg):
    """refs: q [C,D], k/v [Tp,D], (a [Tp]), (seg [Tp]), do [C,D], lse [C], delta [C]
    -> dq [C,D], (rows [C])."""
    r = unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("a", has_gate), ("seg", has_seg),
                           ("do", True), ("lse", True), ("delta", True), ("dq", True), ("rows", has_gate)])
    i = pl.program_id(2)
    q, do, lse, delta = r["q"][...], r["do"][...], r["lse"][...], r["delta"][...]
    a_q = block_slice(r["a"], i, c) if has_gate else None
    seg_q = block_slice(r["seg"], i, c) if has_seg else None
    k_i = block_slice(r["k"], i, c)
    s = diag_logits(q, k_i, a_q, seg_q, scale)
    _, ds = _ds(s, do, block_slice(r["v"], i, c), lse, delta)
    lam = _gates.prefix_sums(a_q) if has_gate else jnp.zeros((c,), _F32)
    carry = (dot_nn(ds.astype(k_i.dtype), k_i), jnp.sum(ds, axis=1), jnp.zeros((), _F32))

    def key_block(t, carry):
        dq, rows, gap = carry
        j = i - 1 - t
        rho, lam_gap = None, None
        if has_gate:
            a_k = block_slice(r["a"], j, c)
            rho, lam_gap = _gates.suffix_sums(a_k), lam + gap
            gap = gap + jnp.sum(a_k)
        seg_k = block_slice(r["seg"], j, c) if has_seg else None
        k_j = block_slice(r["k"], j, c)
        s = off_logits(q, k_j, lam_gap, rho, seg_q, seg_k, scale)
        _, ds = _ds(s, do, block_slice(r["v"], j, c), lse, delta)
        return dq + dot_nn(ds.astype(k_j.dtype), k_j), rows + jnp.sum(ds, axis=1), gap

    dq, rows, _ = lax.fori_loop(0, i, key_block, carry)
    r["dq"][...] = (dq * scale).astype(r["dq"].dtype)
    if has_gate:
        r["rows"][...] = rows


def dkv_kernel(*refs, c, n, scale, has_gate, has_seg):
    """refs: q [Tp,D], k/v [C,D], (a [Tp]), (seg [Tp]), do [Tp,D], lse [Tp], delta [Tp]
    -> dk [C,D], dv [C,D] (this query head's share), (cols [C])."""
    r = unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("a", has_gate), ("seg", has_seg),
                           ("do", True), ("lse", True), ("delta", True), ("dk", True), ("dv", True),
                           ("cols", has_gate)])
    j = pl.program_id(2)
    k, v = r["k"][...], r["v"][...]
    a_k = block_slice(r["a"], j, c) if has_gate else None
    seg_k = block_slice(r["seg"], j, c) if has_seg else None
    rho = _gates.suffix_sums(a_k) if has_gate else None

    def pair(i, s):
        q_i, do_i = block_slice(r["q"], i, c), block_slice(r["do"], i, c)
        p, ds = _ds(s, do_i, v, block_slice(r["lse"], i, c), block_slice(r["delta"], i, c))
        return dot_tn(ds.astype(q_i.dtype), q_i), dot_tn(p.astype(do_i.dtype), do_i), jnp.sum(ds, axis=0)

    dk, dv, cols = pair(j, diag_logits(block_slice(r["q"], j, c), k, a_k, seg_k, scale))

    def query_block(i, carry):
        dk, dv, cols, gap = carry
        lam_gap = None
        if has_gate:
            a_q = block_slice(r["a"], i, c)
            lam_gap = _gates.prefix_sums(a_q) + gap
            gap = gap + jnp.sum(a_q)  # gap(j, i+1) = gap(j, i) + tot_i
        seg_q = block_slice(r["seg"], i, c) if has_seg else None
        s = off_logits(block_slice(r["q"], i, c), k, lam_gap, rho, seg_q, seg_k, scale)
        dk_i, dv_i, cols_i = pair(i, s)
        return dk + dk_i, dv + dv_i, cols + cols_i, gap

    dk, dv, cols, _ = lax.fori_loop(j + 1, n, query_block, (dk, dv, cols, jnp.zeros((), _F32)))
    r["dk"][...] = (dk * scale).astype(r["dk"].dtype)
    r["dv"][...] = dv.astype(r["dv"].dtype)
    if has_gate:
        r["cols"][...] = cols
