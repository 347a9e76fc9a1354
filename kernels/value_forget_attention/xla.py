"""Blocked online-softmax value-forget attention (FiX) in plain XLA: the default path.

FiX is a RECONSTRUCTION from the paper's abstract (specs/mixers-01 Part B). Never materializes [T, T]:
per block pair only [C, C] logits, and for the diagonal block the [C, C, Dv] per-channel decay product
(GLA-style secondary chunking, spec B.3). For a key block J before the query block I the per-channel decay
splits into factors that are all ≤ 1 and each a LOCAL sum of log gates (`forgetting_attention._gates`):

    Λ_i − Λ_j = (λ_i + gap(J, I)) + ρ_j,    exp(·) = F_i ⊙ R_j,

with λ_i the inclusive prefix sum inside the query block, gap the block totals in between (a running sum
while walking the key blocks) and ρ_j the exclusive suffix sum inside the key block. R_j scales the value
tile once, F_i scales the tile's P·V' product, so the off-diagonal work is an ordinary flash-attention step.

The `jax.custom_vjp` stores u (float32) and the logsumexp only; the backward recomputes each block pair.
With du the output cotangent and dṽ_j = Σ_i P_ij D_ij ⊙ du_i (the gradient of the decayed values, per
query head):  dP_ij = du_i·(D_ij ⊙ v_j),  dS = P ⊙ (dP − δ_i) with δ_i = du_i·u_i,  dv = Σ_group dṽ,
dΛ^v_i = du_i ⊙ u_i − v_i ⊙ dṽ_i (row sum minus column sum of the exponent gradient), and d log_vgate is
the segmented reverse cumsum of dΛ^v; the FoX scalar gate is handled as in forgetting_attention.xla.

Internal layout (block index first): q [N,B,Hk,G,C,D], k [N,B,Hk,C,D], v [N,B,Hk,C,Dv],
log_vgate channel-major [N,B,Hk,G,Dv,C] float32, log_fgate [N,B,Hk,G,C] float32, segment ids [N,B,C].
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from kernels.forgetting_attention import _gates

DEFAULT_BLOCK_SIZE = 64
_HI = lax.Precision.HIGHEST
_F32 = jnp.float32


def _mm(spec, x, y, dtype):
    """einsum with both operands in `dtype` (the input dtype: bf16 matmuls for bf16 inputs), fp32 result."""
    return jnp.einsum(spec, x.astype(dtype), y.astype(dtype), precision=_HI, preferred_element_type=_F32)


def _pick(x, i):
    return None if x is None else x[i]


def _cl(x):
    """Channel-major [..., Dv, C] -> time-major [..., C, Dv]."""
    return jnp.swapaxes(x, -1, -2)


def _diag_mask(seg_blk, c):
    """Causal (and same-segment) mask of a diagonal block: [B or 1, 1, 1, C, C] bool."""
    mask = (lax.broadcasted_iota(jnp.int32, (c, c), 0) >= lax.broadcasted_iota(jnp.int32, (c, c), 1))
    mask = mask[None, None, None]
    if seg_blk is not None:
        mask = mask & (seg_blk[:, :, None] == seg_blk[:, None, :])[:, None, None]
    return mask


def _diag_terms(qb, kb, av_blk, af_blk, seg_blk, scale):
    """Masked logits [B,Hk,G,C,C] and per-channel decays D [B,Hk,G,Dv,C,C] (0 where masked) of a diagonal block."""
    mask = _diag_mask(seg_blk, qb.shape[-2])
    s = _mm("bhgqd,bhkd->bhgqk", qb, kb, qb.dtype) * scale
    if af_blk is not None:
        s = s + _gates.segment_sums(af_blk)
    # Mask before the exponential: masked exponents are −inf, so exp gives exact zeros and finite gradients.
    decay = jnp.exp(jnp.where(mask[:, :, :, None], _gates.segment_sums(av_blk), -jnp.inf))
    return jnp.where(mask, s, -jnp.inf), decay


def _off_logits(qb, kb, f_gates, seg_q, seg_k, scale):
    """Masked logits [B,Hk,G,Cq,Ck] of a key block before the query block; f_gates = (λ_i, gap, ρ_j) or None."""
    s = _mm("bhgqd,bhkd->bhgqk", qb, kb, qb.dtype) * scale
    if f_gates is not None:
        lam_q, gap, rho_k = f_gates
        s = s + ((lam_q + gap[..., None])[..., :, None] + rho_k[..., None, :])
    if seg_q is not None:
        s = jnp.where((seg_q[:, :, None] == seg_k[:, None, :])[:, None, None], s, -jnp.inf)
    return s


def _block_gates(a):
    """a [N, ..., C] -> (λ, ρ, totals [N, ...]) inside each block; all None when a is None."""
    if a is None:
        return None, None, None
    return _gates.prefix_sums(a), _gates.suffix_sums(a), jnp.sum(a, axis=-1)


def _f_terms(lam_f, rho_f, gap_f, i, j):
    return None if lam_f is None else (lam_f[i], gap_f, rho_f[j])


def _forward(q, k, v, av, af, seg, scale):
    """Blocked forward. Returns u [N,B,Hk,G,C,Dv] float32 and lse [N,B,Hk,G,C] float32."""
    lam_v, rho_v, tot_v = _block_gates(av)
    lam_f, rho_f, tot_f = _block_gates(af)
    gap_v0 = jnp.zeros(av.shape[1:5], _F32)
    gap_f0 = None if af is None else jnp.zeros(af.shape[1:4], _F32)

    def query_block(_, i):
        qb, seg_q = q[i], _pick(seg, i)
        # The diagonal block goes first: it always holds j = i, so m is finite from here on and
        # exp(s − m) of a masked (−inf) logit is exactly 0 — no −inf − (−inf).
        s, decay = _diag_terms(qb, k[i], av[i], _pick(af, i), seg_q, scale)
        m = jnp.max(s, axis=-1)
        p = jnp.exp(s - m[..., None])
        l_sum = jnp.sum(p, axis=-1)
        acc = jnp.einsum("bhgqk,bhgcqk,bhkc->bhgqc", p, decay, v[i].astype(_F32), precision=_HI)

        def key_block(t, carry):
            m, l_sum, acc, gap_v, gap_f = carry
            j = i - 1 - t
            s = _off_logits(qb, k[j], _f_terms(lam_f, rho_f, gap_f, i, j), seg_q, _pick(seg, j), scale)
            m_new = jnp.maximum(m, jnp.max(s, axis=-1))
            alpha = jnp.exp(m - m_new)
            p = jnp.exp(s - m_new[..., None])
            l_sum = alpha * l_sum + jnp.sum(p, axis=-1)
            v_in = v[j][:, :, None].astype(_F32) * _cl(jnp.exp(rho_v[j]))  # R_j ⊙ v_j, [B,Hk,G,Ck,Dv]
            f_out = _cl(jnp.exp(lam_v[i] + gap_v[..., None]))  # F_i, [B,Hk,G,Cq,Dv]
            acc = alpha[..., None] * acc + f_out * _mm("bhgqk,bhgkc->bhgqc", p, v_in, v.dtype)
            gap_f = gap_f if tot_f is None else gap_f + tot_f[j]
            return m_new, l_sum, acc, gap_v + tot_v[j], gap_f

        m, l_sum, acc, _, _ = lax.fori_loop(0, i, key_block, (m, l_sum, acc, gap_v0, gap_f0))
        return None, (acc / l_sum[..., None], m + jnp.log(l_sum))

    _, (u, lse) = lax.scan(query_block, None, jnp.arange(q.shape[0]))
    return u, lse


def _pair_grads(s, qb, kb, dp, lse_b, delta_b, scale):
    """Logit-side gradients of one block pair from masked logits s and dP = du·(D ⊙ v), both [B,Hk,G,Cq,Ck].

    Returns P, dq [B,Hk,G,Cq,D], dk [B,Hk,Ck,D] (summed over the group) and the dS row/column sums.
    """
    p = jnp.exp(s - lse_b[..., None])  # masked logits are −inf and lse is finite: p = 0 there
    ds = p * (dp - delta_b[..., None])
    dk = _mm("bhgqk,bhgqd->bhkd", ds, qb, qb.dtype) * scale
    dq = _mm("bhgqk,bhkd->bhgqd", ds, kb, kb.dtype) * scale
    return p, dq, dk, jnp.sum(ds, axis=-1), jnp.sum(ds, axis=-2)


def _backward(q, k, v, av, af, seg, u, lse, du, scale):
    """Blocked backward: one recompute per block pair.

    Returns dq, dk, dṽ [N,B,Hk,G,C,Dv] (per query head) and the FoX dΛ^f blocks (or None).
    """
    n = q.shape[0]
    lam_v, rho_v, tot_v = _block_gates(av)
    lam_f, rho_f, tot_f = _block_gates(af)
    delta = jnp.sum(du * u, axis=-1)  # δ_i = du_i·u_i = Σ_j P_ij dP_ij

    def key_block(carry, j):
        dq_all, rows_all = carry
        kb, vb, seg_k = k[j], v[j].astype(_F32), _pick(seg, j)
        s, decay = _diag_terms(q[j], kb, av[j], _pick(af, j), seg_k, scale)
        dp = jnp.einsum("bhgqc,bhgcqk,bhkc->bhgqk", du[j], decay, vb, precision=_HI)
        p, dq, dk, rows, cols = _pair_grads(s, q[j], kb, dp, lse[j], delta[j], scale)
        dvt = jnp.einsum("bhgqk,bhgcqk,bhgqc->bhgkc", p, decay, du[j], precision=_HI)
        dq_all = dq_all.at[j].add(dq)
        rows_all = rows_all.at[j].add(rows)
        r_in = _cl(jnp.exp(rho_v[j]))  # R_j [B,Hk,G,Ck,Dv]
        v_in = vb[:, :, None] * r_in

        def query_block(i, inner):
            dq_all, rows_all, dk, dvt_in, cols, gap_v, gap_f = inner
            s = _off_logits(q[i], kb, _f_terms(lam_f, rho_f, gap_f, i, j), _pick(seg, i), seg_k, scale)
            du_out = du[i] * _cl(jnp.exp(lam_v[i] + gap_v[..., None]))  # F_i ⊙ du_i
            dp = _mm("bhgqc,bhgkc->bhgqk", du_out, v_in, v.dtype)
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
        return (dq_all, rows_all), (dk, dvt + r_in * dvt_in, cols)

    init = (jnp.zeros(q.shape, _F32), jnp.zeros(lse.shape, _F32))
    (dq, rows), (dk, dvt, cols) = lax.scan(key_block, init, jnp.arange(n))
    d_lambda_f = None if af is None else rows - cols
    return dq, dk, dvt, d_lambda_f


def _time_reverse_cumsum(d_lambda, seg):
    """Per-block dΛ [N, ..., C] -> d log gate = Σ_{i ≥ t, same segment} dΛ_i, in the same block layout."""
    n, c = d_lambda.shape[0], d_lambda.shape[-1]
    flat = jnp.moveaxis(d_lambda, 0, -2).reshape(*d_lambda.shape[1:-1], n * c)
    seg_flat = None
    if seg is not None:
        seg_flat = jnp.moveaxis(seg, 0, 1).reshape(seg.shape[1], *([1] * (flat.ndim - 2)), n * c)
    summed = _gates.segmented_reverse_cumsum(flat, seg_flat)
    return jnp.moveaxis(summed.reshape(*d_lambda.shape[1:-1], n, c), -2, 0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _blocked(q, k, v, av, af, seg, scale):
    return _forward(q, k, v, av, af, seg, scale)[0].astype(v.dtype)


def _blocked_fwd(q, k, v, av, af, seg, scale):
    u, lse = _forward(q, k, v, av, af, seg, scale)
    return u.astype(v.dtype), (q, k, v, av, af, seg, u, lse)


def _blocked_bwd(scale, res, du):
    q, k, v, av, af, seg, u, lse = res
    du = du.astype(_F32)
    dq, dk, dvt, d_lambda_f = _backward(q, k, v, av, af, seg, u, lse, du, scale)
    # dΛ^v_i = du_i ⊙ u_i − v_i ⊙ dṽ_i per query head, channel-major like av.
    d_lambda_v = jnp.swapaxes(du * u - v[:, :, :, None].astype(_F32) * dvt, -1, -2)
    dav = _time_reverse_cumsum(d_lambda_v, seg)
    daf = None if af is None else _time_reverse_cumsum(d_lambda_f, seg)
    dv = jnp.sum(dvt, axis=3)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dav, daf, None


_blocked.defvjp(_blocked_fwd, _blocked_bwd)


def _to_blocks(x, c, hkv):
    """[B, Tp, H, *F] -> [N, B, Hkv, G, C, *F] (Tp = N·C)."""
    b, tp, h = x.shape[:3]
    x = x.reshape(b, tp // c, c, hkv, h // hkv, *x.shape[3:])
    return jnp.moveaxis(x, (1, 3, 4), (0, 2, 3))


def _from_blocks(x):
    """[N, B, Hkv, G, C, Dv] -> [B, N·C, Hkv·G, Dv]."""
    n, b, hkv, g, c, d = x.shape
    return jnp.moveaxis(x, (0, 2, 3), (1, 3, 4)).reshape(b, n * c, hkv * g, d)


def _pad_time(x, tp):
    pad = [(0, 0)] * x.ndim
    pad[1] = (0, tp - x.shape[1])
    return jnp.pad(x, pad)


def value_forget_attention(q, k, v, log_vgate, *, log_fgate=None, scale=None, segment_ids=None,
                           block_size=DEFAULT_BLOCK_SIZE):
    """Blocked FiX attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k [B, T, Hkv, D]; v [B, T, Hkv, Dv]; log_vgate [B, T, H, Dv] (≤ 0); log_fgate [B, T, H]
    (≤ 0) or None; segment_ids [B, T] int or None. T need not be a multiple of `block_size`: the tail is
    zero-padded (padded keys are only visible to padded queries, which are dropped).
    Returns u [B, T, H, Dv] in v.dtype (softmax-normalized, no RMSNorm).
    """
    _, t, h, d = q.shape
    hkv = k.shape[2]
    scale = d**-0.5 if scale is None else float(scale)
    c = max(1, min(block_size, t))
    tp = -(-t // c) * c
    qb = _to_blocks(_pad_time(q, tp), c, hkv)
    kb = _to_blocks(_pad_time(k, tp), c, hkv)[:, :, :, 0]
    vb = _to_blocks(_pad_time(v, tp), c, hkv)[:, :, :, 0]
    av = jnp.swapaxes(_to_blocks(_pad_time(log_vgate.astype(_F32), tp), c, hkv), -1, -2)
    af = None
    if log_fgate is not None:
        af = _to_blocks(_pad_time(log_fgate.astype(_F32), tp)[..., None], c, hkv)[..., 0]
    seg = None
    if segment_ids is not None:
        seg = _pad_time(segment_ids.astype(jnp.int32), tp).reshape(-1, tp // c, c).swapaxes(0, 1)
    u = _blocked(qb, kb, vb, av, af, seg, scale)
    return _from_blocks(u)[:, :t]
