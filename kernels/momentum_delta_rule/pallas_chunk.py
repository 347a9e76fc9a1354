"""Pallas kernels for the chunked momentum delta rule: forward and hand-written backward, `jax.custom_vjp`.

Split of work (specs/mixers-02 §2.4; the maths is `xla.py`'s chunked form):
- XLA (`xla.prepare` and `xla.intra_chunk`, differentiated by plain autodiff): casting, padding,
  chunking, the masked decay factors, the factored coefficient matrix Gam = L_A diag(beta) L_U (a product
  of two triangular factors with entries in [0, 1], never a difference of cumulants: the binding §2.4
  numerics note) and the UT inverse (I + L)^{-1}. All of these are pure functions of one chunk and run
  for every chunk at once.
- Pallas (`_fwd_kernel`, `_bwd_kernel`), one program per (batch, head): the sequential part. Chunk by
  chunk, with (S, M) the states entering it,

      W   = u - ys S + zm M                    (residuals of the UT system)
      O   = x W + qa S - qb M
      S'  = ea S - b M + k_s^T W
      M'  = eu M - k_m^T W

  The forward saves the states entering every chunk; the backward walks the chunks in reverse carrying
  (dS, dM) and returns the cotangents of every per-chunk operand and of (S0, M0) (derivation in
  `_bwd_chunk`). Gradients w.r.t. q, k, v, p and the gates then flow through the XLA part by autodiff.

Packed segments need nothing here: a reset zeroes every factor linking a step to an earlier segment and the
carried-in terms (qa, qb, ys, zm and the chunk-end decays) in the XLA part, exactly as a zeroed (S, M).

The kernels are written GPU-style (whole-block matmuls, no dynamic value indexing) but are only run and
tested with `interpret=True` on CPU; `api.py` refuses "pallas" on other backends.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

# The (B, H)-grid pallas_call wrapper is the gated delta rule's own: both state passes use it.
from kernels.delta_rule.pallas_chunk import _call, _sds
from kernels.momentum_delta_rule import xla
from kernels.momentum_delta_rule.reference import initial_states

_HI = lax.Precision.HIGHEST


def _dot(a, b):
    return jnp.dot(a, b, precision=_HI, preferred_element_type=jnp.float32)


def _dot_tn(a, b):
    """a^T b, contracting the leading (chunk-row) axis of both."""
    return lax.dot_general(a, b, (((0,), (0,)), ((), ())), precision=_HI, preferred_element_type=jnp.float32)


def _dot_nt(a, b):
    """a b^T, contracting the trailing axis of both."""
    return lax.dot_general(a, b, (((1,), (1,)), ((), ())), precision=_HI, preferred_element_type=jnp.float32)


def _load(refs, n):
    """One chunk's operands: x [C,C]; u [C,V]; ys, zm, qa, qb, k_s, k_m [C,K]; ea, b, eu [1]."""
    return tuple(r[n] for r in refs)


def _residuals(u, ys, zm, s, m):
    """W [C, V] from the states (S, M) [K, V] entering the chunk."""
    return u - _dot(ys, s) + _dot(zm, m)


def _fwd_kernel(x_ref, u_ref, ys_ref, zm_ref, qa_ref, qb_ref, ks_ref, km_ref, ea_ref, b_ref, eu_ref,
                s0_ref, m0_ref, o_ref, sin_ref, min_ref, sf_ref, mf_ref):
    """One (batch, head): chunks in order, states S, M [K, V] carried in registers."""
    in_refs = (x_ref, u_ref, ys_ref, zm_ref, qa_ref, qb_ref, ks_ref, km_ref, ea_ref, b_ref, eu_ref)

    def body(n, state):
        s, m = state
        x, u, ys, zm, qa, qb, k_s, k_m, ea, b, eu = _load(in_refs, n)
        w = _residuals(u, ys, zm, s, m)
        o_ref[n] = _dot(x, w) + _dot(qa, s) - _dot(qb, m)
        sin_ref[n] = s
        min_ref[n] = m
        s_out = ea[:, None] * s - b[:, None] * m + _dot_tn(k_s, w)
        m_out = eu[:, None] * m - _dot_tn(k_m, w)
        return s_out, m_out

    s_final, m_final = lax.fori_loop(0, x_ref.shape[0], body, (s0_ref[...], m0_ref[...]))
    sf_ref[...] = s_final
    mf_ref[...] = m_final


def _bwd_chunk(x, u, ys, zm, qa, qb, k_s, k_m, ea, b, eu, s, m, do, ds, dm):
    """Backward of one chunk, by hand from the four forward lines (module docstring).

    Given do [C,V] and (ds, dm) = dL/d(S', M') [K,V], returns the cotangents of the chunk's operands in
    `_load` order and (dS, dM) of the states entering the chunk.
    """
    w = _residuals(u, ys, zm, s, m)
    # W feeds O (through x), S' (through k_s) and M' (through -k_m).
    dw = _dot_tn(x, do) + _dot(k_s, ds) - _dot(k_m, dm)
    # The chunk-end decays scale whole states: their cotangents are Frobenius products, shape [1].
    frob = lambda a, c: jnp.sum(a * c).reshape(1)
    dx, dqa, dqb = _dot_nt(do, w), _dot_nt(do, s), -_dot_nt(do, m)
    du, dys, dzm = dw, -_dot_nt(dw, s), _dot_nt(dw, m)
    dks, dkm = _dot_nt(w, ds), -_dot_nt(w, dm)
    grads = (dx, du, dys, dzm, dqa, dqb, dks, dkm, frob(ds, s), -frob(ds, m), frob(dm, m))
    ds_in = ea[:, None] * ds + _dot_tn(qa, do) - _dot_tn(ys, dw)
    dm_in = eu[:, None] * dm - b[:, None] * ds - _dot_tn(qb, do) + _dot_tn(zm, dw)
    return grads, ds_in, dm_in


