"""Blocked online-softmax (flash-style) forgetting attention in plain XLA: the default path.

Never materializes [T, T]. The forward walks, for each query block I (a `lax.scan`), the diagonal block
first and then the key blocks I−1, …, 0 (a `lax.fori_loop` with a data-dependent trip count, so no
masked-out upper-triangle work), keeping the running max m, denominator l and accumulator. Walking
backwards from the diagonal makes gap(J, I) a running sum of block totals (see `kernels._common.gate_sums`). A
`jax.custom_vjp` stores only o and the logsumexp; the backward recomputes each block pair once (scan over
key blocks, loop over query blocks I ≥ J), accumulating dk/dv locally and dq into a carried buffer, so
peak memory is linear in T.

d log_fgate: the bias is Λ_i − Λ_j, so dΛ_i = Σ_j dS_ij − Σ_j dS_ji (row sum minus column sum of the
logit gradient) and d log f_t = Σ_{i≥t} dΛ_i (a reverse cumsum), which counts exactly the pairs j < t ≤ i.

Internal layout: the block index comes first, q [N, B, Hkv, G, C, D], k/v [N, B, Hkv, C, D],
gates [N, B, Hkv, G, C] float32, segment ids [N, B, C].
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common import blocks, gate_sums
from icml26zoo.kernels._common.attention_tiles import softmax_start, softmax_step
from icml26zoo.kernels._common.precision import einsum_f32

DEFAULT_BLOCK_SIZE = 128
_F32 = jnp.float32


def _qk(qb: jax.Array, kb: jax.Array, scale: float) -> jax.Array:
    """qb [B,Hk,G,Cq,D], kb [B,Hk,Ck,D] -> scaled logits [B,Hk,G,Cq,Ck] float32."""
    return einsum_f32("bhgqd,bhkd->bhgqk", qb, kb) * scale


def _seg_mask(seg_q: jax.Array, seg_k: jax.Array) -> jax.Array:
    """seg_q [B,Cq], seg_k [B,Ck] -> same-segment mask [B,1,1,Cq,Ck]."""
    return (seg_q[:, :, None] == seg_k[:, None, :])[:, None, None]


def _diag_logits(qb: jax.Array, kb: jax.Array, a_blk: jax.Array | None, seg_blk: jax.Array | None,
                 scale: float) -> jax.Array:
    """Masked logits of a diagonal block pair (causal inside the block, segment sums as bias)."""
    s = _qk(qb, kb, scale)
    if a_blk is not None:
        s = s + gate_sums.segment_sums(a_blk)
    c = s.shape[-1]
    mask = (lax.broadcasted_iota(jnp.int32, (c, c), 0) >= lax.broadcasted_iota(jnp.int32, (c, c), 1))
    if seg_blk is not None:
        mask = mask & _seg_mask(seg_blk, seg_blk)
    return jnp.where(mask, s, -jnp.inf)


def _off_logits(qb: jax.Array, kb: jax.Array, lam_q: jax.Array | None, gap: jax.Array, rho_k: jax.Array | None,
                seg_q: jax.Array | None, seg_k: jax.Array | None, scale: float) -> jax.Array:
    """Masked logits of a key block strictly before the query block: bias λ_i + gap + ρ_j (all ≤ 0)."""
    s = _qk(qb, kb, scale)
    if lam_q is not None:
        s = s + ((lam_q + gap[..., None])[..., :, None] + rho_k[..., None, :])
    if seg_q is not None:
        s = jnp.where(_seg_mask(seg_q, seg_k), s, -jnp.inf)
    return s


def _block_gates(a: jax.Array | None) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None]:
    """a [N,B,Hk,G,C] -> (λ, ρ, totals [N,B,Hk,G]); None when there is no gate."""
    if a is None:
        return None, None, None
    return gate_sums.prefix_sums(a), gate_sums.suffix_sums(a), jnp.sum(a, axis=-1)


def _forward(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None,
             scale: float) -> tuple[jax.Array, jax.Array]:
    """Blocked forward. Returns o [N,B,Hk,G,C,D] (q.dtype) and lse [N,B,Hk,G,C] float32."""
    lam, rho, tot = _block_gates(a)
    gap0 = jnp.zeros(q.shape[1:4], _F32)

    def query_block(_: None, i: jax.Array) -> tuple[None, tuple[jax.Array, jax.Array]]:
        qb, seg_q = q[i], blocks.pick(seg, i)
        # The diagonal block goes first (see `softmax_start`).
        m, p, l_sum = softmax_start(_diag_logits(qb, k[i], blocks.pick(a, i), seg_q, scale))
        acc = einsum_f32("bhgqk,bhkd->bhgqd", p.astype(v.dtype), v[i])

        def key_block(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
            m, l_sum, acc, gap = carry
            j = i - 1 - t
            s = _off_logits(qb, k[j], blocks.pick(lam, i), gap, blocks.pick(rho, j), seg_q, blocks.pick(seg, j), scale)
            m_new, alpha, p, l_sum = softmax_step(m, l_sum, s)
            pv = einsum_f32("bhgqk,bhkd->bhgqd", p.astype(v.dtype), v[j])
            gap = gap if tot is None else gap + tot[j]
            return m_new, l_sum, alpha[..., None] * acc + pv, gap

        m, l_sum, acc, _ = lax.fori_loop(0, i, key_block, (m, l_sum, acc, gap0))
        return None, ((acc / l_sum[..., None]).astype(q.dtype), m + jnp.log(l_sum))

    _, (o, lse) = lax.scan(query_block, None, jnp.arange(q.shape[0]))
    return o, lse


def _pair_grads(s: jax.Array, qb: jax.Array, kb: jax.Array, vb: jax.Array, dob: jax.Array, lse_b: jax.Array,
                delta_b: jax.Array, scale: float) -> tuple[jax.Array, ...]:
    """Gradients of one block pair from its masked logits s [B,Hk,G,Cq,Ck].

    Returns dq [B,Hk,G,Cq,D], dk/dv [B,Hk,Ck,D] (summed over the query-head group), dS row sums
    [B,Hk,G,Cq] and column sums [B,Hk,G,Ck], all float32.
    """
    p = jnp.exp(s - lse_b[..., None])  # masked logits are −inf and lse is finite: p = 0 there
    dp = einsum_f32("bhgqd,bhkd->bhgqk", dob, vb)
    ds = p * (dp - delta_b[..., None])
    dv = einsum_f32("bhgqk,bhgqd->bhkd", p.astype(dob.dtype), dob)
    dk = einsum_f32("bhgqk,bhgqd->bhkd", ds.astype(qb.dtype), qb) * scale
    dq = einsum_f32("bhgqk,bhkd->bhgqd", ds.astype(kb.dtype), kb) * scale
    return dq, dk, dv, jnp.sum(ds, axis=-1), jnp.sum(ds, axis=-2)


def _backward(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None, o: jax.Array,
              lse: jax.Array, do: jax.Array, scale: float) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]:
    """Blocked backward: one recompute per block pair. Returns dq, dk, dv and dΛ-blocks (or None)."""
    n = q.shape[0]
    lam, rho, tot = _block_gates(a)
    delta = jnp.sum(do.astype(_F32) * o.astype(_F32), axis=-1)  # δ_i = dO_i·O_i = Σ_j P_ij dP_ij

    def key_block(carry: tuple[jax.Array, jax.Array], j: jax.Array) -> tuple[tuple, tuple]:
        dq_all, rows_all = carry
        kb, vb, seg_k = k[j], v[j], blocks.pick(seg, j)
        s = _diag_logits(q[j], kb, blocks.pick(a, j), seg_k, scale)
        dq, dk, dv, rows, cols = _pair_grads(s, q[j], kb, vb, do[j], lse[j], delta[j], scale)
        dq_all = dq_all.at[j].add(dq)
        rows_all = rows_all.at[j].add(rows)

        def query_block(i: jax.Array, inner: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
            dq_all, rows_all, dk, dv, cols, gap = inner
            s = _off_logits(q[i], kb, blocks.pick(lam, i), gap, blocks.pick(rho, j), blocks.pick(seg, i), seg_k, scale)
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
def _blocked(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None,
             scale: float) -> jax.Array:
    return _forward(q, k, v, a, seg, scale)[0]


def _blocked_fwd(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array | None, seg: jax.Array | None,
                 scale: float) -> tuple[jax.Array, tuple]:
    o, lse = _forward(q, k, v, a, seg, scale)
    return o, (q, k, v, a, seg, o, lse)


def _blocked_bwd(scale: float, res: tuple, do: jax.Array) -> tuple:
    q, k, v, a, seg, o, lse = res
    dq, dk, dv, d_lambda = _backward(q, k, v, a, seg, o, lse, do, scale)
    # d log f_t = Σ_{i ≥ t} dΛ_i over t's own segment of the (padded) sequence, in time order.
    da = None if d_lambda is None else blocks.blocked_reverse_cumsum(d_lambda, seg)
    return dq, dk, dv, da, None


_blocked.defvjp(_blocked_fwd, _blocked_bwd)


def forgetting_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None, *,
                         scale: float | None = None, segment_ids: jax.Array | None = None,
                         block_size: int = DEFAULT_BLOCK_SIZE) -> jax.Array:
    """Blocked forgetting attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k, v [B, T, Hkv, D]; log_fgate [B, T, H] or None (plain causal attention: the gate
    terms are skipped); segment_ids [B, T] int or None. T need not be a multiple of `block_size`: the
    tail is zero-padded (padded keys are only visible to padded queries, which are dropped).
    Returns o [B, T, H, D] in q.dtype.
    """
    x = blocks.attention_blocks(q, k, v, segment_ids, scale, block_size)
    a = blocks.gate_blocks(log_fgate, x.block, x.padded, x.num_kv_heads)
    o = _blocked(x.q, x.k, x.v, a, x.seg, x.scale)
    return blocks.from_blocks(o)[:, :q.shape[1]]
