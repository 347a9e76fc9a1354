"""Chunkwise-parallel gated delta rule (WY / UT form): the default, portable XLA path.

Inside a chunk of C steps (rows t, s = 0..C-1, S0 the state entering the chunk), with
D(t, s) = prod_{l=s+1..t} exp(g_l) (scalar, or diagonal over K for KDA) and X_t = beta_t (v_t - S'_t^T k_t):

    (I + A) X = diag(beta) (V - (K o E0) S0),   A_ts = beta_t k_t^T D(t,s) k_s  (s < t)
    O   = (Q o E0) S0 + Aqk X,                  Aqk_ts = q_t^T D(t,s) k_s      (s <= t)
    S_C = EC o S0 + (K o Es)^T X

where E0_t = D(t, -1) (decay from the chunk start), Es_s = D(C-1, s) and EC = D(C-1, -1). Every
intra-chunk decay is a *local* sum of log-gates (running sum from the chunk start, suffix sum to the chunk
end, pairwise segment sums), masked to -inf *before* exp: never the difference of a cumsum, never
exp(G_t) * exp(-G_s) (docs/numerics.md, rules 1-3).

Scalar gates (DeltaNet, GDN) form the [C, C] decays by a masked cumsum and scale the K-contracted pair
products with them. Per-channel gates (KDA) would need a [C, C, K] decay tensor; instead a binary tree over
the chunk pairs each upper half-block with its lower half through their boundary, with two factors <= 1
(`_tree_pairs`), so every pair product is a matmul and no tensor is larger than [C, C] or [C, K].

Packed segments: a state reset at step t is D(t, s) = 0 for every s < t, so the same -inf masking in log
space removes both the within-chunk interactions across a boundary and the carried S0 contribution.
T is padded to a multiple of C with identity steps (beta = 0, g = 0).

Layout [N, B, H, C, ...] (chunk axis first): only the state passing S_n = EC_n o S_{n-1} - M_n S_{n-1} + H_n
is sequential (a `lax.scan` over chunks, no transposes); the UT solve and all [C, C] products run batched
over every chunk. Gradients: autodiff, except two hand-written backwards that autodiff makes slow on
XLA:CPU, both in `kernels._common`: the UT solve (`unit_lower_solve`: two matmuls instead of the doubling
levels) and per-row scalings (`scale_rows`: the row sums of the cotangent as a matmul with ones, not a
minor-axis reduction).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.chunks import ChunkInputs, chunk_inputs, prefix_sum, scale_rows
from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels._common.triangular import unit_lower_solve

_NEG_INF = float("-inf")

# gamma [..., C, C, Kg], e0 [..., C, Kg], es [..., C, Kg], ec [..., Kg]
Decays = tuple[jax.Array, jax.Array, jax.Array, jax.Array]


def _ein(spec: str, *xs: jax.Array) -> jax.Array:
    return jnp.einsum(spec, *xs, precision=HIGHEST)


class Chunked(NamedTuple):
    """Padded, chunked float32 operands, layout [B, H, N, C, ...]."""

    q: jax.Array  # [B,H,N,C,K], already times scale
    k: jax.Array  # [B,H,N,C,K]
    v: jax.Array  # [B,H,N,C,V]
    beta: jax.Array  # [B,H,N,C]
    gamma: jax.Array  # [B,H,N,C,C,Kg]  D(t,s) for s <= t in the same segment, else 0
    e0: jax.Array  # [B,H,N,C,Kg]     D(t, chunk start)
    es: jax.Array  # [B,H,N,C,Kg]     D(chunk end, s)
    ec: jax.Array  # [B,H,N,Kg]       D(chunk end, chunk start)


def _segment_masks(run: jax.Array, run_in: jax.Array) -> Decays:
    """The decays of ungated steps (DeltaNet, g = 0): only the segment masks, as 0/1 floats.

    Same contract as `_decays` with Kg = 1; exp(0) = 1 exactly, so the result is identical without the
    segment-sum matmul and the exponentials.
    """
    c = run.shape[-1]
    f32 = lambda m: m.astype(jnp.float32)[..., None]
    same = (run[..., :, None] == run[..., None, :]) & jnp.tril(jnp.ones((c, c), bool))
    e0 = f32(run == run_in[..., None])
    return f32(same), e0, f32(run == run[..., -1:]), e0[..., -1, :]


def _decays(gc: jax.Array, run: jax.Array, run_in: jax.Array) -> Decays:
    """Masked decays of one set of chunks.

    gc: [..., C, Kg] log-gates; run: [..., C] segment-run index per step; run_in: [...] run index of the
    step before the chunk. Returns gamma [..., C, C, Kg], e0 [..., C, Kg], es [..., C, Kg], ec [..., Kg].
    """
    c = gc.shape[-2]
    t_idx = jnp.arange(c)[:, None]
    s_idx = jnp.arange(c)[None, :]
    # Pairwise segment sums sum_{l=s+1..t} g_l by a masked cumsum over t (stable segsum).
    strictly_after = (t_idx > s_idx)[..., None]  # [C(t), C(s), 1]
    seg = prefix_sum(jnp.where(strictly_after, gc[..., :, None, :], 0.0), axis=-3)
    same = (run[..., :, None] == run[..., None, :]) & (t_idx >= s_idx)
    gamma = jnp.exp(jnp.where(same[..., None], seg, _NEG_INF))
    return (gamma,) + _edge_decays(gc, run, run_in)


def _edge_decays(gc: jax.Array, run: jax.Array, run_in: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """e0 [..., C, Kg] (decay from the chunk start), es [..., C, Kg] (to the chunk end), ec [..., Kg]."""
    # Running sum from the chunk start, and suffix sum to the chunk end (excluding s itself).
    carry = (run == run_in[..., None])[..., None]
    e0 = jnp.exp(jnp.where(carry, prefix_sum(gc, axis=-2), _NEG_INF))
    suffix = jnp.flip(prefix_sum(jnp.flip(gc, -2), axis=-2), -2)
    suffix = jnp.concatenate([suffix[..., 1:, :], jnp.zeros_like(suffix[..., :1, :])], axis=-2)
    to_end = (run == run[..., -1:])[..., None]
    es = jnp.exp(jnp.where(to_end, suffix, _NEG_INF))
    return e0, es, e0[..., -1, :]


def prepare(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, g: jax.Array | None, scale: float | None,
            segment_ids: jax.Array | None, chunk_size: int) -> tuple[Chunked, int]:
    """Chunked operands with the dense masked decays gamma [.., C, C, Kg] (the Pallas kernels' input).

    Returns the Chunked operands and the original length T.
    """
    x = chunk_inputs(q, k, v, beta, g, scale, segment_ids, chunk_size)
    gamma, e0, es, ec = _decays(x.gc, x.run, x.run_in)
    ops = Chunked(q=x.q, k=x.k, v=x.v, beta=x.beta, gamma=gamma, e0=e0, es=es, ec=ec)
    return ops, q.shape[1]


def _pair(x: jax.Array, y: jax.Array, gamma: jax.Array) -> jax.Array:
    """sum_d x_t[d] y_s[d] D(t,s)[d] -> [..., C, C] from the scalar decays gamma [..., C, C, 1]."""
    return _ein("...tk,...sk->...ts", x, y) * gamma[..., 0]


def _halves(z: jax.Array, b: int) -> jax.Array:
    """[..., C, K] -> [..., C/(2b), 2, b, K]: the two halves of every block of 2b steps."""
    return z.reshape(z.shape[:-2] + (z.shape[-2] // (2 * b), 2, b, z.shape[-1]))


def _block_sums(g: jax.Array, tri: jax.Array) -> jax.Array:
    """sum_s tri[t, s] g[..., s, :] over the block axis -2 of g [..., b, K], as one matmul (so is its
    backward: XLA:CPU's minor-axis reductions are slow)."""
    return jnp.swapaxes(jnp.matmul(jnp.swapaxes(g, -1, -2), tri.T, precision=HIGHEST), -1, -2)


def _tree_pairs(xs: tuple[jax.Array, ...], k: jax.Array, gc: jax.Array, run: jax.Array) -> tuple[jax.Array, ...]:
    """Per-channel decayed pair products by a binary tree over the chunk (KDA), never a [C, C, K] tensor.

    xs: row operands, each [..., C, K]; k [..., C, K] (column side); gc [..., C, K] log-gates; run [..., C]
    segment-run index. Returns one [..., C, C] per row operand, entry (t, s) = sum_d x_t[d] k_s[d] D(t,s)[d]
    for s < t and zero for s >= t.

    At the level of blocks of 2b steps, row t of the upper half and column s of the lower half meet through
    the half boundary m: D(t,s) = exp(sum_{m<l<=t} g) * exp(sum_{s<l<=m} g), two factors <= 1 whose
    exponents are sums over the half-block only (running sum of the upper half, suffix sum of the lower
    half: local, no differenced cumsum), so their product is one [b, K] x [K, b] matmul.
    """
    c = gc.shape[-2]
    mats = [jnp.zeros(x.shape[:-2] + (c, 1, 1), jnp.float32) for x in xs]  # diagonal b x b blocks
    b = 1
    while b < c:
        g2, k2 = _halves(gc, b), _halves(k, b)
        run2 = run.reshape(run.shape[:-1] + (c // (2 * b), 2, b))
        run_m = run2[..., 0, -1:]  # run of the last step of the lower half
        ones = jnp.ones((b, b), jnp.float32)
        pre_up = _block_sums(g2[..., 1, :, :], jnp.tril(ones))
        suf_lo = _block_sums(g2[..., 0, :, :], jnp.triu(ones, 1))
        left = jnp.exp(jnp.where((run2[..., 1, :] == run_m)[..., None], pre_up, _NEG_INF))
        right = k2[..., 0, :, :] * jnp.exp(jnp.where((run2[..., 0, :] == run_m)[..., None], suf_lo, _NEG_INF))
        for i, x in enumerate(xs):
            cross = _ein("...tk,...sk->...ts", _halves(x, b)[..., 1, :, :] * left, right)
            m2 = mats[i].reshape(mats[i].shape[:-3] + (c // (2 * b), 2, b, b))
            top = jnp.concatenate([m2[..., 0, :, :], jnp.zeros_like(cross)], axis=-1)
            mats[i] = jnp.concatenate([top, jnp.concatenate([cross, m2[..., 1, :, :]], axis=-1)], axis=-2)
        b *= 2
    return tuple(m[..., 0, :, :] for m in mats)


def intra_chunk(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, kk: jax.Array, qk: jax.Array,
                e0: jax.Array, es: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Per-chunk, all chunks in parallel.

    q, k [..,C,K]; v [..,C,V]; beta [..,C]; kk, qk [..,C,C] the decayed pair products (kk strictly lower,
    qk lower incl. the diagonal); e0, es [..,C,Kg]. Returns o_intra [..,C,V], q_eff [..,C,K],
    m [..,K,K], h [..,K,V] such that, with S the state entering a chunk, O = o_intra + q_eff S and the state
    leaving it is ec o S - m S + h (ec scales the rows of S; never materialized as a diagonal matrix).
    """
    dk = k.shape[-1]
    rhs = scale_rows(jnp.concatenate([scale_rows(k, e0), v], axis=-1), beta[..., None])
    # y = [w | u] with X = u - w S0; w and u share every product, so each is one matmul on y.
    y = unit_lower_solve(scale_rows(kk, beta[..., :, None]), rhs)
    qy = _ein("...ts,...sd->...td", qk, y)
    ky = _ein("...sk,...sd->...kd", scale_rows(k, es), y)
    return qy[..., dk:], scale_rows(q, e0) - qy[..., :dk], ky[..., :dk], ky[..., dk:]


def _pass_states(ec: jax.Array, m: jax.Array, h: jax.Array, s0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """S_n = ec_n o S_{n-1} - m_n S_{n-1} + h_n over chunks. ec [N,B,H,Kg], m [N,B,H,K,K], h [N,B,H,K,V],
    s0 [B,H,K,V].

    Returns the states entering every chunk [N,B,H,K,V] and the final state [B,H,K,V].
    """

    def step(s: jax.Array, xs: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        ec_n, m_n, h_n = xs
        return scale_rows(s, ec_n[..., None]) - _ein("bhkj,bhjv->bhkv", m_n, s) + h_n, s

    s_final, s_in = jax.lax.scan(step, s0, (ec, m, h))
    return s_in, s_final


def decayed_pairs(x: ChunkInputs, gated: bool = True) -> tuple[jax.Array, ...]:
    """kk [..,C,C] (strictly lower), qk [..,C,C] (lower incl. diagonal), e0, es [..,C,Kg], ec [..,Kg].

    gated=False: every g is 0 (DeltaNet), so the decays are only the segment masks."""
    c = x.k.shape[-2]
    if x.gc.shape[-1] == 1:
        gamma, e0, es, ec = _decays(x.gc, x.run, x.run_in) if gated else _segment_masks(x.run, x.run_in)
        kk = jnp.where(jnp.tril(jnp.ones((c, c), bool), -1), _pair(x.k, x.k, gamma), 0.0)
        return kk, _pair(x.q, x.k, gamma), e0, es, ec
    # One flat batch axis: the tree's block reshapes then stay at rank <= 8.
    lead = x.k.shape[:-2]
    flat = lambda z: jnp.broadcast_to(z, lead + z.shape[3:]).reshape((-1,) + z.shape[3:])
    kk, qk = (z.reshape(lead + z.shape[1:]) for z in _tree_pairs((flat(x.k), flat(x.q)), flat(x.k), flat(x.gc),
                                                                   flat(x.run)))
    e0, es, ec = _edge_decays(x.gc, x.run, x.run_in)
    # D(t, t) = 1: the diagonal of qk is the plain q_t . k_t (a matmul with ones: a fast reduction on CPU).
    qk_diag = jnp.matmul(x.q * x.k, jnp.ones((x.k.shape[-1], 1), jnp.float32), precision=HIGHEST)
    qk = qk + qk_diag * jnp.eye(c, dtype=jnp.float32)
    return kk, qk, e0, es, ec


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def gated_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, *, beta: jax.Array, g: jax.Array | None = None,
                     scale: float | None = None, initial_state: jax.Array | None = None,
                     segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Chunked gated delta rule.

    q, k: [B,T,H,K]; v: [B,T,H,V]; beta: [B,T,H]; g: None | [B,T,H] | [B,T,H,K]; initial_state:
    [B,H,K,V] | None; segment_ids: [B,T] | None. Returns (o [B,T,H,V] in q.dtype, S [B,H,K,V] float32).
    """
    bsz, seqlen, heads, dk = q.shape
    x = chunk_inputs(q, k, v, beta, g, scale, segment_ids, chunk_size, chunk_major=True)
    s0 = (jnp.zeros((bsz, heads, dk, v.shape[-1]), jnp.float32) if initial_state is None
          else initial_state.astype(jnp.float32))
    kk, qk, e0, es, ec = decayed_pairs(x, gated=g is not None)
    o_intra, q_eff, m, h = intra_chunk(x.q, x.k, x.v, x.beta, kk, qk, e0, es)
    s_in, s_final = _pass_states(ec, m, h, s0)
    o = o_intra + _ein("...ck,...kv->...cv", q_eff, s_in)  # [N,B,H,C,V]
    o = jnp.transpose(o, (1, 0, 3, 2, 4)).reshape(bsz, -1, heads, o.shape[-1])[:, :seqlen]
    return o.astype(q.dtype), s_final
