"""Pallas chunk kernels for SSD: forward and hand-written backward behind `jax.custom_vjp`.

Split of work:
- XLA: cast, pad and move heads forward (`_chunk.to_heads_first`), and after the backward kernel the
  decay gradient (`_chunk.decay_grad`), which needs no kernel (see there).
- Pallas, one program per (batch, head), GPU-style (`_common.pallas.call`, a (B, H) grid): the chunks in
  order, each computed by `_chunk.chunk_forward` (decays masked before exp, stable segsum), the [P, N]
  state carried in registers. The forward saves the state entering every chunk; the backward walks the
  chunks in reverse, recomputes the chunk's decays and applies `_chunk.chunk_backward`, carrying dS.

Only run and tested with `interpret=True` on CPU (api.py refuses "pallas" elsewhere): the in-kernel
einsums with batch dims and cumsums have not been lowered and checked on a GPU/TPU backend.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common.pallas import call, shape_dtype
from icml26zoo.kernels.ssd import _chunk

# The int32 segment counts (input 4 of both kernels) are [B, Tp], read by every head.
_SEGMENT_COUNTS = (4,)


def _fwd_kernel(x_ref: Any, a_ref: Any, b_ref: Any, c_ref: Any, k_ref: Any, s0_ref: Any, y_ref: Any, hin_ref: Any,
                sfin_ref: Any, *, q: int) -> None:
    """One (batch, head). x [Tp, P]; a [Tp, Na]; b, c [Tp, N]; k [Tp]; s0 [P, N] -> y, h_in [nc, P, N]."""

    def body(i: int, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        h, kprev = carry
        rows = pl.ds(i * q, q)
        k = k_ref[rows]
        y, h_new = _chunk.chunk_forward(h, x_ref[rows, :], a_ref[rows, :], b_ref[rows, :], c_ref[rows, :],
                                        k, kprev)
        y_ref[rows, :] = y
        hin_ref[i] = h
        return h_new, k[q - 1]

    h, _ = lax.fori_loop(0, x_ref.shape[0] // q, body, (s0_ref[...], jnp.int32(0)))
    sfin_ref[...] = h


def _bwd_kernel(x_ref: Any, a_ref: Any, b_ref: Any, c_ref: Any, k_ref: Any, hin_ref: Any, dy_ref: Any, dsfin_ref: Any,
                dx_ref: Any, db_ref: Any, dc_ref: Any, ds0_ref: Any, *, q: int) -> None:
    """One (batch, head), chunks in reverse; dS [P, N] carried from the final-state cotangent."""
    n_chunks = x_ref.shape[0] // q

    def body(j: int, dh: jax.Array) -> jax.Array:
        i = n_chunks - 1 - j
        rows = pl.ds(i * q, q)
        before = k_ref[pl.ds(jnp.maximum(i * q - 1, 0), 1)][0]
        kprev = jnp.where(i > 0, before, jnp.int32(0))
        dx, db, dc, dh_in = _chunk.chunk_backward(
            hin_ref[i], x_ref[rows, :], a_ref[rows, :], b_ref[rows, :], c_ref[rows, :], k_ref[rows], kprev,
            dy_ref[rows, :], dh)
        dx_ref[rows, :] = dx
        db_ref[rows, :] = db
        dc_ref[rows, :] = dc
        return dh_in

    ds0_ref[...] = lax.fori_loop(0, n_chunks, body, dsfin_ref[...])


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def chunk_core(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, k: jax.Array, s0: jax.Array,
               q: int) -> tuple[jax.Array, jax.Array]:
    """Chunked SSD on prepared operands (`_chunk.to_heads_first`): y [B,H,Tp,P], final state [B,H,P,N]."""
    return _core_fwd(x, a, b, c, k, s0, q)[0]


def _core_fwd(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, k: jax.Array, s0: jax.Array,
              q: int) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, ...]]:
    bsz, heads, tp, p = x.shape
    outs = (shape_dtype(x), shape_dtype(s0, (bsz, heads, tp // q) + s0.shape[2:]), shape_dtype(s0))
    y, h_in, s_fin = call(functools.partial(_fwd_kernel, q=q), (x, a, b, c, k, s0), outs, _SEGMENT_COUNTS)
    return (y, s_fin), (x, a, b, c, k, h_in, s_fin)


def _core_bwd(q: int, res: tuple[jax.Array, ...], cts: tuple[jax.Array, jax.Array]) -> tuple[jax.Array | None, ...]:
    x, a, b, c, k, h_in, s_fin = res
    dy, ds_fin = cts
    outs = (shape_dtype(x), shape_dtype(b), shape_dtype(c), shape_dtype(s_fin))
    dx, db, dc, ds0 = call(functools.partial(_bwd_kernel, q=q), (x, a, b, c, k, h_in, dy, ds_fin), outs,
                          _SEGMENT_COUNTS)
    da = _chunk.decay_grad(b, c, db, dc, k, s_fin, ds_fin, a.shape[-1])
    return dx, da, db, dc, None, ds0


chunk_core.defvjp(_core_fwd, _core_bwd)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def ssd(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, *, initial_state: jax.Array | None = None,
        segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Pallas (interpret-mode) chunked SSD; same contract and returns as `xla.ssd`."""
    bsz, seqlen, heads, p = x.shape
    xh, ah, bh, ch, k = _chunk.to_heads_first(x, a, b, c, segment_ids, chunk_size)
    s0 = (jnp.zeros((bsz, heads, p, b.shape[-1]), jnp.float32) if initial_state is None
          else initial_state.astype(jnp.float32))
    y, s_fin = chunk_core(xh, ah, bh, ch, k, s0, chunk_size)
    return jnp.moveaxis(y, 1, 2)[:, :seqlen].astype(x.dtype), s_fin
