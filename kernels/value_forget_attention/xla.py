"""Blocked online-softmax value-forget attention (FiX) in plain XLA: the default path.

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md). Never materializes [T, T]:
per block pair only [C, C] logits. For a key block J before the query block I the per-channel decay
splits into factors that are all ≤ 1 and each a LOCAL sum of log gates (`kernels._common.gate_sums`):

    Λ_i − Λ_j = λ_i + gap(J, I) + ρ_j,    exp(·) = F_i ⊙ exp(gap) ⊙ R_j,

with λ_i the inclusive prefix sum inside the query block, gap the block totals in between (a running sum
while walking the key blocks) and ρ_j the exclusive suffix sum inside the key block. F and R ⊙ v are
computed once per block, so an off-diagonal block pair is an ordinary flash-attention step plus one
Dv-vector scaling of its P·V' tile; F_i is applied once per query block after the key loop.

The diagonal block uses GLA-style secondary chunking: it is split into sub-chunks of at most
`SUB_CHUNK` positions. Inside a sub-chunk the per-channel decay is the exact [c, c, Dv] product of masked
segment sums; between sub-chunks r < s it factors through the sub-chunk boundaries exactly like the block
pairs above (prefix inside s, totals strictly between, suffix inside r), so that part is batched matmuls.

The `jax.custom_vjp` stores u (float32) and the logsumexp only; the backward recomputes each block pair.
With du the output cotangent and dṽ_j = Σ_i P_ij D_ij ⊙ du_i (the gradient of the decayed values, per
query head):  dP_ij = du_i·(D_ij ⊙ v_j),  dS = P ⊙ (dP − δ_i) with δ_i = du_i·u_i,  dv = Σ_group dṽ,
dΛ^v_i = du_i ⊙ u_i − v_i ⊙ dṽ_i (row sum minus column sum of the exponent gradient), and d log_vgate is
the segmented reverse cumsum of dΛ^v; the FoX scalar gate is handled as in FoX (row sums minus column sums of dS).

Internal layout (block index first): q [N,B,Hk,G,C,D], k [N,B,Hk,C,D], v [N,B,Hk,C,Dv],
log_vgate channel-major [N,B,Hk,G,Dv,C] float32, log_fgate [N,B,Hk,G,C] float32, segment ids [N,B,C].
Inside the diagonal block, S sub-chunks of c positions (C = S·c); c = 8 measured fastest on CPU (the exact
intra-sub-chunk decays cost C·c·Dv exponentials per block, the sub-chunk pairs (C/c)²·Dv).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from icml26zoo.kernels._common import blocks, gate_sums
from icml26zoo.kernels._common.attention_tiles import softmax_start, softmax_step
from icml26zoo.kernels._common.precision import einsum_f32

DEFAULT_BLOCK_SIZE = 64
SUB_CHUNK = 8
_F32 = jnp.float32

# A loop carry: arrays, with None for an absent scalar gate.
Carry = tuple[jax.Array | None, ...]
# (a, λ, ρ, gap) of one diagonal block's sub-chunks, see `_diag_gates`.
DiagGates = tuple[jax.Array, jax.Array, jax.Array, jax.Array]


def _mm(spec: str, x: jax.Array, y: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """einsum with both operands in `dtype` (the input dtype: bf16 matmuls for bf16 inputs), fp32 result."""
    return einsum_f32(spec, x.astype(dtype), y.astype(dtype))


def _cl(x: jax.Array) -> jax.Array:
    """Swap the last two axes: channel-major [..., Dv, C] <-> time-major [..., C, Dv]."""
    return jnp.swapaxes(x, -1, -2)


def _sub_size(c: int) -> int:
    """Sub-chunk length of a diagonal block of C positions: the largest divisor of C that is ≤ SUB_CHUNK."""
    return max(d for d in range(1, min(c, SUB_CHUNK) + 1) if c % d == 0)


def _prefix_sums(a: jax.Array, axis: int) -> jax.Array:
    """λ: inclusive cumsum along `axis` (float32)."""
    return lax.cumsum(a, axis=axis % a.ndim)


def _suffix_sums(a: jax.Array, axis: int) -> jax.Array:
    """ρ_j = Σ_{l>j} a_l along `axis` (exclusive), a reverse cumsum.

    The sums of `gate_sums.suffix_sums` (each entry a plain sum of its own terms) in O(C) per row: its masked
    [C, C] reduction was the largest single pass of this path on CPU.
    """
    axis = axis % a.ndim
    inclusive = lax.cumsum(a, axis=axis, reverse=True)
    shifted = lax.slice_in_dim(inclusive, 1, a.shape[axis], axis=axis)
    return jnp.concatenate([shifted, jnp.zeros_like(lax.slice_in_dim(a, 0, 1, axis=axis))], axis=axis)


def _causal(c: int) -> jax.Array:
    return lax.broadcasted_iota(jnp.int32, (c, c), 0) >= lax.broadcasted_iota(jnp.int32, (c, c), 1)


def _pair_matrices(c: int) -> tuple[np.ndarray, np.ndarray, jax.Array, jax.Array, jax.Array]:
    """The strictly-lower pairs (i, j), j < i, of a sub-chunk: index arrays I, J [P] (P = c(c−1)/2) and 0/1
    float32 matrices seg [P, c] (seg[p, l] = 1 when J_p < l ≤ I_p), rows [c, P] (I_p = i), cols [c, P] (J_p = j).
    """
    rows_i, cols_j = np.tril_indices(c, -1)
    pos = np.arange(c)
    seg = (cols_j[:, None] < pos[None, :]) & (pos[None, :] <= rows_i[:, None])
    to_f32 = functools.partial(jnp.asarray, dtype=_F32)
    return rows_i, cols_j, to_f32(seg), to_f32(pos[:, None] == rows_i), to_f32(pos[:, None] == cols_j)


def _diag_logits(qb: jax.Array, kb: jax.Array, af_blk: jax.Array | None, seg_blk: jax.Array | None,
                 scale: float) -> jax.Array:
    """Masked logits [B,Hk,G,C,C] of a diagonal block (causal, same segment, FoX segment sums as bias)."""
    mask = _causal(qb.shape[-2])[None, None, None]
    if seg_blk is not None:
        mask = mask & (seg_blk[:, :, None] == seg_blk[:, None, :])[:, None, None]
    s = _mm("bhgqd,bhkd->bhgqk", qb, kb, qb.dtype) * scale
    if af_blk is not None:
        s = s + gate_sums.segment_sums(af_blk)
    return jnp.where(mask, s, -jnp.inf)


def _diag_gates(av_blk: jax.Array, sub: int) -> DiagGates:
    """Secondary-chunk decay factors of a diagonal block from its time-major log gates av_blk [B,Hk,G,C,Dv].

    Returns (a, lam, rho, gap): a [B,Hk,G,S,c,Dv] the gates per sub-chunk (for `_pair_decays`) and, every
    entry ≤ 1 and the exp of a local sum:
      lam [B,Hk,G,S,c,Dv]  exp of the inclusive prefix sum inside the (query) sub-chunk;
      rho [B,Hk,G,S,c,Dv]  exp of the exclusive suffix sum inside the (key) sub-chunk;
      gap [B,Hk,G,S,S,Dv]  [s, r]: exp of the sub-chunk totals strictly between r and s; 0 unless r < s.
    """
    n_sub = av_blk.shape[-2] // sub
    a = _sub_blocks(av_blk, n_sub)
    lam = jnp.exp(_prefix_sums(a, -2))
    rho = jnp.exp(_suffix_sums(a, -2))
    tot = jnp.sum(a, axis=-2)  # [B,Hk,G,S,Dv]
    iota = functools.partial(lax.broadcasted_iota, jnp.int32, (n_sub, n_sub, n_sub))
    s_idx, r_idx, l_idx = iota(0), iota(1), iota(2)
    between = (r_idx < l_idx) & (l_idx < s_idx)
    gap = jnp.sum(jnp.where(between[..., None], tot[..., None, None, :, :], 0.0), axis=-2)
    gap = jnp.where((r_idx[..., 0] < s_idx[..., 0])[..., None], jnp.exp(gap), 0.0)
    return a, lam, rho, gap


def _pair_decays(a: jax.Array) -> jax.Array:
    """Exact per-channel decays exp(Σ_{j<l≤i} a_l) of the strictly-lower pairs of each sub-chunk (`_pair_matrices`).

    a [B,Hk,G,S,c,Dv] -> [B,Hk,G,S,P,Dv]. The pair j = i has decay 1 and j > i none, so only these P = c(c−1)/2
    exponentials per channel are taken. The segment sums are a masked reduction written as a matmul with the
    0/1 matrix `seg` (exact products, so each entry is a plain float32 sum of its own terms).
    """
    seg = _pair_matrices(a.shape[-2])[2]
    return jnp.exp(einsum_f32("pl,bhgsld->bhgspd", seg, a))


def _sub_blocks(x: jax.Array, n_sub: int) -> jax.Array:
    """[..., C, F] -> [..., S, c, F]."""
    return x.reshape(*x.shape[:-2], n_sub, x.shape[-2] // n_sub, x.shape[-1])


def _split_pairs(p: jax.Array, n_sub: int) -> tuple[jax.Array, jax.Array]:
    """p [B,Hk,G,C,C] -> (all sub-chunk pairs [B,Hk,G,S,c,S,c], the S diagonal pairs [B,Hk,G,S,c,c])."""
    sub = p.shape[-1] // n_sub
    p6 = p.reshape(*p.shape[:-2], n_sub, sub, n_sub, sub)
    return p6, jnp.moveaxis(jnp.diagonal(p6, axis1=-4, axis2=-2), -1, -3)


def _gap_scaled(gap: jax.Array, x: jax.Array) -> jax.Array:
    """gap [B,Hk,G,S,S,Dv] ⊙ x [B,Hk,G,S,c,Dv] broadcast over the first S axis -> [B,Hk,G,S, S·c, Dv]."""
    out = gap[..., None, :] * x[..., None, :, :, :]
    return out.reshape(*gap.shape[:-2], -1, gap.shape[-1])


def _diag_values(p: jax.Array, vb: jax.Array, dg: DiagGates) -> jax.Array:
    """Σ_{j in block} P_ij D_ij ⊙ v_j. p [B,Hk,G,C,C], vb [B,Hk,C,Dv] float32 -> [B,Hk,G,C,Dv]."""
    a, lam, rho, gap = dg
    n_sub, sub = lam.shape[-3], lam.shape[-2]
    p6, p_in = _split_pairs(p, n_sub)
    v4 = _sub_blocks(vb, n_sub)[:, :, None]  # [B,Hk,1,S,c,Dv]
    out = jnp.diagonal(p, axis1=-2, axis2=-1)[..., None] * vb[:, :, None]  # j = i: decay 1
    # Σ_{r<s} gap[s, r] ⊙ Σ_{j in r} P_ij (ρ_j ⊙ v_j), as one [c, C] @ [C, Dv] matmul per query sub-chunk s.
    cross = lam * einsum_f32("bhgsik,bhgskd->bhgsid", p6.reshape(*p6.shape[:-2], -1), _gap_scaled(gap, v4 * rho))
    if sub > 1:
        rows_i, cols_j, _, rows, _ = _pair_matrices(sub)
        pairs = p_in[..., rows_i, cols_j][..., None] * _pair_decays(a) * v4[..., cols_j, :]
        cross = cross + einsum_f32("ip,bhgspd->bhgsid", rows, pairs)
    return out + cross.reshape(out.shape)


def _diag_dp(du_b: jax.Array, vb: jax.Array, dg: DiagGates) -> jax.Array:
    """dP_ij = du_i·(D_ij ⊙ v_j) in a diagonal block. du_b [B,Hk,G,C,Dv], vb [B,Hk,C,Dv] -> [B,Hk,G,C,C]."""
    a, lam, rho, gap = dg
    n_sub, sub = lam.shape[-3], lam.shape[-2]
    du4, v4 = _sub_blocks(du_b, n_sub), _sub_blocks(vb, n_sub)[:, :, None]
    # (λ_i ⊙ du_i)·(gap[s, r] ⊙ ρ_j ⊙ v_j) for every key of the block, one [c, Dv] @ [Dv, C] matmul per s.
    dp = einsum_f32("bhgsid,bhgskd->bhgsik", du4 * lam, _gap_scaled(gap, v4 * rho)).reshape(*du4.shape[:-1], n_sub, sub)
    if sub > 1:
        rows_i, cols_j, _, rows, cols = _pair_matrices(sub)
        pairs = jnp.sum(du4[..., rows_i, :] * _pair_decays(a) * v4[..., cols_j, :], axis=-1)  # [B,Hk,G,S,P]
        dp_in = einsum_f32("ijp,bhgsp->bhgsij", rows[:, None, :] * cols[None, :, :], pairs)
        dp = dp + dp_in[..., :, :, None, :] * jnp.eye(n_sub, dtype=_F32)[:, None, :, None]
    c = n_sub * sub
    dp_ii = jnp.sum(du_b * vb[:, :, None], axis=-1)  # j = i: decay 1
    return dp.reshape(*dp.shape[:3], c, c) + dp_ii[..., None] * jnp.eye(c, dtype=_F32)


def _diag_dvt(p: jax.Array, du_b: jax.Array, dg: DiagGates) -> jax.Array:
    """dṽ_j = Σ_{i in block} P_ij D_ij ⊙ du_i. p [B,Hk,G,C,C], du_b [B,Hk,G,C,Dv] -> [B,Hk,G,C,Dv]."""
    a, lam, rho, gap = dg
    n_sub, sub = lam.shape[-3], lam.shape[-2]
    p6, p_in = _split_pairs(p, n_sub)
    du4 = _sub_blocks(du_b, n_sub)
    out = jnp.diagonal(p, axis1=-2, axis2=-1)[..., None] * du_b  # i = j: decay 1
    # ρ_j ⊙ Σ_{s>r} gap[s, r] ⊙ Σ_{i in s} P_ij (λ_i ⊙ du_i), one [c, C] @ [C, Dv] matmul per key sub-chunk r.
    gap_du = _gap_scaled(jnp.swapaxes(gap, -2, -3), du4 * lam)  # [B,Hk,G,S(key),S(query)·c,Dv]
    p_t = jnp.moveaxis(p6, (-2, -1), (-4, -3)).reshape(*p6.shape[:3], n_sub, sub, -1)
    cross = rho * einsum_f32("bhgrjk,bhgrkd->bhgrjd", p_t, gap_du)
    if sub > 1:
        rows_i, cols_j, _, _, cols = _pair_matrices(sub)
        pairs = p_in[..., rows_i, cols_j][..., None] * _pair_decays(a) * du4[..., rows_i, :]
        cross = cross + einsum_f32("jp,bhgspd->bhgsjd", cols, pairs)
    return out + cross.reshape(out.shape)


def _off_logits(qb: jax.Array, kb: jax.Array, f_gates: tuple[jax.Array, jax.Array, jax.Array] | None,
                seg_q: jax.Array | None, seg_k: jax.Array | None, scale: float) -> jax.Array:
    """Masked logits [B,Hk,G,Cq,Ck] of a key block before the query block; f_gates = (λ_i, gap, ρ_j) or None."""
    s = _mm("bhgqd,bhkd->bhgqk", qb, kb, qb.dtype) * scale
    if f_gates is not None:
        lam_q, gap, rho_k = f_gates
        s = s + ((lam_q + gap[..., None])[..., :, None] + rho_k[..., None, :])
    if seg_q is not None:
        s = jnp.where((seg_q[:, :, None] == seg_k[:, None, :])[:, None, None], s, -jnp.inf)
    return s


def _block_gates(a: jax.Array | None) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None]:
    """a [N, ..., C] -> (λ, ρ, totals [N, ...]) inside each block; all None when a is None."""
    if a is None:
        return None, None, None
    return gate_sums.prefix_sums(a), _suffix_sums(a, -1), jnp.sum(a, axis=-1)


def _f_terms(lam_f: jax.Array | None, rho_f: jax.Array | None, gap_f: jax.Array | None, i: jax.Array,
             j: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array] | None:
    return None if lam_f is None else (lam_f[i], gap_f, rho_f[j])


def _value_factors(av_t: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Block-pair decay factors, once per block: F = exp(λ), R = exp(ρ) [N,B,Hk,G,C,Dv] and totals [N,B,Hk,G,Dv].

    av_t: time-major log gates [N,B,Hk,G,C,Dv] float32.
    """
    return jnp.exp(_prefix_sums(av_t, -2)), jnp.exp(_suffix_sums(av_t, -2)), jnp.sum(av_t, axis=-2)