def _bwd_kernel(x_ref, u_ref, ys_ref, zm_ref, qa_ref, qb_ref, ks_ref, km_ref, ea_ref, b_ref, eu_ref,
                sin_ref, min_ref, do_ref, dsf_ref, dmf_ref,
                dx_ref, du_ref, dys_ref, dzm_ref, dqa_ref, dqb_ref, dks_ref, dkm_ref, dea_ref, db_ref, deu_ref,
                ds0_ref, dm0_ref):
    """One (batch, head): chunks in reverse, (dS, dM) carried."""
    n_chunks = x_ref.shape[0]
    in_refs = (x_ref, u_ref, ys_ref, zm_ref, qa_ref, qb_ref, ks_ref, km_ref, ea_ref, b_ref, eu_ref,
               sin_ref, min_ref, do_ref)
    out_refs = (dx_ref, du_ref, dys_ref, dzm_ref, dqa_ref, dqb_ref, dks_ref, dkm_ref, dea_ref, db_ref, deu_ref)

    def body(j, cot):
        n = n_chunks - 1 - j
        grads, ds_in, dm_in = _bwd_chunk(*_load(in_refs, n), *cot)
        for ref, val in zip(out_refs, grads, strict=True):
            ref[n] = val
        return ds_in, dm_in

    ds0, dm0 = lax.fori_loop(0, n_chunks, body, (dsf_ref[...], dmf_ref[...]))
    ds0_ref[...] = ds0
    dm0_ref[...] = dm0


@jax.custom_vjp
def state_pass(x, u, ys, zm, qa, qb, k_s, k_m, ea, b, eu, s0, m0):
    """The sequential part on per-chunk operands ([B,H,N,...], see `xla.Intra`; ea, b, eu [B,H,N,1]).

    Returns o [B,H,N,C,V] and the final states S, M [B,H,K,V].
    """
    return _state_pass_fwd(x, u, ys, zm, qa, qb, k_s, k_m, ea, b, eu, s0, m0)[0]


def _state_pass_fwd(x, u, ys, zm, qa, qb, k_s, k_m, ea, b, eu, s0, m0):
    inputs = (x, u, ys, zm, qa, qb, k_s, k_m, ea, b, eu, s0, m0)
    per_chunk_state = x.shape[:3] + s0.shape[2:]
    outs = (_sds(u), _sds(s0, per_chunk_state), _sds(m0, per_chunk_state), _sds(s0), _sds(m0))
    o, s_in, m_in, s_final, m_final = _call(_fwd_kernel, inputs, outs)
    return (o, s_final, m_final), inputs[:11] + (s_in, m_in)


def _state_pass_bwd(res, cts):
    do, dsf, dmf = cts
    inputs = res + (do, dsf, dmf)
    outs = tuple(_sds(a) for a in res[:11]) + (_sds(dsf), _sds(dmf))
    return tuple(_call(_bwd_kernel, inputs, outs))


state_pass.defvjp(_state_pass_fwd, _state_pass_bwd)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def momentum_delta_rule(q, k, v, *, p, g, log_mu, beta, eta, scale=None, initial_state=None,
                        segment_ids=None, chunk_size=64):
    """Pallas (interpret-mode) chunked momentum delta rule; same contract as `xla.momentum_delta_rule`.

    q, k, p: [B,T,H,K]; v: [B,T,H,V]; g, log_mu, beta, eta: [B,T,H]; initial_state: (S0, M0) each
    [B,H,K,V] | None; segment_ids: [B,T] | None.
    Returns (o [B,T,H,V] in q.dtype, (S, M) each [B,H,K,V] float32).
    """
    bsz, seqlen, heads, dk = q.shape
    ops = xla.prepare(q, k, v, p, g, log_mu, beta, eta, scale, segment_ids, chunk_size)
    s0, m0 = initial_states(initial_state, (bsz, heads, dk, v.shape[-1]))
    it = xla.intra_chunk(ops)
    ends = tuple(it.ends[..., i:i + 1] for i in range(3))  # [B,H,N,1] each: exp(A_C), b_C, exp(U_C)
    o, s_final, m_final = state_pass(it.x, it.u, it.ys, it.zm, it.qa, it.qb, it.k_s, it.k_m, *ends, s0, m0)
    o = jnp.moveaxis(o, 1, 3).reshape(bsz, -1, heads, o.shape[-1])[:, :seqlen]
    return o.astype(q.dtype), (s_final, m_final)
