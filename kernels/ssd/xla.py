"""Chunked SSD in plain XLA (the default path), following the 4-step ssd_minimal algorithm of
Mamba2 (Dao & Gu, arXiv 2405.21060).

Within a chunk: the quadratic masked form with pairwise decays exp(sum_{s<r<=t} a_r) (stable segsum,
masked before exp). Between chunks: the [P, N] state is passed by a `lax.scan` over chunks. T is padded
to a multiple of the chunk with identity steps (a = 0, x = b = c = 0). Everything runs in float32.

- Scalar decay (Mamba2): all chunks at once ([B, H, nc, Q, Q] weights), only the state pass is a scan.
- Diagonal decay: the pairwise decay is per state channel. To hold at most one chunk's tiles per
  (batch, head) ([Q/16, 16, 16, N] and [Q/16, Q/16, 16, N], see `_chunk.decays`), each chunk is computed
  inside the scan by `_chunk.chunk_forward`, and the backward is hand-written (`_diagonal_bwd`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.precision import einsum_f32
from icml26zoo.kernels.ssd import _chunk


def _chunked(z: jax.Array, q: int) -> jax.Array:
    """[B, H, Tp, D] -> [B, H, nc, Q, D]."""
    return z.reshape(z.shape[:2] + (z.shape[2] // q, q) + z.shape[3:])


def _counts_per_chunk(k: jax.Array, q: int) -> tuple[jax.Array, jax.Array]:
    """k [B, Tp] -> (k [B, 1, nc, Q], kprev [B, 1, nc]): counts, and the count just before each chunk."""
    kc = k.reshape(k.shape[0], 1, -1, q)
    kprev = jnp.concatenate([jnp.zeros_like(kc[:, :, :1, 0]), kc[:, :, :-1, -1]], axis=2)
    return kc, kprev


def _scalar(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, kc: jax.Array, kprev: jax.Array,
            s0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Scalar decay, chunks vectorized. x [B,H,nc,Q,P]; a [B,H,nc,Q,1]; b, c [B,H,nc,Q,N]."""
    d = _chunk.decays(a, kc, kprev)
    y = einsum_f32("...ts,...sp->...tp", _chunk.pair(c, b, d), x)
    states = einsum_f32("...sp,...sn->...pn", x, b * d.er)  # each chunk's own contribution [B,H,nc,P,N]

    def step(h: jax.Array, inp: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        carry_c, state_c = inp
        return carry_c[..., None, :] * h + state_c, h

    move = lambda z: jnp.moveaxis(z, 2, 0)
    s_fin, h_in = lax.scan(step, s0, (move(d.carry), move(states)))
    y = y + einsum_f32("...tn,...pn->...tp", c * d.eg, jnp.moveaxis(h_in, 0, 2))
    return y, s_fin


def _unchunk(z: jax.Array) -> jax.Array:
    """[B, H, nc, Q, D] -> [B, H, Tp, D]."""
    return z.reshape(z.shape[:2] + (-1,) + z.shape[4:])


@jax.custom_vjp
def _diagonal(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, kc: jax.Array, kprev: jax.Array,
              s0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Diagonal decay, one chunk per scan step (operands as in `_scalar`, a [B,H,nc,Q,N]).

    Forward and a hand-written backward (reverse scan of `_chunk.chunk_backward`, decay gradient by
    `_chunk.decay_grad`): the pairwise tiles are recomputed per chunk, never stored for all chunks, and
    the backward is ~4x faster on CPU than autodiff of the scan.
    """
    return _diagonal_fwd(x, a, b, c, kc, kprev, s0)[0]


def _diagonal_fwd(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, kc: jax.Array, kprev: jax.Array,
                  s0: jax.Array) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, ...]]:
    def step(h: jax.Array, inp: tuple[jax.Array, ...]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        y, h_new = _chunk.chunk_forward(h, *inp)
        return h_new, (y, h)

    move = lambda z: jnp.moveaxis(z, 2, 0)
    s_fin, (y, h_in) = lax.scan(step, s0, tuple(move(z) for z in (x, a, b, c, kc, kprev)))
    return (jnp.moveaxis(y, 0, 2), s_fin), (x, a, b, c, kc, kprev, h_in, s_fin)


def _diagonal_bwd(res: tuple[jax.Array, ...], cts: tuple[jax.Array, jax.Array]) -> tuple[jax.Array | None, ...]:
    x, a, b, c, kc, kprev, h_in, s_fin = res
    dy, ds_fin = cts
    move = lambda z: jnp.moveaxis(z, 2, 0)

    def step(dh: jax.Array, inp: tuple[jax.Array, ...]) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
        h, *chunk, dy_c = inp
        dx, db, dc, dh_in = _chunk.chunk_backward(h, *chunk, dy_c, dh)
        return dh_in, (dx, db, dc)

    ops = (h_in,) + tuple(move(z) for z in (x, a, b, c, kc, kprev, dy))
    ds0, grads = lax.scan(step, ds_fin, ops, reverse=True)
    dx, db, dc = (jnp.moveaxis(g, 0, 2) for g in grads)
    k = kc.reshape(kc.shape[0], -1)
    da = _chunk.decay_grad(_unchunk(b), _unchunk(c), _unchunk(db), _unchunk(dc), k, s_fin, ds_fin, a.shape[-1])
    return dx, da.reshape(a.shape), db, dc, None, None, ds0


_diagonal.defvjp(_diagonal_fwd, _diagonal_bwd)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def ssd(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, *, initial_state: jax.Array | None = None,
        segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Chunked SSD. x: [B,T,H,P]; a: [B,T,H] or [B,T,H,N] (<= 0); b, c: [B,T,H,N];
    initial_state: [B,H,P,N] | None; segment_ids: [B,T] int | None.

    Returns y [B,T,H,P] in x.dtype and the final state [B,H,P,N] float32 (of each row's last segment).
    """
    bsz, seqlen, heads, p = x.shape
    q = chunk_size
    xh, ah, bh, ch, k = _chunk.to_heads_first(x, a, b, c, segment_ids, q)
    s0 = (jnp.zeros((bsz, heads, p, b.shape[-1]), jnp.float32) if initial_state is None
          else initial_state.astype(jnp.float32))
    kc, kprev = _counts_per_chunk(k, q)
    path = _scalar if a.ndim == 3 else _diagonal
    y, s_fin = path(*(_chunked(z, q) for z in (xh, ah, bh, ch)), kc, kprev, s0)
    y = jnp.moveaxis(y.reshape(bsz, heads, -1, p), 1, 2)[:, :seqlen]
    return y.astype(x.dtype), s_fin