def _forward(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None, seg: jax.Array | None,
             scale: float) -> tuple[jax.Array, jax.Array]:
    """Blocked forward. Returns u [N,B,Hk,G,C,Dv] float32 and lse [N,B,Hk,G,C] float32."""
    sub = _sub_size(q.shape[-2])
    av_t = _cl(av)
    f_q, r_k, tot_v = _value_factors(av_t)
    v_decayed = (v[:, :, :, None].astype(_F32) * r_k).astype(v.dtype)  # R_j ⊙ v_j per query head
    lam_f, rho_f, tot_f = _block_gates(af)
    gap_v0 = jnp.zeros(av.shape[1:5], _F32)
    gap_f0 = None if af is None else jnp.zeros(af.shape[1:4], _F32)

    def query_block(_: None, i: jax.Array) -> tuple[None, tuple[jax.Array, jax.Array]]:
        qb, seg_q = q[i], blocks.pick(seg, i)
        # The diagonal block goes first (see `softmax_start`).
        m_diag, p, l_sum = softmax_start(_diag_logits(qb, k[i], blocks.pick(af, i), seg_q, scale))
        acc_diag = _diag_values(p, v[i].astype(_F32), _diag_gates(av_t[i], sub))

        def key_block(t: jax.Array, carry: Carry) -> Carry:
            m, l_sum, acc, gap_v, gap_f = carry
            j = i - 1 - t
            s = _off_logits(qb, k[j], _f_terms(lam_f, rho_f, gap_f, i, j), seg_q, blocks.pick(seg, j), scale)
            m_new, alpha, p, l_sum = softmax_step(m, l_sum, s)
            # F_i is common to every key block, so only the gap vector scales this tile.
            pv = _mm("bhgqk,bhgkc->bhgqc", p, v_decayed[j], v.dtype)
            acc = alpha[..., None] * acc + jnp.exp(gap_v)[..., None, :] * pv
            gap_f = gap_f if tot_f is None else gap_f + tot_f[j]
            return m_new, l_sum, acc, gap_v + tot_v[j], gap_f

        acc0 = jnp.zeros_like(acc_diag)
        m, l_sum, acc, _, _ = lax.fori_loop(0, i, key_block, (m_diag, l_sum, acc0, gap_v0, gap_f0))
        acc = jnp.exp(m_diag - m)[..., None] * acc_diag + f_q[i] * acc
        return None, (acc / l_sum[..., None], m + jnp.log(l_sum))

    _, (u, lse) = lax.scan(query_block, None, jnp.arange(q.shape[0]))
    return u, lse


