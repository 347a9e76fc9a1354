"""Chunkwise-parallel momentum delta rule (MDN, arXiv 2605.05838): the default, portable XLA path.

Inside a chunk of C steps (rows t = 0..C-1; S0, M0 the states entering it; k~ = eta * k; A, U the running
sums of g and log_mu from the chunk start), unrolling the recurrence gives

    S_t = exp(A_t) S0 - b_t M0 + sum_{j<=t} Gam_tj k~_j w_j^T,   w_j = v_j - S_{j-1}^T p_j = -e_j
    M_t = exp(U_t) M0 - sum_{j<=t} exp(U_t - U_j) k~_j w_j^T

with Gam = L_A diag(beta) L_U, (L_A)_ti = exp(A_t - A_i) (i <= t), (L_U)_ij = exp(U_i - U_j) (j <= i) and
b = L_A (beta o exp(U)). The residuals solve the unit lower-triangular (UT) system

    (I + L) W = V - (Abar o P) S0 + (bbar o P) M0,   L_tj = Gbar_tj (p_t . k~_j)  (j < t)

where Gbar, Abar, bbar are Gam, exp(A), b one step earlier (the state *before* step t).

Numerics (docs/numerics.md, binding): Gbar = L_A,prev diag(beta) L_U is the PRODUCT of two triangular
factors whose entries are each a masked exp of a local, non-positive log-gate sum, so all lie in [0, 1];
Gam = diag(beta) L_U + diag(alpha) Gbar adds non-negative terms. Neither is ever formed as a difference of
cumulative sums (C_t - C_{j-1}), which loses all precision in float32 once log_mu spans (-2, 0). Every
exponent is a pairwise segment sum or a running sum from the chunk start (masked prefix sums), masked to
-inf before exp. "One step earlier" is an exclusive prefix sum, never a division by exp(g_t).

Packed segments: a reset at step t zeroes every factor linking t to an earlier step and the carried
S0/M0 terms (all by the -inf masks), exactly as a zeroed (S, M). T is padded to a multiple of C with
identity steps (beta = eta = 0, g = log_mu = 0).

Speed (XLA:CPU): the XLA path runs chunk-major ([N, B, H, C, ...]) and stacks the two states as X = [S; M]
[2K, V], so the sequential `lax.scan` (`state_pass`) needs no transposes and does two matmuls per chunk; all
the rest runs batched over every chunk. Gradients: autodiff, except three hand-written backwards: the UT
solve and per-row scalings (`unit_lower_solve`, `scale_rows` from `kernels._common`: matmuls instead of
doubling levels and minor-axis reductions) and `state_pass` (the reverse scan carries only dX).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.chunks import chunk_inputs, prefix_sum, scale_rows, to_chunk_major, to_chunks
from icml26zoo.kernels._common.layout import pad_time
from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels._common.triangular import unit_lower_solve
from icml26zoo.kernels.momentum_delta_rule.reference import initial_states

_NEG_INF = float("-inf")


def _ein(spec: str, *xs: jax.Array) -> jax.Array:
    return jnp.einsum(spec, *xs, precision=HIGHEST)


class Factors(NamedTuple):
    """Masked decay factors of a set of chunks, layout [.., C(, C)], entries all in [0, 1]."""

    la_prev: jax.Array  # [..,C,C] exp(A_{t-1} - A_i), i < t, same segment as t
    lu: jax.Array  # [..,C,C] exp(U_i - U_j), j <= i, same segment
    alpha: jax.Array  # [..,C] exp(g_t)
    ea: jax.Array  # [..,C] exp(A_t) if t is in the carried-in segment, else 0
    ea_prev: jax.Array  # [..,C] exp(A_{t-1}) (A_{-1} = 0), same mask as ea
    eu: jax.Array  # [..,C] exp(U_t), same mask as ea


def factors(gc: jax.Array, uc: jax.Array, run: jax.Array, run_in: jax.Array) -> Factors:
    """gc, uc: [.., C] chunked g and log_mu; run: [.., C] segment-run index; run_in: [..] run before."""
    c = gc.shape[-1]
    t_idx, s_idx = jnp.arange(c)[:, None], jnp.arange(c)[None, :]
    same = run[..., :, None] == run[..., None, :]
    lower, strict = same & (t_idx >= s_idx), same & (t_idx > s_idx)
    masked_exp = lambda mask, x: jnp.exp(jnp.where(mask, x, _NEG_INF))  # mask BEFORE exp
    # Pairwise segment sums: row l of the masked matrix holds x_l in the columns s < l; its prefix sum over
    # l <= t (or l < t, one step earlier) is sum_{l=s+1..t} x_l (or ..t-1): local sums, never differences.
    # The 0/1 mask times x as a row scaling: its backward sums rows by a matmul, not a minor-axis reduction.
    strict_ones = jnp.broadcast_to((t_idx > s_idx).astype(jnp.float32), gc.shape + (c,))
    after = lambda x: scale_rows(strict_ones, x[..., :, None])
    carry = run == run_in[..., None]
    return Factors(alpha=jnp.exp(gc), la_prev=masked_exp(strict, prefix_sum(after(gc), -2, exclusive=True)),
                   lu=masked_exp(lower, prefix_sum(after(uc), -2)), ea=masked_exp(carry, prefix_sum(gc, -1)),
                   ea_prev=masked_exp(carry, prefix_sum(gc, -1, exclusive=True)),
                   eu=masked_exp(carry, prefix_sum(uc, -1)))


class Chunked(NamedTuple):
    """Padded, chunked float32 operands, layout [B, H, N, C, ...] (or [N, B, H, C, ...] chunk-major)."""

    q: jax.Array  # [..,C,K] times scale
    k: jax.Array  # [..,C,K] times eta
    p: jax.Array  # [..,C,K]
    v: jax.Array  # [..,C,V]
    beta: jax.Array  # [..,C]
    fac: Factors


def prepare(q: jax.Array, k: jax.Array, v: jax.Array, p: jax.Array, g: jax.Array, log_mu: jax.Array, beta: jax.Array,
            eta: jax.Array, scale: float | None, segment_ids: jax.Array | None, chunk_size: int,
            chunk_major: bool = False) -> Chunked:
    """Casts to float32, pads T to a multiple of chunk_size with identity steps, chunks, builds factors.

    Layout [B, H, N, C, ...], or [N, B, H, C, ...] with chunk_major.
    """
    bsz, seqlen = q.shape[:2]
    c = chunk_size
    n = -(-seqlen // c)
    f32 = lambda x: x.astype(jnp.float32)
    x = chunk_inputs(q, scale_rows(f32(k), f32(eta)[..., None]), v, beta, g, scale, segment_ids, c, chunk_major)
    layout = to_chunk_major if chunk_major else to_chunks
    chunk = lambda a: layout(pad_time(f32(a), n * c - seqlen), n, c)
    fac = factors(x.gc[..., 0], chunk(log_mu[..., None])[..., 0], x.run, x.run_in)
    return Chunked(q=x.q, k=x.k, p=chunk(p), v=x.v, beta=x.beta, fac=fac)


class Intra(NamedTuple):
    """Per-chunk quantities, computed for all chunks in parallel, layout as `Chunked`.

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
    """The UT solve and every [C, C] product of the chunked form above, for all chunks at once."""
    f, dk, c = ops.fac, ops.k.shape[-1], ops.k.shape[-2]
    rows = lambda x: x[..., None]
    # [Gbar | bbar] = L_A,prev diag(beta) [L_U | exp(U)]: one matmul of factors in [0, 1]; Gbar strictly lower.
    beta_lu_eu = scale_rows(jnp.concatenate([f.lu, rows(f.eu)], axis=-1), rows(ops.beta))
    prev = _ein("...ti,...ij->...tj", f.la_prev, beta_lu_eu)
    # L_A = I + diag(alpha) L_A,prev (row t of L_A is alpha_t times row t one step earlier, plus the
    # diagonal), so [Gam | b] = diag(beta) [L_U | exp(U)] + diag(alpha) [Gbar | bbar]: a sum of non-negative
    # terms, no cancellation, and one [C, C, C] product fewer.
    cur = beta_lu_eu + scale_rows(prev, rows(f.alpha))
    gam_prev, b_prev, gam, b = prev[..., :c], prev[..., c], cur[..., :c], cur[..., c]
    lmat = gam_prev * _ein("...tk,...jk->...tj", ops.p, ops.k)
    rhs = jnp.concatenate([scale_rows(ops.p, rows(f.ea_prev)), scale_rows(ops.p, rows(b_prev)), ops.v], axis=-1)
    y = unit_lower_solve(lmat, rhs)
    return Intra(x=gam * _ein("...tk,...jk->...tj", ops.q, ops.k), u=y[..., 2 * dk:], ys=y[..., :dk],
                 zm=y[..., dk:2 * dk], qa=scale_rows(ops.q, rows(f.ea)), qb=scale_rows(ops.q, rows(b)),
                 k_s=scale_rows(ops.k, rows(gam[..., -1, :])), k_m=scale_rows(ops.k, rows(f.lu[..., -1, :])),
                 ends=jnp.stack([f.ea[..., -1], b[..., -1], f.eu[..., -1]], axis=-1))


