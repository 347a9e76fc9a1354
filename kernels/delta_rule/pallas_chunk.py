"""Pallas kernels for the chunked gated delta rule: forward and hand-written backward, `jax.custom_vjp`.

Split of work:
- XLA (`xla.prepare`, differentiated by plain autodiff): casting, padding, chunking and the masked
  decays gamma = D(t, s), e0, es, ec (local log-sums, masked to -inf before exp).
- Pallas (`_fwd_kernel`, `_bwd_kernel`), one program per (batch, head) (`kernels._common.pallas.call`): the
  chunk computation, i.e. per chunk the UT solve by forward substitution, outputs and the state pass,
  sequentially over chunks.
  The forward saves the state entering every chunk; the backward walks the chunks in reverse,
  recomputes the chunk's intermediates from that state and back-propagates by hand (derivation in
  `_bwd_chunk`), carrying dS.

Lowering (`kernels._common.pallas.call`): interpreted on CPU, Triton on CUDA, Mosaic on TPU, chosen when
lowered. The kernels are written for both compilers (row updates through iota masks, no dynamic value
indexing, only the chunk axis indexed dynamically) and loop over the true chunk count, so Triton's
power-of-two zero padding of the trailing dims is never visited.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.pallas import call, dot, shape_dtype, state_pass_tuning
from icml26zoo.kernels.delta_rule import xla

_OP = "gated_delta_rule"


def _fwd_sub(a: jax.Array, r: jax.Array) -> jax.Array:
    """Solves (I + a) x = r for strictly lower-triangular a [C, C]; r [C, D]. Row by row."""
    rows = lax.broadcasted_iota(jnp.int32, (a.shape[0], 1), 0)

    def body(i: jax.Array, x: jax.Array) -> jax.Array:
        sel = rows == i
        a_i = jnp.sum(jnp.where(sel, a, 0.0), axis=0, keepdims=True)  # [1, C]
        r_i = jnp.sum(jnp.where(sel, r, 0.0), axis=0, keepdims=True)  # [1, D]
        return jnp.where(sel, r_i - dot(a_i, x), x)  # rows >= i of x are still 0

    return lax.fori_loop(0, a.shape[0], body, jnp.zeros_like(r))


def _back_sub(a: jax.Array, d: jax.Array) -> jax.Array:
    """Solves (I + a)^T y = d for strictly lower-triangular a [C, C]; d [C, D]. Last row first."""
    c = a.shape[0]
    rows = lax.broadcasted_iota(jnp.int32, (c, 1), 0)
    at = a.T

    def body(j: jax.Array, y: jax.Array) -> jax.Array:
        sel = rows == c - 1 - j
        at_i = jnp.sum(jnp.where(sel, at, 0.0), axis=0, keepdims=True)
        d_i = jnp.sum(jnp.where(sel, d, 0.0), axis=0, keepdims=True)
        return jnp.where(sel, d_i - dot(at_i, y), y)

    return lax.fori_loop(0, c, body, jnp.zeros_like(d))


def _pair(x: jax.Array, y: jax.Array, gam: jax.Array) -> jax.Array:
    """[C, C]: sum_d x_t[d] y_s[d] gam[t, s, d]; gam [C, C, Kg]."""
    if gam.shape[-1] == 1:
        return dot(x, y.T) * gam[..., 0]
    return jnp.sum(x[:, None, :] * y[None, :, :] * gam, axis=-1)


def _pair_bwd(x: jax.Array, y: jax.Array, gam: jax.Array,
              dout: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Cotangents (dx, dy, dgam) of `_pair` for the cotangent dout [C, C]."""
    if gam.shape[-1] == 1:
        dg = dout * gam[..., 0]
        return dot(dg, y), dot(dg.T, x), (dout * dot(x, y.T))[..., None]
    dg = dout[..., None] * gam
    return (jnp.sum(dg * y[None, :, :], axis=1), jnp.sum(dg * x[:, None, :], axis=0),
            dout[..., None] * x[:, None, :] * y[None, :, :])


def _masks(c: int) -> jax.Array:
    t = lax.broadcasted_iota(jnp.int32, (c, c), 0)
    s = lax.broadcasted_iota(jnp.int32, (c, c), 1)
    return t > s