def _pair_grads(s: jax.Array, qb: jax.Array, kb: jax.Array, dp: jax.Array, lse_b: jax.Array, delta_b: jax.Array,
                scale: float) -> tuple[jax.Array, ...]:
    """Logit-side gradients of one block pair from masked logits s and dP = du·(D ⊙ v), both [B,Hk,G,Cq,Ck].

    Returns P, dq [B,Hk,G,Cq,D], dk [B,Hk,Ck,D] (summed over the group) and the dS row/column sums.
    """
    p = jnp.exp(s - lse_b[..., None])  # masked logits are −inf and lse is finite: p = 0 there
    ds = p * (dp - delta_b[..., None])
    dk = _mm("bhgqk,bhgqd->bhkd", ds, qb, qb.dtype) * scale
    dq = _mm("bhgqk,bhkd->bhgqd", ds, kb, kb.dtype) * scale
    return p, dq, dk, jnp.sum(ds, axis=-1), jnp.sum(ds, axis=-2)


def _backward(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None, seg: jax.Array | None,
              u: jax.Array, lse: jax.Array, du: jax.Array, scale: float) -> tuple[jax.Array, ...]:
    """Blocked backward: one recompute per block pair.

    Returns dq, dk, dṽ [N,B,Hk,G,C,Dv] (per query head) and the FoX dΛ^f blocks (or None).
    """
    n, sub = q.shape[0], _sub_size(q.shape[-2])
    av_t = _cl(av)
    f_q, r_k, tot_v = _value_factors(av_t)
    v_decayed = (v[:, :, :, None].astype(_F32) * r_k).astype(v.dtype)  # R_j ⊙ v_j
    du_decayed = du * f_q  # F_i ⊙ du_i
    lam_f, rho_f, tot_f = _block_gates(af)
    delta = jnp.sum(du * u, axis=-1)  # δ_i = du_i·u_i = Σ_j P_ij dP_ij

    def key_block(carry: tuple[jax.Array, jax.Array], j: jax.Array) -> tuple[tuple, tuple]:
        dq_all, rows_all = carry
        kb, vb, seg_k = k[j], v[j].astype(_F32), blocks.pick(seg, j)
        s = _diag_logits(q[j], kb, blocks.pick(af, j), seg_k, scale)
        dg = _diag_gates(av_t[j], sub)
        p, dq, dk, rows, cols = _pair_grads(s, q[j], kb, _diag_dp(du[j], vb, dg), lse[j], delta[j], scale)
        dvt = _diag_dvt(p, du[j], dg)
        dq_all = dq_all.at[j].add(dq)
        rows_all = rows_all.at[j].add(rows)

        def query_block(i: jax.Array, inner: Carry) -> Carry:
            dq_all, rows_all, dk, dvt_in, cols, gap_v, gap_f = inner
            s = _off_logits(q[i], kb, _f_terms(lam_f, rho_f, gap_f, i, j), blocks.pick(seg, i), seg_k, scale)
            du_out = du_decayed[i] * jnp.exp(gap_v)[..., None, :]  # F_i ⊙ exp(gap) ⊙ du_i
            dp = _mm("bhgqc,bhgkc->bhgqk", du_out, v_decayed[j], v.dtype)
            p, dq_i, dk_i, rows_i, cols_i = _pair_grads(s, q[i], kb, dp, lse[i], delta[i], scale)
            dvt_in = dvt_in + _mm("bhgqk,bhgqc->bhgkc", p, du_out, v.dtype)
            dq_all = lax.dynamic_update_index_in_dim(dq_all, dq_all[i] + dq_i, i, 0)
            rows_all = lax.dynamic_update_index_in_dim(rows_all, rows_all[i] + rows_i, i, 0)
            # Walking forward: gap(J, I+1) = gap(J, I) + tot_I.
            gap_f = gap_f if tot_f is None else gap_f + tot_f[i]
            return dq_all, rows_all, dk + dk_i, dvt_in, cols + cols_i, gap_v + tot_v[i], gap_f

        gap_v0 = jnp.zeros(av.shape[1:5], _F32)
        gap_f0 = None if af is None else jnp.zeros(af.shape[1:4], _F32)
        inner = (dq_all, rows_all, dk, jnp.zeros_like(dvt), cols, gap_v0, gap_f0)
        dq_all, rows_all, dk, dvt_in, cols, _, _ = lax.fori_loop(j + 1, n, query_block, inner)
        return (dq_all, rows_all), (dk, dvt + r_k[j] * dvt_in, cols)

    init = (jnp.zeros(q.shape, _F32), jnp.zeros(lse.shape, _F32))
    (dq, rows), (dk, dvt, cols) = lax.scan(key_block, init, jnp.arange(n))
    d_lambda_f = None if af is None else rows - cols
    return dq, dk, dvt, d_lambda_f


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _blocked(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None, seg: jax.Array | None,
             scale: float) -> jax.Array:
    return _forward(q, k, v, av, af, seg, scale)[0].astype(v.dtype)


