"""Chunkwise-parallel momentum delta rule (specs/mixers-02 §2.4): the default, portable XLA path.

Inside a chunk of C steps (rows t = 0..C-1; S0, M0 the states entering it; k~ = eta * k; A, U the running
sums of g and log_mu from the chunk start), unrolling the recurrence gives

    S_t = exp(A_t) S0 - b_t M0 + sum_{j<=t} Gam_tj k~_j w_j^T,   w_j = v_j - S_{j-1}^T p_j = -e_j
    M_t = exp(U_t) M0 - sum_{j<=t} exp(U_t - U_j) k~_j w_j^T

with Gam = L_A diag(beta) L_U, (L_A)_ti = exp(A_t - A_i) (i <= t), (L_U)_ij = exp(U_i - U_j) (j <= i) and
b = L_A (beta o exp(U)). The residuals solve the unit lower-triangular (UT) system

    (I + L) W = V - (Abar o P) S0 + (bbar o P) M0,   L_tj = Gbar_tj (p_t . k~_j)  (j < t)

where Gbar, Abar, bbar are Gam, exp(A), b one step earlier (the state *before* step t).

Numerics (spec §2.4 note, binding): Gbar = L_A,prev diag(beta) L_U is the PRODUCT of two triangular
factors whose entries are each a masked exp of a local, non-positive log-gate sum, so all lie in [0, 1];
Gam = diag(beta) L_U + diag(alpha) Gbar adds non-negative terms. Neither is ever formed as a difference of
cumulative sums (C_t - C_{j-1}), which loses all precision in float32 once log_mu spans (-2, 0). Every
exponent is a pairwise segment sum or a running sum from the chunk start, masked to -inf before exp.
"One step earlier" is a row shift of those sums in log space, never a division by exp(g_t).

Packed segments: a reset at step t zeroes every factor linking t to an earlier step and the carried
S0/M0 terms (all by the -inf masks), exactly as a zeroed (S, M). T is padded to a multiple of C with
identity steps (beta = eta = 0, g = log_mu = 0). Everything but the state passing runs for all chunks at
once; the sequential `lax.scan` only forms W = u - ys S0 + zm M0 and the leaving states (spec §2.4).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

# Shared chunking helpers of the gated delta rule (same layout, same block-doubling UT inverse).
from kernels.delta_rule.reference import segment_starts
from kernels.delta_rule.xla import _cumsum, _pad_time, _to_chunks, unit_lower_inverse
from kernels.momentum_delta_rule.reference import initial_states

_HI = jax.lax.Precision.HIGHEST
_NEG_INF = float("-inf")


def _ein(spec, *xs):
    return jnp.einsum(spec, *xs, precision=_HI)


class Factors(NamedTuple):
    """Masked decay factors of a set of chunks, layout [B, H, N, C(, C)], entries all in [0, 1]."""

    la_prev: jax.Array  # [..,C,C] exp(A_{t-1} - A_i), i < t, same segment as t
    lu: jax.Array  # [..,C,C] exp(U_i - U_j), j <= i, same segment
    alpha: jax.Array  # [..,C] exp(g_t)
    ea: jax.Array  # [..,C] exp(A_t) if t is in the carried-in segment, else 0
    ea_prev: jax.Array  # [..,C] exp(A_{t-1}) (A_{-1} = 0), same mask as ea
    eu: jax.Array  # [..,C] exp(U_t), same mask as ea


def _pairwise(x: jax.Array) -> jax.Array:
    """[.., C] log-gates -> [.., C(t), C(s)] local sums sum_{l=s+1..t} x_l for t > s, else 0."""
    c = x.shape[-1]
    after = jnp.arange(c)[:, None] > jnp.arange(c)[None, :]
    return _cumsum(jnp.where(after, x[..., :, None], 0.0), axis=-2)


def _shift_down(x: jax.Array, axis: int) -> jax.Array:
    """Row t takes row t-1 (row 0 gets 0): the same log-sum one step earlier."""
    x = jnp.moveaxis(x, axis, -1)
    x = jnp.concatenate([jnp.zeros_like(x[..., :1]), x[..., :-1]], axis=-1)
    return jnp.moveaxis(x, -1, axis)


def factors(gc: jax.Array, uc: jax.Array, run: jax.Array, run_in: jax.Array) -> Factors:
    """gc, uc: [.., C] chunked g and log_mu; run: [.., C] segment-run index; run_in: [..] run before."""
    c = gc.shape[-1]
    t_idx, s_idx = jnp.arange(c)[:, None], jnp.arange(c)[None, :]
    same = run[..., :, None] == run[..., None, :]
    lower, strict = same & (t_idx >= s_idx), same & (t_idx > s_idx)
    masked_exp = lambda mask, x: jnp.exp(jnp.where(mask, x, _NEG_INF))  # mask BEFORE exp
    seg_a = _pairwise(gc)
    carry = run == run_in[..., None]
    cum_a = _cumsum(gc, axis=-1)
    return Factors(alpha=jnp.exp(gc), la_prev=masked_exp(strict, _shift_down(seg_a, -2)),
                   lu=masked_exp(lower, _pairwise(uc)), ea=masked_exp(carry, cum_a),
                   ea_prev=masked_exp(carry, _shift_down(cum_a, -1)), eu=masked_exp(carry, _cumsum(uc, -1)))


class Chunked(NamedTuple):
    """Padded, chunked float32 operands, layout [B, H, N, C, ...]."""

    q: jax.Array  # [..,C,K] times scale
    k: jax.Array  # [..,C,K] times eta
    p: jax.Array  # [..,C,K]
    v: jax.Array  # [..,C,V]
    beta: jax.Array  # [..,C]
    fac: Factors


def prepare(q, k, v, p, g, log_mu, beta, eta, scale, segment_ids, chunk_size) -> Chunked:
    """Casts to float32, pads T to a multiple of chunk_size with identity steps, chunks, builds factors."""
    bsz, seqlen, _, dk = q.shape
    c = chunk_size
    n = -(-seqlen // c)
    pad = n * c - seqlen
    scale = dk**-0.5 if scale is None else scale
    f32 = lambda x: x.astype(jnp.float32)
    run = jnp.cumsum(segment_starts(segment_ids, bsz, seqlen).astype(jnp.int32), axis=1)
    run = _pad_time(run, pad, mode="edge").reshape(bsz, 1, n, c)  # padding stays in the last segment
    run_in = jnp.concatenate([jnp.zeros_like(run[:, :, :1, 0]), run[:, :, :-1, -1]], axis=2)
    chunk = lambda x: _to_chunks(_pad_time(x, pad), n, c)
    gate = lambda x: chunk(f32(x)[..., None])[..., 0]
    fac = factors(gate(g), gate(log_mu), run, run_in)
    return Chunked(q=chunk(f32(q) * jnp.float32(scale)), k=chunk(f32(k) * f32(eta)[..., None]),
                   p=chunk(f32(p)), v=chunk(f32(v)), beta=gate(beta), fac=fac)


def _through_beta(left: jax.Array, beta: jax.Array, right: jax.Array) -> jax.Array:
    """left diag(beta) right for [.., C, C] factors: the product form of Gam (no cancellation)."""
    return _ein("...ti,...i,...ij->...tj", left, beta, right)


class Intra(NamedTuple):
    """Per-chunk quantities, computed for all chunks in parallel, layout [B, H, N, C, ...].

    With (S0, M0) entering a chunk: W = u - ys S0 + zm M0, O = x W + qa S0 - qb M0,
    S_C = ea_end S0 - b_end M0 + k_s^T W and M_C = eu_end M0 - k_m^T W.
    """

    x: jax.Array  # [..,C,C] Gam o (Q K~^T)
    u: jax.Array  # [..,C,V]
    ys: jax.Array  # [..,C,K]
    zm: jax.Array  # [..,C,K]
    qa: jax.Array  # [..,C,K] exp(A) o Q
    qb: jax.Array  # [..,C,K] b o Q
    k_s: jax.Array  # [..,C,K] Gam_{C,j} k~_j
    k_m: jax.Array  # [..,C,K] exp(U_C - U_j) k~_j
    ends: jax.Array  # [..,3] exp(A_C), b_C, exp(U_C)


def intra_chunk(ops: Chunked) -> Intra:
    """The UT solve and every [C, C] product of spec §2.4, for all chunks at once."""
    f, dk = ops.fac, ops.k.shape[-1]
    gam_prev = _through_beta(f.la_prev, ops.beta, f.lu)  # strictly lower: exact zeros elsewhere
    b_prev = _ein("...ti,...i->...t", f.la_prev, ops.beta * f.eu)
    # L_A = I + diag(alpha) L_A,prev (row t of L_A is alpha_t times row t one step earlier, plus the
    # diagonal), so Gam = diag(beta) L_U + diag(alpha) Gbar: a sum of non-negative terms, no cancellation,
    # and one [C, C, C] product fewer. Likewise b = beta o exp(U) + alpha o bbar.
    gam = ops.beta[..., :, None] * f.lu + f.alpha[..., :, None] * gam_prev
    b = ops.beta * f.eu + f.alpha * b_prev
    lmat = gam_prev * _ein("...tk,...jk->...tj", ops.p, ops.k)
    rhs = jnp.concatenate([f.ea_prev[..., None] * ops.p, b_prev[..., None] * ops.p, ops.v], axis=-1)
    y = _ein("...ts,...sd->...td", unit_lower_inverse(lmat), rhs)
    return Intra(x=gam * _ein("...tk,...jk->...tj", ops.q, ops.k), u=y[..., 2 * dk:], ys=y[..., :dk],
                 zm=y[..., dk:2 * dk], qa=f.ea[..., None] * ops.q, qb=b[..., None] * ops.q,
                 k_s=gam[..., -1, :, None] * ops.k, k_m=f.lu[..., -1, :, None] * ops.k,
                 ends=jnp.stack([f.ea[..., -1], b[..., -1], f.eu[..., -1]], axis=-1))


def _pass_states(it: Intra, s0: jax.Array, m0: jax.Array):
    """The sequential part: chunk by chunk, residuals W from the entering states, then the leaving states.

    Returns W [B,H,N,C,V], the states entering every chunk S_in, M_in [B,H,N,K,V], and the final (S, M).
    """

    def step(state, c):
        s, m = state
        w = c.u - _ein("bhck,bhkv->bhcv", c.ys, s) + _ein("bhck,bhkv->bhcv", c.zm, m)
        ea, b, eu = (c.ends[..., i, None, None] for i in range(3))
        s_out = ea * s - b * m + _ein("bhck,bhcv->bhkv", c.k_s, w)
        m_out = eu * m - _ein("bhck,bhcv->bhkv", c.k_m, w)
        return (s_out, m_out), (w, s, m)

    per_chunk = Intra(*(jnp.moveaxis(a, 2, 0) for a in it))
    final, outs = jax.lax.scan(step, (s0, m0), per_chunk)
    return tuple(jnp.moveaxis(a, 0, 2) for a in outs), final


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def momentum_delta_rule(q, k, v, *, p, g, log_mu, beta, eta, scale=None, initial_state=None,
                        segment_ids=None, chunk_size=64):
    """Chunked momentum delta rule.

    q, k, p: [B,T,H,K]; v: [B,T,H,V]; g, log_mu, beta, eta: [B,T,H]; initial_state: (S0, M0) each
    [B,H,K,V] | None; segment_ids: [B,T] | None.
    Returns (o [B,T,H,V] in q.dtype, (S, M) each [B,H,K,V] float32).
    """
    bsz, seqlen, heads, dk = q.shape
    ops = prepare(q, k, v, p, g, log_mu, beta, eta, scale, segment_ids, chunk_size)
    s0, m0 = initial_states(initial_state, (bsz, heads, dk, v.shape[-1]))
    it = intra_chunk(ops)
    (w, s_in, m_in), final = _pass_states(it, s0, m0)
    o = (_ein("bhnts,bhnsv->bhntv", it.x, w) + _ein("bhnck,bhnkv->bhncv", it.qa, s_in)
         - _ein("bhnck,bhnkv->bhncv", it.qb, m_in))
    o = jnp.moveaxis(o, 1, 3).reshape(bsz, -1, heads, o.shape[-1])[:, :seqlen]
    return o.astype(q.dtype), final
