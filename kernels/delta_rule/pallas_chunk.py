"""Pallas kernels for the chunked gated delta rule: forward and hand-written backward, `jax.custom_vjp`.

Split of work:
- XLA (`xla.prepare`, differentiated by plain autodiff): casting, padding, chunking and the masked
  decays gamma = D(t, s), e0, es, ec (local log-sums, masked to -inf before exp).
- Pallas (`_fwd_kernel`, `_bwd_kernel`), one program per (batch, head): the chunk computation, i.e. per
  chunk the UT solve by forward substitution, outputs and the state pass, sequentially over chunks.
  The forward saves the state entering every chunk; the backward walks the chunks in reverse,
  recomputes the chunk's intermediates from that state and back-propagates by hand (derivation in
  `_bwd_chunk`), carrying dS.

The kernels are written GPU-style (row updates through iota masks, no dynamic value indexing) but are only
run and tested with `interpret=True` on CPU; `api.py` refuses "pallas" on other backends.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from kernels.delta_rule import xla

_HI = lax.Precision.HIGHEST


def _dot(a, b):
    return jnp.dot(a, b, precision=_HI, preferred_element_type=jnp.float32)


def _fwd_sub(a, r):
    """Solves (I + a) x = r for strictly lower-triangular a [C, C]; r [C, D]. Row by row."""
    rows = lax.broadcasted_iota(jnp.int32, (a.shape[0], 1), 0)

    def body(i, x):
        sel = rows == i
        a_i = jnp.sum(jnp.where(sel, a, 0.0), axis=0, keepdims=True)  # [1, C]
        r_i = jnp.sum(jnp.where(sel, r, 0.0), axis=0, keepdims=True)  # [1, D]
        return jnp.where(sel, r_i - _dot(a_i, x), x)  # rows >= i of x are still 0

    return lax.fori_loop(0, a.shape[0], body, jnp.zeros_like(r))


def _back_sub(a, d):
    """Solves (I + a)^T y = d for strictly lower-triangular a [C, C]; d [C, D]. Last row first."""
    c = a.shape[0]
    rows = lax.broadcasted_iota(jnp.int32, (c, 1), 0)
    at = a.T

    def body(j, y):
        sel = rows == c - 1 - j
        at_i = jnp.sum(jnp.where(sel, at, 0.0), axis=0, keepdims=True)
        d_i = jnp.sum(jnp.where(sel, d, 0.0), axis=0, keepdims=True)
        return jnp.where(sel, d_i - _dot(at_i, y), y)

    return lax.fori_loop(0, c, body, jnp.zeros_like(d))


def _pair(x, y, gam):
    """[C, C]: sum_d x_t[d] y_s[d] gam[t, s, d]; gam [C, C, Kg]."""
    if gam.shape[-1] == 1:
        return _dot(x, y.T) * gam[..., 0]
    return jnp.sum(x[:, None, :] * y[None, :, :] * gam, axis=-1)


def _pair_bwd(x, y, gam, dout):
    """Cotangents (dx, dy, dgam) of `_pair` for the cotangent dout [C, C]."""
    if gam.shape[-1] == 1:
        dg = dout * gam[..., 0]
        return _dot(dg, y), _dot(dg.T, x), (dout * _dot(x, y.T))[..., None]
    dg = dout[..., None] * gam
    return (jnp.sum(dg * y[None, :, :], axis=1), jnp.sum(dg * x[:, None, :], axis=0),
            dout[..., None] * x[:, None, :] * y[None, :, :])


def _masks(c):
    t = lax.broadcasted_iota(jnp.int32, (c, c), 0)
    s = lax.broadcasted_iota(jnp.int32, (c, c), 1)
    return t > s


def _load(refs, n):
    """One chunk's operands: q, k [C,K]; v [C,V]; b [C]; gam [C,C,Kg]; e0, es [C,Kg]; ec [Kg]."""
    return tuple(r[n] for r in refs)


def _chunk_solve(q, k, v, b, gam, e0, s):
    """Shared forward part of a chunk: returns (x, aqk, a, p, rpre)."""
    strict = _masks(k.shape[0])
    p = _pair(k, k, gam)
    a = jnp.where(strict, b[:, None] * p, 0.0)
    rpre = v - _dot(k * e0, s)
    x = _fwd_sub(a, b[:, None] * rpre)
    return x, _pair(q, k, gam), a, p, rpre


def _fwd_kernel(q_ref, k_ref, v_ref, b_ref, gam_ref, e0_ref, es_ref, ec_ref, s0_ref,
                o_ref, sin_ref, sf_ref):
    """One (batch, head): chunks in order, state S [K, V] carried in registers."""

    def body(n, s):
        q, k, v, b, gam, e0, es, ec = _load((q_ref, k_ref, v_ref, b_ref, gam_ref, e0_ref, es_ref, ec_ref), n)
        x, aqk, _, _, _ = _chunk_solve(q, k, v, b, gam, e0, s)
        o_ref[n] = _dot(q * e0, s) + _dot(aqk, x)
        sin_ref[n] = s
        return ec[:, None] * s + _dot((k * es).T, x)

    sf_ref[...] = lax.fori_loop(0, q_ref.shape[0], body, s0_ref[...])


