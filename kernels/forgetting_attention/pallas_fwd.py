"""Pallas forward kernel of forgetting attention (GPU style; runs with interpret=True on CPU).

Grid (B, H, N): one program per batch row, query head and query block of C rows. K, V, the log-gate row
and the segment ids of the whole (padded) sequence are visible to the program; it walks the diagonal key
block first and then key blocks i−1, …, 0, so the gap between blocks is a running sum of block totals and
the running max is finite from the first step (masked logits are −inf before any exp).
"""

from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl

from kernels.forgetting_attention import _gates

_HI = lax.Precision.HIGHEST
_F32 = jnp.float32


def dot_nt(x, y):
    """x [M, D] · y [N, D]ᵀ -> [M, N] float32."""
    return lax.dot_general(x, y, (((1,), (1,)), ((), ())), precision=_HI, preferred_element_type=_F32)


def dot_nn(x, y):
    """x [M, K] · y [K, N] -> [M, N] float32."""
    return lax.dot_general(x, y, (((1,), (0,)), ((), ())), precision=_HI, preferred_element_type=_F32)


def dot_tn(x, y):
    """x [K, M]ᵀ · y [K, N] -> [M, N] float32."""
    return lax.dot_general(x, y, (((0,), (0,)), ((), ())), precision=_HI, preferred_element_type=_F32)


def unpack_refs(refs, layout):
    """Map the positional refs onto names; names whose flag is False get None."""
    it = iter(refs)
    return {name: (next(it) if present else None) for name, present in layout}


def block_slice(ref, j, c):
    """Rows [j·C, (j+1)·C) of a full-sequence ref (1-D [Tp] or 2-D [Tp, D])."""
    return ref[pl.ds(j * c, c)] if len(ref.shape) == 1 else ref[pl.ds(j * c, c), :]


def diag_logits(q, k, a_blk, seg_blk, scale):
    """Masked logits [C, C] of the diagonal block: causal, bias = in-block segment sums."""
    s = dot_nt(q, k) * scale
    if a_blk is not None:
        s = s + _gates.segment_sums(a_blk)
    c = s.shape[0]
    mask = lax.broadcasted_iota(jnp.int32, (c, c), 0) >= lax.broadcasted_iota(jnp.int32, (c, c), 1)
    if seg_blk is not None:
        mask = mask & (seg_blk[:, None] == seg_blk[None, :])
    return jnp.where(mask, s, -jnp.inf)


def off_logits(q, k, lam_gap, rho, seg_q, seg_k, scale):
    """Masked logits [C, C] of a key block before the query block: bias (λ_i + gap) + ρ_j, all ≤ 0."""
    s = dot_nt(q, k) * scale
    if lam_gap is not None:
        s = s + (lam_gap[:, None] + rho[None, :])
    if seg_q is not None:
        s = jnp.where(seg_q[:, None] == seg_k[None, :], s, -jnp.inf)
    return s


def fwd_kernel(*refs, c, scale, has_gate, has_seg):
    """refs: q [C,D], k/v [Tp,D], (a [Tp]), (seg [Tp]) -> o [C,D], lse [C]."""
    r = unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("a", has_gate), ("seg", has_seg),
                           ("o", True), ("lse", True)])
    i = pl.program_id(2)
    q = r["q"][...]
    a_q = block_slice(r["a"], i, c) if has_gate else None
    seg_q = block_slice(r["seg"], i, c) if has_seg else None
    s = diag_logits(q, block_slice(r["k"], i, c), a_q, seg_q, scale)
    m = jnp.max(s, axis=1)
    p = jnp.exp(s - m[:, None])
    v_i = block_slice(r["v"], i, c)
    carry = (m, jnp.sum(p, axis=1), dot_nn(p.astype(v_i.dtype), v_i),
             jnp.zeros((), _F32), _gates.prefix_sums(a_q) if has_gate else jnp.zeros((c,), _F32))

    def key_block(t, carry):
        m, l_sum, acc, gap, lam = carry
        j = i - 1 - t
        rho, lam_gap = None, None
        if has_gate:
            a_k = block_slice(r["a"], j, c)
            rho, lam_gap = _gates.suffix_sums(a_k), lam + gap
            gap = gap + jnp.sum(a_k)
        seg_k = block_slice(r["seg"], j, c) if has_seg else None
        s = off_logits(q, block_slice(r["k"], j, c), lam_gap, rho, seg_q, seg_k, scale)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        alpha = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[:, None])
        v_j = block_slice(r["v"], j, c)
        acc = alpha[:, None] * acc + dot_nn(p.astype(v_j.dtype), v_j)
        return m_new, alpha * l_sum + jnp.sum(p, axis=1), acc, gap, lam

    m, l_sum, acc, _, _ = lax.fori_loop(0, i, key_block, carry)
    r["o"][...] = (acc / l_sum[:, None]).astype(r["o"].dtype)
    r["lse"][...] = m + jnp.log(l_sum)