def _end_decay(ends: jax.Array, x: jax.Array, transpose: bool = False) -> jax.Array:
    """E X (or E^T X) for X = [S; M] [..,2K,V] and E = [[exp(A_C) I, -b_C I], [0, exp(U_C) I]], ends [..,3]."""
    ea, b, eu = (ends[..., i, None, None] for i in range(3))
    dk = x.shape[-2] // 2
    s, m = x[..., :dk, :], x[..., dk:, :]
    top, bottom = (ea * s, eu * m - b * s) if transpose else (ea * s - b * m, eu * m)
    return jnp.concatenate([top, bottom], axis=-2)


@jax.custom_vjp
def state_pass(x: jax.Array, u: jax.Array, y: jax.Array, kc: jax.Array, qc: jax.Array, ends: jax.Array,
               x0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The sequential part and the output, chunk-major, with the stacked state X = [S; M] [2K, V].

    Per chunk, from the state X entering it: W = u - Y X, O = x W + Qc X and X' = E X + Kc^T W, where
    Y = [ys | -zm], Qc = [qa | -qb], Kc = [k_s | -k_m] [..,C,2K] and E as in `_end_decay`.
    x [N,B,H,C,C]; u [N,B,H,C,V]; y, kc, qc [N,B,H,C,2K]; ends [N,B,H,3]; x0 [B,H,2K,V].
    Returns o [N,B,H,C,V] and the final state [B,H,2K,V].

    Hand-written backward: the reverse scan carries only dX (two matmuls per chunk); every other
    cotangent is one batched matmul over all chunks afterwards, instead of small ones inside the loop.
    """
    return _state_pass_fwd(x, u, y, kc, qc, ends, x0)[0]


def _state_pass_fwd(x: jax.Array, u: jax.Array, y: jax.Array, kc: jax.Array, qc: jax.Array, ends: jax.Array,
                    x0: jax.Array) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, ...]]:
    def step(xs: jax.Array, op: tuple[jax.Array, ...]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        u_n, y_n, kc_n, ends_n = op
        w = u_n - _ein("bhck,bhkv->bhcv", y_n, xs)
        return _end_decay(ends_n, xs) + _ein("bhck,bhcv->bhkv", kc_n, w), (w, xs)

    x_final, (w, x_in) = jax.lax.scan(step, x0, (u, y, kc, ends))
    o = _ein("...ts,...sv->...tv", x, w) + _ein("...ck,...kv->...cv", qc, x_in)
    return (o, x_final), (x, y, kc, qc, ends, w, x_in)


def _state_pass_bwd(res: tuple[jax.Array, ...], cts: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, ...]:
    x, y, kc, qc, ends, w, x_in = res
    do, dx_final = cts
    do_w = _ein("...ts,...tv->...sv", x, do)
    do_x = _ein("...ck,...cv->...kv", qc, do)

    def step(dx_out: jax.Array, op: tuple[jax.Array, ...]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        do_w_n, do_x_n, y_n, kc_n, ends_n = op
        dw = do_w_n + _ein("bhck,bhkv->bhcv", kc_n, dx_out)
        dx_in = _end_decay(ends_n, dx_out, transpose=True) - _ein("bhck,bhcv->bhkv", y_n, dw) + do_x_n
        return dx_in, (dw, dx_out)

    dx0, (dw, dx_out) = jax.lax.scan(step, dx_final, (do_w, do_x, y, kc, ends), reverse=True)
    # With dW and dX' (dx_out) of every chunk known, each operand's cotangent is one batched product:
    # dx = dO W^T, du = dW, dY = -dW X^T, dKc = W dX'^T, dQc = dO X^T, and the Frobenius products of E.
    dk = y.shape[-1] // 2
    frob = lambda a, b: _ein("...kv,...kv->...", a, b)
    ds_out, dm_out = dx_out[..., :dk, :], dx_out[..., dk:, :]
    s_in, m_in = x_in[..., :dk, :], x_in[..., dk:, :]
    dends = jnp.stack([frob(ds_out, s_in), -frob(ds_out, m_in), frob(dm_out, m_in)], axis=-1)
    outer = lambda a, b: _ein("...cv,...kv->...ck", a, b)
    return (_ein("...tv,...sv->...ts", do, w), dw, -outer(dw, x_in), outer(w, dx_out), outer(do, x_in), dends, dx0)


state_pass.defvjp(_state_pass_fwd, _state_pass_bwd)


StatePass = Callable[[Intra, jax.Array, jax.Array], tuple[jax.Array, tuple[jax.Array, jax.Array]]]


def chunked_op(pass_states: StatePass, *, chunk_major: bool, summary: str) -> Callable[..., tuple]:
    """The public chunked op around `pass_states(intra, S0, M0) -> (o [B, T', H, V] with T' >= T, (S, M))`.

    chunk_major picks the operand layout of `prepare`; summary is the docstring's first line.
    """

    def momentum_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, p: jax.Array, *, g: jax.Array,
                            log_mu: jax.Array, beta: jax.Array, eta: jax.Array, scale: float | None = None,
                            initial_state: tuple[jax.Array, jax.Array] | None = None,
                            segment_ids: jax.Array | None = None,
                            chunk_size: int = 64) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        bsz, seqlen, heads, dk = q.shape
        ops = prepare(q, k, v, p, g, log_mu, beta, eta, scale, segment_ids, chunk_size, chunk_major=chunk_major)
        s0, m0 = initial_states(initial_state, (bsz, heads, dk, v.shape[-1]))
        o, states = pass_states(intra_chunk(ops), s0, m0)
        return o[:, :seqlen].astype(q.dtype), states

    momentum_delta_rule.__doc__ = f"""{summary}

    q, k, p: [B,T,H,K]; v: [B,T,H,V]; g, log_mu, beta, eta: [B,T,H]; initial_state: (S0, M0) each
    [B,H,K,V] | None; segment_ids: [B,T] | None.
    Returns (o [B,T,H,V] in q.dtype, (S, M) each [B,H,K,V] float32).
    """
    return jax.jit(momentum_delta_rule, static_argnames=("chunk_size",))


def _chunk_major_pass(it: Intra, s0: jax.Array, m0: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """The stacked X = [S; M] state pass on chunk-major operands: o [B, N*C, H, V], (S, M) [B, H, K, V]."""
    bsz, heads, dk = s0.shape[:3]
    cat = lambda a, b: jnp.concatenate([a, -b], axis=-1)
    o, x_final = state_pass(it.x, it.u, cat(it.ys, it.zm), cat(it.k_s, it.k_m), cat(it.qa, it.qb), it.ends,
                            jnp.concatenate([s0, m0], axis=-2))  # o [N,B,H,C,V]
    o = jnp.transpose(o, (1, 0, 3, 2, 4)).reshape(bsz, -1, heads, o.shape[-1])
    return o, (x_final[..., :dk, :], x_final[..., dk:, :])


momentum_delta_rule = chunked_op(_chunk_major_pass, chunk_major=True, summary="Chunked momentum delta rule.")