def _blocked_fwd(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None,
                 seg: jax.Array | None, scale: float) -> tuple[jax.Array, tuple]:
    u, lse = _forward(q, k, v, av, af, seg, scale)
    return u.astype(v.dtype), (q, k, v, av, af, seg, u, lse)


def _blocked_bwd(scale: float, res: tuple, du: jax.Array) -> tuple:
    q, k, v, av, af, seg, u, lse = res
    du = du.astype(_F32)
    dq, dk, dvt, d_lambda_f = _backward(q, k, v, av, af, seg, u, lse, du, scale)
    # dΛ^v_i = du_i ⊙ u_i − v_i ⊙ dṽ_i per query head, channel-major like av.
    d_lambda_v = jnp.swapaxes(du * u - v[:, :, :, None].astype(_F32) * dvt, -1, -2)
    dav = blocks.blocked_reverse_cumsum(d_lambda_v, seg)
    daf = None if af is None else blocks.blocked_reverse_cumsum(d_lambda_f, seg)
    dv = jnp.sum(dvt, axis=3)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dav, daf, None


_blocked.defvjp(_blocked_fwd, _blocked_bwd)


def value_forget_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array, *,
                           log_fgate: jax.Array | None = None, scale: float | None = None,
                           segment_ids: jax.Array | None = None, block_size: int = DEFAULT_BLOCK_SIZE) -> jax.Array:
    """Blocked FiX attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k [B, T, Hkv, D]; v [B, T, Hkv, Dv]; log_vgate [B, T, H, Dv] (≤ 0); log_fgate [B, T, H]
    (≤ 0) or None; segment_ids [B, T] int or None. T need not be a multiple of `block_size`: the tail is
    zero-padded (padded keys are only visible to padded queries, which are dropped).
    Returns u [B, T, H, Dv] in v.dtype (softmax-normalized, no RMSNorm).
    """
    x = blocks.attention_blocks(q, k, v, segment_ids, scale, block_size)
    av = jnp.swapaxes(blocks.padded_blocks(log_vgate.astype(_F32), x.block, x.padded, x.num_kv_heads), -1, -2)
    af = blocks.gate_blocks(log_fgate, x.block, x.padded, x.num_kv_heads)
    u = _blocked(x.q, x.k, x.v, av, af, x.seg, x.scale)
    return blocks.from_blocks(u)[:, :q.shape[1]]
