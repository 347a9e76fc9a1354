"""The selective-scan oracle (Mamba1): the step-by-step float32 recurrence as a `lax.scan` over time.

Per step, per (batch, channel d, state n): h <- exp(Δ_t[d] A[d, n]) h + Δ_t[d] u_t[d] B_t[n];
y_t[d] = Σ_n h[d, n] C_t[n] + D[d] u_t[d]. At every segment start after position 0 the state is reset
to zero first (the returned final state is that of each row's last segment).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels._common.segments import segment_starts


def initial(initial_state: jax.Array | None, bsz: int, d_in: int, n: int) -> jax.Array:
    """The float32 starting state [B, D_in, N] (zeros when None)."""
    if initial_state is None:
        return jnp.zeros((bsz, d_in, n), jnp.float32)
    return initial_state.astype(jnp.float32)


def skip(y: jax.Array, u: jax.Array, D: jax.Array | None) -> jax.Array:
    """y [B, T, D_in] float32 plus the D skip D[d] u_t[d] (nothing when D is None)."""
    return y if D is None else y + D.astype(jnp.float32) * u.astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def selective_scan(u: jax.Array, delta: jax.Array, A: jax.Array, B: jax.Array, C: jax.Array, *,
                   D: jax.Array | None = None, initial_state: jax.Array | None = None,
                   segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Recurrent selective scan (chunk_size is accepted for a uniform signature and ignored).

    u, delta: [B, T, D_in]; A: [D_in, N] (< 0); B, C: [B, T, N]; D: [D_in] | None;
    initial_state: [B, D_in, N] | None; segment_ids: [B, T] int | None.
    Returns y [B, T, D_in] in u.dtype and the final state [B, D_in, N] float32.
    """
    del chunk_size
    bsz, seqlen, d_in = u.shape
    n = A.shape[-1]
    tfirst = lambda z: jnp.moveaxis(z.astype(jnp.float32), 1, 0)  # time first for the scan
    a32 = A.astype(jnp.float32)
    starts = segment_starts(segment_ids, bsz, seqlen)

    def step(h: jax.Array, inp: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        ut, dt, bt, ct, reset = inp
        h = jnp.where(reset[:, None, None], 0.0, h)
        h = jnp.exp(dt[..., None] * a32) * h + (dt * ut)[..., None] * bt[:, None, :]
        return h, jnp.einsum("bdn,bn->bd", h, ct, precision=HIGHEST)

    inputs = (tfirst(u), tfirst(delta), tfirst(B), tfirst(C), jnp.moveaxis(starts, 1, 0))
    h_fin, y = lax.scan(step, initial(initial_state, bsz, d_in, n), inputs)
    return skip(jnp.moveaxis(y, 0, 1), u, D).astype(u.dtype), h_fin
