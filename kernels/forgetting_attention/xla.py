"""Blocked online-softmax (flash-style) forgetting attention in plain XLA: the default path.

Never materializes [T, T]. The forward walks, for each query block I (a `lax.scan`), the diagonal block
first and then the key blocks I−1, …, 0 (a `lax.fori_loop` with a data-dependent trip count, so no
masked-out upper-triangle work), keeping the running max m, denominator l and accumulator. Walking
backwards from the diagonal makes gap(J, I) a running sum of block totals (see `_gates`). A
`jax.custom_vjp` stores only o and the logsumexp; the backward recomputes each block pair once (scan over
key blocks, loop over query blocks I ≥ J), accumulating dk/dv locally and dq into a carried buffer, so
peak memory is linear in T.

d log_fgate: the bias is Λ_i − Λ_j, so dΛ_i = Σ_j dS_ij − Σ_j dS_ji (row sum minus column sum of the
logit gradient) and d log f_t = Σ_{i≥t} dΛ_i (a reverse cumsum), which counts exactly the pairs j < t ≤ i.

Internal layout: the block index comes first, q [N, B, Hkv, G, C, D], k/v [N, B, Hkv, C, D],
gates [N, B, Hkv, G, C] float32, segment ids [N, B, C].
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from kernels.forgetting_attention import _gates

DEFAULT_BLOCK_SIZE = 128
_HI = lax.Precision.HIGHEST
_F32 = jnp.float32


def _qk(qb, kb, scale):
    """qb [B,Hk,G,Cq,D], kb [B,Hk,Ck,D] -> scaled logits [B,Hk,G,Cq,Ck] float32."""
    s = jnp.einsum("bhgqd,bhkd->bhgqk", qb, kb, precision=_HI, preferred_element_type=_F32)
    return s * scale


def _seg_mask(seg_q, seg_k):
    """seg_q [B,Cq], seg_k [B,Ck] -> same-segment mask [B,1,1,Cq,Ck]."""
    return (seg_q[:, :, None] == seg_k[:, None, :])[:, None, None]


def _diag_logits(qb, kb, a_blk, seg_blk, scale):
    """Masked logits of a diagonal block pair (causal inside the block, segment sums as bias)."""
    s = _qk(qb, kb, scale)
    if a_blk is not None:
        s = s + _gates.segment_sums(a_blk)
    c = s.shape[-1]
    mask = (lax.broadcasted_iota(jnp.int32, (c, c), 0) >= lax.broadcasted_iota(jnp.int32, (c, c), 1))
    if seg_blk is not None:
        mask = mask & _seg_mask(seg_blk, seg_blk)
    return jnp.where(mask, s, -jnp.inf)


def _off_logits(qb, kb, lam_q, gap, rho_k, seg_q, seg_k, scale):
    """Masked logits of a key block strictly before the query block: bias λ_i + gap + ρ_j (all ≤ 0)."""
    s = _qk(qb, kb, scale)
    if lam_q is not None:
        s = s + ((lam_q + gap[..., None])[..., :, None] + rho_k[..., None, :])
    if seg_q is not None:
        s = jnp.where(_seg_mask(seg_q, seg_k), s, -jnp.inf)
    return s


def _block_gates(a):
    """a [N,B,Hk,G,C] -> (λ, ρ, totals [N,B,Hk,G]); None when there is no gate."""
    if a is None:
        return None, None, None
    return _gates.prefix_sums(a), _gates.suffix_sums(a), jnp.sum(a, axis=-1)


def _pick(x, i):
    return None if x is None else x[i]


def _forward(q, k, v, a, seg, scale):
    """Blocked forward. Returns o [N,B,Hk,G,C,D] (q.dtype) and lse [N,B,Hk,G,C] float32."""
    lam, rho, tot = _block_gates(a)
    gap0 = jnp.zeros(q.shape[1:4], _F32)

    def query_block(_, i):
        qb, seg_q = q[i], _pick(seg, i)
        # The diagonal block goes first: it always holds j = i, so m is finite from here on and
        # exp(s − m) of a masked (−inf) logit is exactly 0 — no −inf − (−inf).
        s = _diag_logits(qb, k[i], _pick(a, i), seg_q, scale)
        m = jnp.max(s, axis=-1)
        p = jnp.exp(s - m[..., None])
        l_sum = jnp.sum(p, axis=-1)
        acc = jnp.einsum("bhgqk,bhkd->bhgqd", p.astype(v.dtype), v[i], precision=_HI,
                         preferred_element_type=_F32)

        def key_block(t, carry):
            m, l_sum, acc, gap = carry
            j = i - 1 - t
            s = _off_logits(qb, k[j], _pick(lam, i), gap, _pick(rho, j), seg_q, _pick(seg, j), scale)
            m_new = jnp.maximum(m, jnp.max(s, axis=-1))
            alpha = jnp.exp(m - m_new)
            p = jnp.exp(s - m_new[..., None])
            l_sum = alpha * l_sum + jnp.sum(p, axis=-1)
            pv = jnp.einsum("bhgqk,bhkd->bhgqd", p.astype(v.dtype), v[j], precision=_HI,
                            preferred_element_type=_F32)
            gap = gap if tot is None else gap + tot[j]
            return m_new, l_sum, alpha[..., None] * acc + pv, gap

        m, l_sum, acc, _ = lax.fori_loop(0, i, key_block, (m, l_sum, acc, gap0))
        return None, ((acc / l_sum[..., None]).astype(q.dtype), m + jnp.log(l_sum))

    _, (o, lse) = lax.scan(query_block, None, jnp.arange(q.shape[0]))
    return o, lse


def _pair_grads(s, qb, kb, vb, dob, lse_b, delta_b, scale):
    """Gradients of one block pair from its masked logits s [B,Hk,G,Cq,Ck].

    Returns dq [B,Hk,G,Cq,D], dk/dv [B,Hk,Ck,D] (summed over the query-head group), dS row sums
    [B,Hk,G,Cq] and column sums [B,Hk,G,Ck], all float32.
    """
    p = jnp.exp(s - lse_b[..., None])  # masked logits are −inf and lse is finite: p = 0 there
    dp = jnp.einsum("bhgqd,bhkd->bhgqk", dob, vb, precision=_HI, preferred_element_type=_F32)
    ds = p * (dp - delta_b[..., None])
    dv = jnp.einsum("bhgqk,bhgqd->bhkd", p.astype(dob.dtype), dob, precision=_HI,
                    preferred_element_type=_F32)
    dk = jnp.einsum("bhgqk,bhgqd->bhkd", ds.astype(qb.dtype), qb, precision=_HI,
                    preferred_element_type=_F32) * scale
    dq = jnp.einsum("bhgqk,bhkd->bhgqd", ds.astype(kb.dtype), kb, precision=_HI,
                    preferred_element_type=_F32) * scale
    return dq, dk, dv, jnp.sum(ds, axis=-1), jnp.sum(ds, axis=-2)


def _backward(q, k, v, a, seg, o, lse, do, scale):
    """Blocked backward: one recompute per block pair. Returns dq, dk, dv and dΛ-blocks (or None)."""
    n = q.shape[0]
    lam, rho, tot = _block_gates(a)
    delta = jnp.sum(do.astype(_F32) * o.astype(_F32), axis=-1)  # δ_i = dO_i·O_i = Σ_j P_ij dP_ij

    def key_block(carry, j):
        dq_all, rows_all = carry
        kb, vb, seg_k = k[j], v[j], _pick(seg, j)
        s = _diag_logits(q[j], kb, _pick(a, j), seg_k, scale)
        dq, dk, dv, rows, cols = _pair_grads(s, q[j], kb, vb, do[j], lse[j], delta[j], scale)
        dq_all = dq_all.at[j].add(dq)
        rows_all = rows_all.at[j].add(rows)

        def query_block(i, inner):
            dq_all, rows_all, dk, dv, cols, gap = inner
            s = _off_logits(q[i], kb, _pick(lam, i), gap, _pick(rho, j), _pick(seg, i), seg_k, scale)
            dq_i, dk_i, dv_i, rows_i, cols_i = _pair_grads(s, q[i], kb, vb, do[i], lse[i], delta[i], scale)
            dq_all = lax.dynamic_update_index_in_dim(dq_all, dq_all[i] + dq_i, i, 0)
            rows_all = lax.dynamic_update_index_in_dim(rows_all, rows_all[i] + rows_i, i, 0)
            gap = gap if tot is None else gap + tot[i]  # walking forward: gap(J, I+1) = gap(J, I) + tot_I
            return dq_all, rows_all, dk + dk_i, dv + dv_i, cols + cols_i, gap

        gap0 = jnp.zeros(q.shape[1:4], _F32)
        dq_all, rows_all, dk, dv, cols, _ = lax.fori_loop(
            j + 1, n, query_block, (dq_all, rows_all, dk, dv, cols, gap0))
        return (dq_all, rows_all), (dk, dv, cols)

    init = (jnp.zeros(q.shape, _F32), jnp.zeros(lse.shape, _F32))
    (dq, rows), (dk, dv, cols) = lax.scan(key_block, init, jnp.arange(n))
    d_lambda = None if a is None else rows - cols
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), d_lambda


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _blocked(q, k, v, a, seg, scale):
    return _forward(q, k, v, a, seg, scale)[0]


def _blocked_fwd(q, k, v, a, seg, scale):
    o, lse = _forward(q, k, v, a, seg, scale)
    return o, (q, k, v, a, seg, o, lse)


def _blocked_bwd(scale, res, do):
    q, k, v, a, seg, o, lse = res
    dq, dk, dv, d_lambda = _backward(q, k, v, a, seg, o, lse, do, scale)
    da = None
    if d_lambda is not None:
        # d log f_t = Σ_{i ≥ t} dΛ_i over t's own segment of the (padded) sequence, in time order.
        n, c = d_lambda.shape[0], d_lambda.shape[-1]
        flat = jnp.moveaxis(d_lambda, 0, -2).reshape(*d_lambda.shape[1:-1], n * c)
        seg_flat = None if seg is None else jnp.moveaxis(seg, 0, 1).reshape(seg.shape[1], 1, 1, n * c)
        summed = _gates.segmented_reverse_cumsum(flat, seg_flat)
        da = jnp.moveaxis(summed.reshape(*d_lambda.shape[1:-1], n, c), -2, 0)
    return dq, dk, dv, da, None


_blocked.defvjp(_blocked_fwd, _blocked_bwd)


def _to_blocks(x, c, hkv):
    """[B, Tp, H, *F] -> [N, B, Hkv, G, C, *F] (Tp = N·C)."""
    b, tp, h = x.shape[:3]
    x = x.reshape(b, tp // c, c, hkv, h // hkv, *x.shape[3:])
    return jnp.moveaxis(x, (1, 3, 4), (0, 2, 3))


def _from_blocks(x):
    """[N, B, Hkv, G, C, D] -> [B, N·C, Hkv·G, D]."""
    n, b, hkv, g, c, d = x.shape
    return jnp.moveaxis(x, (0, 2, 3), (1, 3, 4)).reshape(b, n * c, hkv * g, d)


def _pad_time(x, tp):
    pad = [(0, 0)] * x.ndim
    pad[1] = (0, tp - x.shape[1])
    return jnp.pad(x, pad)


def forgetting_attention(q, k, v, log_fgate, *, scale=None, segment_ids=None,
                         block_size=DEFAULT_BLOCK_SIZE):
    """Blocked forgetting attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k, v [B, T, Hkv, D]; log_fgate [B, T, H] or None (plain causal attention: the gate
    terms are skipped); segment_ids [B, T] int or None. T need not be a multiple of `block_size`: the
    tail is zero-padded (padded keys are only visible to padded queries, which are dropped).
    Returns o [B, T, H, D] in q.dtype.
    """
    _, t, h, d = q.shape
    hkv = k.shape[2]
    scale = d**-0.5 if scale is None else float(scale)
    c = max(1, min(block_size, t))
    tp = -(-t // c) * c
    qb = _to_blocks(_pad_time(q, tp), c, hkv)
    kb = _to_blocks(_pad_time(k, tp), c, hkv)[:, :, :, 0]
    vb = _to_blocks(_pad_time(v, tp), c, hkv)[:, :, :, 0]
    a = None
    if log_fgate is not None:
        a = _to_blocks(_pad_time(log_fgate.astype(_F32), tp)[..., None], c, hkv)[..., 0]
    seg = None
    if segment_ids is not None:
        seg = _pad_time(segment_ids.astype(jnp.int32), tp).reshape(-1, tp // c, c).swapaxes(0, 1)
    o = _blocked(qb, kb, vb, a, seg, scale)
    return _from_blocks(o)[:, :t]