def _bwd_chunk(q, k, v, b, gam, e0, es, ec, s, do, ds):
    """Backward of one chunk. Forward: rpre = v - (k e0) s; (I + a) x = b rpre; o = (q e0) s + aqk x;
    s' = ec s + (k es)^T x. Given do [C,V] and ds = dL/ds' [K,V], returns the input cotangents."""
    x, aqk, a, p, rpre = _chunk_solve(q, k, v, b, gam, e0, s)
    strict = _masks(k.shape[0])
    kds, qd0, kd0 = k * es, q * e0, k * e0
    dx = _dot(aqk.T, do) + _dot(kds, ds)
    daqk = _dot(do, x.T)
    dkds = _dot(x, ds.T)
    dec = jnp.sum(ds * s, axis=1)  # per row of S: [K]
    ds_in = ec[:, None] * ds + _dot(qd0.T, do)
    dqd0 = _dot(do, s.T)
    dr = _back_sub(a, dx)  # dL/d(b rpre)
    da = jnp.where(strict, -_dot(dr, x.T), 0.0)
    db = jnp.sum(dr * rpre, axis=1) + jnp.sum(da * p, axis=1)
    drpre = b[:, None] * dr
    dkd0 = -_dot(drpre, s.T)
    ds_in = ds_in - _dot(kd0.T, drpre)
    dk1, dk2, dgam = _pair_bwd(k, k, gam, b[:, None] * da)
    dq, dk3, dgam2 = _pair_bwd(q, k, gam, daqk)
    dk = dk1 + dk2 + dk3 + dkd0 * e0 + dkds * es
    dq = dq + dqd0 * e0
    sum_kg = (lambda z: jnp.sum(z, axis=-1, keepdims=True)) if gam.shape[-1] == 1 else (lambda z: z)
    de0 = sum_kg(dkd0 * k + dqd0 * q)
    des = sum_kg(dkds * k)
    dec = jnp.sum(dec, keepdims=True) if gam.shape[-1] == 1 else dec
    return (dq, dk, drpre, db, dgam + dgam2, de0, des, dec), ds_in


def _bwd_kernel(q_ref, k_ref, v_ref, b_ref, gam_ref, e0_ref, es_ref, ec_ref, sin_ref, do_ref, dsf_ref,
                dq_ref, dk_ref, dv_ref, db_ref, dgam_ref, de0_ref, des_ref, dec_ref, ds0_ref):
    """One (batch, head): chunks in reverse, dS carried."""
    n_chunks = q_ref.shape[0]
    in_refs = (q_ref, k_ref, v_ref, b_ref, gam_ref, e0_ref, es_ref, ec_ref, sin_ref, do_ref)
    out_refs = (dq_ref, dk_ref, dv_ref, db_ref, dgam_ref, de0_ref, des_ref, dec_ref)

    def body(j, ds):
        n = n_chunks - 1 - j
        grads, ds_in = _bwd_chunk(*_load(in_refs, n), ds)
        for ref, val in zip(out_refs, grads, strict=True):
            ref[n] = val
        return ds_in

    ds0_ref[...] = lax.fori_loop(0, n_chunks, body, dsf_ref[...])


def _call(kernel, inputs, out_shapes):
    """pallas_call with grid (B, H); every array is [B, H, ...] and a program sees its [...] block."""
    bsz, heads = inputs[0].shape[:2]

    def spec(shape):
        rest = tuple(shape[2:])
        return pl.BlockSpec((pl.squeezed, pl.squeezed) + rest, lambda b, h: (b, h) + (0,) * len(rest))

    return pl.pallas_call(
        kernel, grid=(bsz, heads),
        in_specs=[spec(x.shape) for x in inputs],
        out_specs=[spec(s.shape) for s in out_shapes],
        out_shape=out_shapes, interpret=True,
    )(*inputs)


def _sds(x, shape=None):
    return jax.ShapeDtypeStruct(x.shape if shape is None else shape, jnp.float32)


@jax.custom_vjp
def chunk_core(q, k, v, b, gam, e0, es, ec, s0):
    """Chunked core on prepared operands ([B,H,N,C,...], see `xla.Chunked`). Returns o [B,H,N,C,V],
    final state [B,H,K,V]."""
    return _fwd(q, k, v, b, gam, e0, es, ec, s0)[0]


def _fwd(q, k, v, b, gam, e0, es, ec, s0):
    inputs = (q, k, v, b, gam, e0, es, ec, s0)
    bsz, heads, n = q.shape[:3]
    outs = (_sds(v), _sds(s0, (bsz, heads, n) + s0.shape[2:]), _sds(s0))
    o, s_in, s_final = _call(_fwd_kernel, inputs, outs)
    return (o, s_final), (q, k, v, b, gam, e0, es, ec, s_in)


def _bwd(res, cts):
    do, dsf = cts
    inputs = res + (do, dsf)
    outs = tuple(_sds(x) for x in res[:8]) + (_sds(dsf),)
    return tuple(_call(_bwd_kernel, inputs, outs))


chunk_core.defvjp(_fwd, _bwd)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def _run(q, k, v, beta, g, scale, initial_state, segment_ids, chunk_size):
    bsz, _, heads, dk = q.shape
    ops, seqlen = xla.prepare(q, k, v, beta, g, scale, segment_ids, chunk_size)
    s0 = (jnp.zeros((bsz, heads, dk, v.shape[-1]), jnp.float32) if initial_state is None
          else initial_state.astype(jnp.float32))
    o, s_final = chunk_core(*ops, s0)
    o = jnp.moveaxis(o, 1, 3).reshape(bsz, -1, heads, o.shape[-1])[:, :seqlen]
    return o.astype(q.dtype), s_final


def gated_delta_rule(q, k, v, *, beta, g=None, scale=None, initial_state=None, segment_ids=None,
                     chunk_size=64):
    """Pallas (interpret-mode) chunked gated delta rule; same contract as `xla.gated_delta_rule`.

    q, k: [B,T,H,K]; v: [B,T,H,V]; beta: [B,T,H]; g: None | [B,T,H] | [B,T,H,K].
    Returns (o [B,T,H,V] in q.dtype, S [B,H,K,V] float32).
    """
    return _run(q, k, v, beta, g, scale, initial_state, segment_ids, chunk_size)
