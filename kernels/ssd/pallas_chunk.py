"""Pallas kernels for SSD's chunk-to-chunk state pass: forward and hand-written backward behind `jax.custom_vjp`.

Split of work:
- XLA, every chunk at once: cast, pad and move heads forward (`_chunk.to_heads_first`), the masked decays
  of each chunk (`_chunk.decays`: stable segsums and cumsums, which neither Triton nor Mosaic lowers in a
  kernel) and the chunk's weights W = `_chunk.pair(c, b, decays)` [Q, Q]. After the backward kernel:
  (db, dc) from dW (`_chunk.pair_bwd`) plus the state terms, and the decay gradient (`_chunk.decay_grad`).
- Pallas, one program per (batch, head) (`_common.pallas.call`), the chunks in order with the [P, N] state h
  carried in registers; only 2-D matmuls, elementwise maths and `where` masks, so one kernel body lowers to
  Triton and Mosaic alike:

      y  = W x + (c eg) h^T              h' = carry h + x^T (b er)

  The forward saves the state entering every chunk; the backward walks the chunks in reverse carrying dh.

Segment isolation: eg, er and carry are 0 exactly where a term crosses a segment boundary, and the kernels
select with `where` on them instead of multiplying, so a non-finite state never reaches another segment.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.pallas import call, dot, shape_dtype, state_pass_tuning
from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels.ssd import _chunk

_OP = "ssd"


def _dot_tn(a: jax.Array, b: jax.Array) -> jax.Array:
    """a^T b, contracting the leading (chunk-row) axis of both."""
    return lax.dot_general(a, b, (((0,), (0,)), ((), ())), precision=HIGHEST, preferred_element_type=jnp.float32)


def _dot_nt(a: jax.Array, b: jax.Array) -> jax.Array:
    """a b^T, contracting the trailing axis of both."""
    return lax.dot_general(a, b, (((1,), (1,)), ((), ())), precision=HIGHEST, preferred_element_type=jnp.float32)


def _edges(c: jax.Array, eg: jax.Array, b: jax.Array, er: jax.Array, x: jax.Array) -> tuple[jax.Array, ...]:
    """The state-facing operands of one chunk, zero (by `where`) on rows outside the state's segment.

    c, b [Q, N]; eg, er [Q, Na]; x [Q, P]. Returns c eg, b er [Q, N], x [Q, P] masked to the chunk's last
    segment, and the row mask [Q, 1] of the incoming state's segment.
    """
    reads_state = jnp.max(eg, axis=1, keepdims=True) > 0.0
    feeds_state = jnp.max(er, axis=1, keepdims=True) > 0.0
    ce = jnp.where(eg > 0.0, c * eg, 0.0)
    be = jnp.where(er > 0.0, b * er, 0.0)
    return ce, be, jnp.where(feeds_state, x, 0.0), reads_state


def _fwd_kernel(w_ref: Any, x_ref: Any, c_ref: Any, eg_ref: Any, b_ref: Any, er_ref: Any, carry_ref: Any,
                s0_ref: Any, y_ref: Any, hin_ref: Any, sfin_ref: Any, *, n_chunks: int) -> None:
    """One (batch, head). Per chunk: w [Q, Q]; x [Q, P]; c, b [Q, N]; eg, er [Q, Na]; carry [1, Na].

    s0 [P, N] -> y [nc, Q, P], h_in [nc, P, N], final state [P, N].
    """

    def body(i: jax.Array, h: jax.Array) -> jax.Array:
        x = x_ref[i]
        ce, be, x_last, reads_state = _edges(c_ref[i], eg_ref[i], b_ref[i], er_ref[i], x)
        y_ref[i] = dot(w_ref[i], x) + jnp.where(reads_state, _dot_nt(ce, h), 0.0)
        hin_ref[i] = h
        carry = carry_ref[i]
        return jnp.where(carry > 0.0, carry * h, 0.0) + _dot_tn(x_last, be)

    sfin_ref[...] = lax.fori_loop(0, n_chunks, body, s0_ref[...])


def _bwd_kernel(w_ref: Any, x_ref: Any, c_ref: Any, eg_ref: Any, b_ref: Any, er_ref: Any, carry_ref: Any,
                hin_ref: Any, dy_ref: Any, dsfin_ref: Any, dw_ref: Any, dx_ref: Any, dce_ref: Any, dbe_ref: Any,
                ds0_ref: Any, *, n_chunks: int) -> None:
    """One (batch, head), chunks in reverse; dh [P, N] carried from the final-state cotangent.

    Writes dW [Q, Q], dx [Q, P] and the cotangents of (c eg), (b er) [Q, N] per chunk, and dS0 [P, N].
    """

    def body(j: jax.Array, dh: jax.Array) -> jax.Array:
        i = n_chunks - 1 - j
        x, dy, h, carry = x_ref[i], dy_ref[i], hin_ref[i], carry_ref[i]
        ce, be, x_last, reads_state = _edges(c_ref[i], eg_ref[i], b_ref[i], er_ref[i], x)
        feeds_state = jnp.max(er_ref[i], axis=1, keepdims=True) > 0.0
        dw_ref[i] = _dot_nt(dy, x)
        dx_ref[i] = _dot_tn(w_ref[i], dy) + jnp.where(feeds_state, _dot_nt(be, dh), 0.0)
        dce_ref[i] = jnp.where(reads_state, dot(dy, h), 0.0)
        dbe_ref[i] = jnp.where(feeds_state, dot(x_last, dh), 0.0)
        dy_in = jnp.where(reads_state, dy, 0.0)
        return jnp.where(carry > 0.0, carry * dh, 0.0) + _dot_tn(dy_in, ce)

    ds0_ref[...] = lax.fori_loop(0, n_chunks, body, dsfin_ref[...])


def _chunked(z: jax.Array, q: int) -> jax.Array:
    """[B, H, Tp, D] -> [B, H, nc, Q, D]."""
    return z.reshape(z.shape[:2] + (z.shape[2] // q, q) + z.shape[3:])


def _unchunk(z: jax.Array) -> jax.Array:
    """[B, H, nc, Q, D] -> [B, H, Tp, D]."""
    return z.reshape(z.shape[:2] + (-1,) + z.shape[4:])


def _chunk_decays(a: jax.Array, k: jax.Array, q: int) -> _chunk.Decays:
    """Decays of every chunk: a [B, H, Tp, Na], k [B, Tp] -> `_chunk.Decays` with leading dims [B, H, nc]."""
    kc = k.reshape(k.shape[0], 1, -1, q)
    kprev = jnp.concatenate([jnp.zeros_like(kc[:, :, :1, 0]), kc[:, :, :-1, -1]], axis=2)
    return _chunk.decays(_chunked(a, q), kc, kprev)


def _kernel_inputs(x: jax.Array, b: jax.Array, c: jax.Array, d: _chunk.Decays, q: int) -> tuple[jax.Array, ...]:
    """(W, x, c, eg, b, er, carry) per chunk, [B, H, nc, ...]; carry as [B, H, nc, 1, Na]."""
    bc, cc = _chunked(b, q), _chunked(c, q)
    w = _chunk.pair(cc, bc, d)
    return w, _chunked(x, q), cc, d.eg, bc, d.er, d.carry[..., None, :]


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def chunk_core(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, k: jax.Array, s0: jax.Array,
               q: int) -> tuple[jax.Array, jax.Array]:
    """Chunked SSD on prepared operands (`_chunk.to_heads_first`): y [B,H,Tp,P], final state [B,H,P,N]."""
    return _core_fwd(x, a, b, c, k, s0, q)[0]


def _core_fwd(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, k: jax.Array, s0: jax.Array,
              q: int) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, ...]]:
    bsz, heads, tp, p = x.shape
    n_chunks = tp // q
    inputs = _kernel_inputs(x, b, c, _chunk_decays(a, k, q), q)
    outs = (shape_dtype(x, (bsz, heads, n_chunks, q, p)), shape_dtype(s0, (bsz, heads, n_chunks) + s0.shape[2:]),
            shape_dtype(s0))
    kernel = functools.partial(_fwd_kernel, n_chunks=n_chunks)
    y, h_in, s_fin = call(_OP, kernel, inputs + (s0,), outs, state_pass_tuning)
    return (_unchunk(y), s_fin), (x, a, b, c, k, h_in, s_fin)


def _core_bwd(q: int, res: tuple[jax.Array, ...], cts: tuple[jax.Array, jax.Array]) -> tuple[jax.Array | None, ...]:
    x, a, b, c, k, h_in, s_fin = res
    dy, ds_fin = cts
    d = _chunk_decays(a, k, q)
    inputs = _kernel_inputs(x, b, c, d, q)
    w, xc, cc, _, bc = inputs[:5]
    outs = (shape_dtype(w), shape_dtype(xc), shape_dtype(cc), shape_dtype(bc), shape_dtype(s_fin))
    kernel = functools.partial(_bwd_kernel, n_chunks=xc.shape[2])
    dw, dx, dce, dbe, ds0 = call(_OP, kernel, inputs + (h_in, _chunked(dy, q), ds_fin), outs, state_pass_tuning)
    dc, db = _chunk.pair_bwd(cc, bc, d, dw)
    dc = _unchunk(dc + jnp.where(d.eg > 0.0, dce * d.eg, 0.0))
    db = _unchunk(db + jnp.where(d.er > 0.0, dbe * d.er, 0.0))
    da = _chunk.decay_grad(b, c, db, dc, k, s_fin, ds_fin, a.shape[-1])
    return _unchunk(dx), da, db, dc, None, ds0


chunk_core.defvjp(_core_fwd, _core_bwd)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def ssd(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, *, initial_state: jax.Array | None = None,
        segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Pallas chunked SSD (interpreted on CPU, Triton on GPU, Mosaic on TPU); same contract as `xla.ssd`."""
    bsz, seqlen, heads, p = x.shape
    xh, ah, bh, ch, k = _chunk.to_heads_first(x, a, b, c, segment_ids, chunk_size)
    s0 = (jnp.zeros((bsz, heads, p, b.shape[-1]), jnp.float32) if initial_state is None
          else initial_state.astype(jnp.float32))
    y, s_fin = chunk_core(xh, ah, bh, ch, k, s0, chunk_size)
    return jnp.moveaxis(y, 1, 2)[:, :seqlen].astype(x.dtype), s_fin