def _load(refs: Sequence[Any], n: jax.Array) -> tuple[jax.Array, ...]:
    """One chunk's operands: q, k [C,K]; v [C,V]; b [C]; gam [C,C,Kg]; e0, es [C,Kg]; ec [Kg]."""
    return tuple(r[n] for r in refs)


def _chunk_solve(q: jax.Array, k: jax.Array, v: jax.Array, b: jax.Array, gam: jax.Array, e0: jax.Array,
                 s: jax.Array) -> tuple[jax.Array, ...]:
    """Shared forward part of a chunk: returns (x, aqk, a, p, rpre)."""
    strict = _masks(k.shape[0])
    p = _pair(k, k, gam)
    a = jnp.where(strict, b[:, None] * p, 0.0)
    rpre = v - dot(k * e0, s)
    x = _fwd_sub(a, b[:, None] * rpre)
    return x, _pair(q, k, gam), a, p, rpre


def _fwd_kernel(q_ref: Any, k_ref: Any, v_ref: Any, b_ref: Any, gam_ref: Any, e0_ref: Any, es_ref: Any,
                ec_ref: Any, s0_ref: Any, o_ref: Any, sin_ref: Any, sf_ref: Any, *, n_chunks: int) -> None:
    """One (batch, head): chunks in order, state S [K, V] carried in registers."""

    def body(n: jax.Array, s: jax.Array) -> jax.Array:
        q, k, v, b, gam, e0, es, ec = _load((q_ref, k_ref, v_ref, b_ref, gam_ref, e0_ref, es_ref, ec_ref), n)
        x, aqk, _, _, _ = _chunk_solve(q, k, v, b, gam, e0, s)
        o_ref[n] = dot(q * e0, s) + dot(aqk, x)
        sin_ref[n] = s
        return ec[:, None] * s + dot((k * es).T, x)

    sf_ref[...] = lax.fori_loop(0, n_chunks, body, s0_ref[...])


