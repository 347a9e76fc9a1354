"""The SSD oracle: the step-by-step float32 recurrence as a `lax.scan` over time.

Per step (state S [P, N] per batch and head): S <- S diag(exp(a_t)) + x_t b_t^T; y_t = S c_t. A scalar a_t
scales all of S. At every segment start after position 0 the state is reset to zero first.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels._common.segments import segment_counts


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def ssd(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, *, initial_state: jax.Array | None = None,
        segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Recurrent SSD (chunk_size is accepted for a uniform signature and ignored).

    x: [B,T,H,P]; a: [B,T,H] or [B,T,H,N] log-decays; b, c: [B,T,H,N]; initial_state: [B,H,P,N] | None;
    segment_ids: [B,T] int | None. Returns y [B,T,H,P] in x.dtype and the final state [B,H,P,N] float32.
    """
    del chunk_size
    bsz, seqlen, heads, p = x.shape
    n = b.shape[-1]
    f32 = lambda z: jnp.moveaxis(z.astype(jnp.float32), 1, 0)  # time first for the scan
    a32 = a.astype(jnp.float32)
    a32 = a32[..., None] if a.ndim == 3 else a32  # [B,T,H,Na]
    counts = segment_counts(segment_ids, bsz, seqlen)
    starts = jnp.concatenate([jnp.zeros((bsz, 1), bool), counts[:, 1:] != counts[:, :-1]], axis=1)
    s0 = (jnp.zeros((bsz, heads, p, n), jnp.float32) if initial_state is None
          else initial_state.astype(jnp.float32))

    def step(s: jax.Array, inp: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        xt, at, bt, ct, reset = inp
        s = jnp.where(reset[:, None, None, None], 0.0, s)
        s = s * jnp.exp(at)[:, :, None, :] + xt[..., :, None] * bt[..., None, :]
        return s, jnp.einsum("bhpn,bhn->bhp", s, ct, precision=HIGHEST)

    s_fin, y = lax.scan(step, s0, (f32(x), f32(a32), f32(b), f32(c), jnp.moveaxis(starts, 1, 0)))
    return jnp.moveaxis(y, 0, 1).astype(x.dtype), s_fin
