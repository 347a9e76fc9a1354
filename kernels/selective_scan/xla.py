"""Selective scan in plain XLA (the default path): an associative scan inside each chunk, a `lax.scan`
carrying the [D_in, N] state across chunks.

Why this form and not SSD's pairwise chunk matrices: Mamba1's decay is per (channel, state) and its
"head width" is 1, so the quadratic within-chunk form would build [Q, Q, D_in, N] decay tiles to feed
matmuls with an inner dimension of 1: all the memory of the masked form and none of its matmul payoff.
The linear recurrence h_t = a_t h_{t-1} + b_t is instead solved by `lax.associative_scan` over the pairs
(a_t, b_t) with (a1, b1) ∘ (a2, b2) = (a1 a2, a2 b1 + b2): depth log Q, exact up to rounding.

Numerics (docs/numerics.md): each a_t = exp(Δ_t A) is exponentiated from its own step (≤ 1) and the scan only
multiplies factors ≤ 1, so no exponent is ever a difference of cumsums and nothing can overflow. A segment
reset is a step whose log-decay is set to -inf *before* exp (a_t = 0 exactly; the gradient through the
masked entry is zero, not NaN). Padding steps to a multiple of the chunk have Δ = 0 (a = 1, b = 0).

Memory: the chunk step is wrapped in `jax.checkpoint`, so the backward keeps one [B, D_in, N] state per
chunk and recomputes the chunk's [B, Q, D_in, N] scan, never holding all T of them at once.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels._common.segments import segment_starts
from icml26zoo.kernels.selective_scan.reference import initial, skip


def _combine(left: tuple[jax.Array, ...], right: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    """Composition of two affine maps h -> a h + b (left applied first), each with a flag r: the map's span
    holds a segment reset. a, b: [..., Q, D_in, N]; r: [..., Q, 1, 1] bool.

    A right map whose span holds a reset forgets the left one. Masking with the flag (not with a == 0:
    0 * NaN is NaN) and with `where` on both sides of each product keeps a NaN of an earlier segment out
    of a later one, in the value and in the gradients.
    """
    a1, b1, r1 = left
    a2, b2, r2 = right
    a1 = jnp.where(r2, 0.0, a1)
    b1 = jnp.where(r2, 0.0, b1)
    return jnp.where(r2, 0.0, a1 * a2), jnp.where(r2, b2, a2 * b1 + b2), r1 | r2


@jax.checkpoint
def _chunk(h0: jax.Array, inp: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
    """One chunk. h0 [B, D_in, N]; u, dt [B, Q, D_in]; b, c [B, Q, N]; reset [B, Q] bool; A [D_in, N].

    Returns the state after the chunk and y [B, Q, D_in] float32 (without the D skip).
    """
    u, dt, b, c, reset, a32 = inp
    log_a = dt[..., None] * a32  # [B, Q, D_in, N], <= 0
    log_a = jnp.where(reset[:, :, None, None], -jnp.inf, log_a)  # mask before exp: a reset step has a = 0
    a = jnp.exp(log_a)
    x = (dt * u)[..., None] * b[:, :, None, :]
    acc_a, acc_x, acc_r = lax.associative_scan(_combine, (a, x, reset[:, :, None, None]), axis=1)
    # The carried-in state decayed by the chunk's running product, dropped after a reset (masked on both
    # sides: a NaN carried from an earlier segment must not survive as 0 * NaN).
    h = acc_x + jnp.where(acc_r, 0.0, acc_a * jnp.where(acc_r, 0.0, h0[:, None]))
    y = jnp.einsum("bqdn,bqn->bqd", h, c, precision=HIGHEST)
    return h[:, -1], y


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def selective_scan(u: jax.Array, delta: jax.Array, A: jax.Array, B: jax.Array, C: jax.Array, *,
                   D: jax.Array | None = None, initial_state: jax.Array | None = None,
                   segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Chunked selective scan. u, delta: [B, T, D_in]; A: [D_in, N] (< 0); B, C: [B, T, N];
    D: [D_in] | None; initial_state: [B, D_in, N] | None; segment_ids: [B, T] int | None.

    Returns y [B, T, D_in] in u.dtype and the final state [B, D_in, N] float32 (of each row's last segment).
    """
    bsz, seqlen, d_in = u.shape
    n = A.shape[-1]
    q = chunk_size
    pad = (-seqlen) % q
    nc = (seqlen + pad) // q
    starts = segment_starts(segment_ids, bsz, seqlen)  # padded below with False: padding never resets

    def chunks(z: jax.Array) -> jax.Array:
        """[B, T, ...] -> [nc, B, Q, ...] (float32 unless bool), zero-padded: Δ = 0 makes padding the identity."""
        z = z if z.dtype == bool else z.astype(jnp.float32)
        z = jnp.pad(z, ((0, 0), (0, pad)) + ((0, 0),) * (z.ndim - 2))
        return jnp.moveaxis(z.reshape((bsz, nc, q) + z.shape[2:]), 1, 0)

    a32 = A.astype(jnp.float32)
    step = lambda h, inp: _chunk(h, (*inp, a32))
    h_fin, y = lax.scan(step, initial(initial_state, bsz, d_in, n), tuple(chunks(z) for z in (u, delta, B, C, starts)))
    y = jnp.moveaxis(y, 0, 1).reshape(bsz, nc * q, d_in)[:, :seqlen]
    return skip(y, u, D).astype(u.dtype), h_fin
