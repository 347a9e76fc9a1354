"""Pallas forward kernel of value-forget attention (FiX; GPU style, runs with interpret=True on CPU).

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md), not read from code.

Grid (B, H, N): one program per batch row, query head and query block I of C rows starting at b_I. The
program sees K, V, both gate rows and the segment ids of the whole (padded) sequence. It does the diagonal
block first and then walks key blocks J = I−1, …, 0 with an online softmax.
Each per-channel decay exp(Λ_i − Λ_j) is a product of local sums (all ≤ 0, see `kernels._common.gate_sums`
for the scalar version):

    Λ_i − Λ_j = λ_i + gap(J, I) + ρ_j      (J < I)
    λ_i = Σ_{l=b_I..i} a_l   prefix inside the query block, applied once to the off-diagonal sum at the end
    gap = Σ_{J<K<I} tot_K    one Dv vector per (I, J), a running sum, applied to that pair's P·V'
    ρ_j = Σ_{l=j+1..e_J} a_l  suffix inside the key block, applied to the V tile (V' = exp(ρ) ⊙ V)

and inside the diagonal block the masked-cumsum segment sums Σ_{l=j+1..i} a_l, taken per channel as a
[C, C, Dv] tensor. The FoX scalar gate enters the logits exactly as in the FoX kernel.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common import gate_sums

_F32 = jnp.float32


def channel_suffix_sums(a: jax.Array) -> jax.Array:
    """ρ[j, c] = Σ_{l>j} a[l, c] inside one block (a masked reduction). a [C, Dv] f32 -> [C, Dv]."""
    c = a.shape[0]
    later = lax.broadcasted_iota(jnp.int32, (c, c), 1) > lax.broadcasted_iota(jnp.int32, (c, c), 0)
    return jnp.sum(jnp.where(later[:, :, None], a[None, :, :], 0.0), axis=1)


def channel_segment_decays(a: jax.Array) -> jax.Array:
    """E[i, j, c] = exp(Σ_{j<l≤i} a[l, c]) for j ≤ i, 1 above the diagonal. a [C, Dv] -> [C, C, Dv].

    The sums are a cumsum over l of M[l, j, c] = a[l, c]·[l > j] (the stable segsum, per channel). Above
    the diagonal the entries are 1, harmless because P is exactly 0 there.
    """
    c = a.shape[0]
    row = lax.broadcasted_iota(jnp.int32, (c, c), 0)
    col = lax.broadcasted_iota(jnp.int32, (c, c), 1)
    return jnp.exp(jnp.cumsum(jnp.where((row > col)[:, :, None], a[:, None, :], 0.0), axis=0))


def decayed_values(a: jax.Array, v: jax.Array) -> jax.Array:
    """V' = exp(ρ) ⊙ V for one key block: the part of the decay that depends on the key only (≤ 1)."""
    return jnp.exp(channel_suffix_sums(a)) * v.astype(_F32)


def fwd_kernel(*refs: Any, c: int, scale: float, has_fgate: bool, has_seg: bool) -> None:
    """refs: q [C,D], k [Tp,D], v [Tp,Dv], av [Tp,Dv], (af [Tp]), (seg [Tp]) -> u [C,Dv] f32, lse [C]."""
    r = tiles.unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("av", True), ("af", has_fgate),
                                 ("seg", has_seg), ("u", True), ("lse", True)])
    i = pl.program_id(2)
    q = r["q"][...]
    av_q = tiles.block_slice(r["av"], i, c)
    af_q = tiles.optional_slice(r["af"], i, c)
    seg_q = tiles.optional_slice(r["seg"], i, c)
    m_diag, p, l_sum = tiles.softmax_start(tiles.diag_logits(q, tiles.block_slice(r["k"], i, c), af_q, seg_q, scale))
    v_i = tiles.block_slice(r["v"], i, c).astype(_F32)
    diag = jnp.sum(p[:, :, None] * channel_segment_decays(av_q) * v_i[None, :, :], axis=1)
    lam_f = gate_sums.prefix_sums(af_q) if has_fgate else jnp.zeros((c,), _F32)
    carry = (m_diag, l_sum, jnp.zeros(diag.shape, _F32), jnp.zeros(diag.shape[1:], _F32), jnp.zeros((), _F32))

    def key_block(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        m, l_sum, acc, gap_v, gap_f = carry
        j = i - 1 - t
        k_j = tiles.block_slice(r["k"], j, c)
        s, gap_f = tiles.key_logits(q, k_j, r["af"], r["seg"], j, c, lam_f, gap_f, seg_q, scale)
        m_new, alpha, p, l_sum = tiles.softmax_step(m, l_sum, s)
        av_k = tiles.block_slice(r["av"], j, c)
        v_j = tiles.block_slice(r["v"], j, c)
        pv = tiles.dot_nn(p.astype(v_j.dtype), decayed_values(av_k, v_j).astype(v_j.dtype))
        acc = alpha[:, None] * acc + pv * jnp.exp(gap_v)[None, :]
        return m_new, l_sum, acc, gap_v + jnp.sum(av_k, axis=0), gap_f

    m, l_sum, acc, _, _ = lax.fori_loop(0, i, key_block, carry)
    lam_v = jnp.cumsum(av_q, axis=0)
    u = jnp.exp(m_diag - m)[:, None] * diag + jnp.exp(lam_v) * acc
    r["u"][...] = u / l_sum[:, None]
    r["lse"][...] = m + jnp.log(l_sum)