def _bwd_chunk(q: jax.Array, k: jax.Array, v: jax.Array, b: jax.Array, gam: jax.Array, e0: jax.Array,
               es: jax.Array, ec: jax.Array, s: jax.Array, do: jax.Array,
               ds: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """Backward of one chunk. Forward: rpre = v - (k e0) s; (I + a) x = b rpre; o = (q e0) s + aqk x;
    s' = ec s + (k es)^T x. Given do [C,V] and ds = dL/ds' [K,V], returns the input cotangents."""
    x, aqk, a, p, rpre = _chunk_solve(q, k, v, b, gam, e0, s)
    strict = _masks(k.shape[0])
    kds, qd0, kd0 = k * es, q * e0, k * e0
    dx = dot(aqk.T, do) + dot(kds, ds)
    daqk = dot(do, x.T)
    dkds = dot(x, ds.T)
    dec = jnp.sum(ds * s, axis=1)  # per row of S: [K]
    ds_in = ec[:, None] * ds + dot(qd0.T, do)
    dqd0 = dot(do, s.T)
    dr = _back_sub(a, dx)  # dL/d(b rpre)
    da = jnp.where(strict, -dot(dr, x.T), 0.0)
    db = jnp.sum(dr * rpre, axis=1) + jnp.sum(da * p, axis=1)
    drpre = b[:, None] * dr
    dkd0 = -dot(drpre, s.T)
    ds_in = ds_in - dot(kd0.T, drpre)
    dk1, dk2, dgam = _pair_bwd(k, k, gam, b[:, None] * da)
    dq, dk3, dgam2 = _pair_bwd(q, k, gam, daqk)
    dk = dk1 + dk2 + dk3 + dkd0 * e0 + dkds * es
    dq = dq + dqd0 * e0
    sum_kg = (lambda z: jnp.sum(z, axis=-1, keepdims=True)) if gam.shape[-1] == 1 else (lambda z: z)
    de0 = sum_kg(dkd0 * k + dqd0 * q)
    des = sum_kg(dkds * k)
    dec = jnp.sum(dec, keepdims=True) if gam.shape[-1] == 1 else dec
    return (dq, dk, drpre, db, dgam + dgam2, de0, des, dec), ds_in


def _bwd_kernel(q_ref: Any, k_ref: Any, v_ref: Any, b_ref: Any, gam_ref: Any, e0_ref: Any, es_ref: Any,
                ec_ref: Any, sin_ref: Any, do_ref: Any, dsf_ref: Any, dq_ref: Any, dk_ref: Any, dv_ref: Any,
                db_ref: Any, dgam_ref: Any, de0_ref: Any, des_ref: Any, dec_ref: Any, ds0_ref: Any, *,
                n_chunks: int) -> None:
    """One (batch, head): chunks in reverse, dS carried."""
    in_refs = (q_ref, k_ref, v_ref, b_ref, gam_ref, e0_ref, es_ref, ec_ref, sin_ref, do_ref)
    out_refs = (dq_ref, dk_ref, dv_ref, db_ref, dgam_ref, de0_ref, des_ref, dec_ref)

    def body(j: jax.Array, ds: jax.Array) -> jax.Array:
        n = n_chunks - 1 - j
        grads, ds_in = _bwd_chunk(*_load(in_refs, n), ds)
        for ref, val in zip(out_refs, grads, strict=True):
            ref[n] = val
        return ds_in

    ds0_ref[...] = lax.fori_loop(0, n_chunks, body, dsf_ref[...])


@jax.custom_vjp
def chunk_core(q: jax.Array, k: jax.Array, v: jax.Array, b: jax.Array, gam: jax.Array, e0: jax.Array,
               es: jax.Array, ec: jax.Array, s0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Chunked core on prepared operands ([B,H,N,C,...], see `xla.Chunked`). Returns o [B,H,N,C,V],
    final state [B,H,K,V]."""
    return _fwd(q, k, v, b, gam, e0, es, ec, s0)[0]


def _fwd(q: jax.Array, k: jax.Array, v: jax.Array, b: jax.Array, gam: jax.Array, e0: jax.Array, es: jax.Array,
         ec: jax.Array, s0: jax.Array) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, ...]]:
    inputs = (q, k, v, b, gam, e0, es, ec, s0)
    bsz, heads, n = q.shape[:3]
    outs = (shape_dtype(v), shape_dtype(s0, (bsz, heads, n) + s0.shape[2:]), shape_dtype(s0))
    o, s_in, s_final = call(_OP, functools.partial(_fwd_kernel, n_chunks=n), inputs, outs, state_pass_tuning)
    return (o, s_final), (q, k, v, b, gam, e0, es, ec, s_in)


def _bwd(res: tuple[jax.Array, ...], cts: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, ...]:
    do, dsf = cts
    inputs = res + (do, dsf)
    outs = tuple(shape_dtype(x) for x in res[:8]) + (shape_dtype(dsf),)
    kernel = functools.partial(_bwd_kernel, n_chunks=do.shape[2])
    return tuple(call(_OP, kernel, inputs, outs, state_pass_tuning))


chunk_core.defvjp(_fwd, _bwd)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def _run(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, g: jax.Array | None, scale: float | None,
         initial_state: jax.Array | None, segment_ids: jax.Array | None,
         chunk_size: int) -> tuple[jax.Array, jax.Array]:
    bsz, _, heads, dk = q.shape
    ops, seqlen = xla.prepare(q, k, v, beta, g, scale, segment_ids, chunk_size)
    s0 = (jnp.zeros((bsz, heads, dk, v.shape[-1]), jnp.float32) if initial_state is None
          else initial_state.astype(jnp.float32))
    o, s_final = chunk_core(*ops, s0)
    o = jnp.moveaxis(o, 1, 3).reshape(bsz, -1, heads, o.shape[-1])[:, :seqlen]
    return o.astype(q.dtype), s_final


def gated_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, *, beta: jax.Array, g: jax.Array | None = None,
                     scale: float | None = None, initial_state: jax.Array | None = None,
                     segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Pallas chunked gated delta rule (interpreted on CPU, Triton on GPU, Mosaic on TPU); same contract as
    `xla.gated_delta_rule`.

    q, k: [B,T,H,K]; v: [B,T,H,V]; beta: [B,T,H]; g: None | [B,T,H] | [B,T,H,K].
    Returns (o [B,T,H,V] in q.dtype, S [B,H,K,V] float32).
    """
    return _run(q, k, v, beta, g, scale, initial_state, segment_ids, chunk_size)
