"""Reference (oracle) gated delta rule: the step-by-step recurrence as a float32 `lax.scan`.

Per head, with state S [K, V] (key-major) and scale folded into q:

    S <- exp(g_t) * S                      (g scalar per head, or per key channel: scales the rows of S)
    S <- S + beta_t k_t (v_t - S^T k_t)^T  (delta-rule write)
    o_t = S^T (scale * q_t)

With `segment_ids`, S is reset to zero at every segment start after the first (a position whose id
differs from its predecessor), so nothing flows across a packed-sequence boundary.

This path is meant to be read, and to be the oracle for every other implementation; it is slow.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.chunks import gate_rows
from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels._common.segments import segment_starts


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def gated_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, *, beta: jax.Array, g: jax.Array | None = None,
                     scale: float | None = None, initial_state: jax.Array | None = None,
                     segment_ids: jax.Array | None = None,
                     chunk_size: int | None = None) -> tuple[jax.Array, jax.Array]:
    """Gated delta rule by plain recurrence.

    Args:
      q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H]; g: None | [B, T, H] | [B, T, H, K] (log-decay).
      scale: multiplies q; None means K**-0.5. initial_state: [B, H, K, V] or None (zeros).
      segment_ids: [B, T] int or None. chunk_size: ignored (accepted so every path has one signature).
    Returns:
      o [B, T, H, V] in q.dtype, final state [B, H, K, V] float32.
    """
    del chunk_size
    bsz, seqlen, heads, dk = q.shape
    dv = v.shape[-1]
    scale = dk**-0.5 if scale is None else scale
    f32 = lambda x: x.astype(jnp.float32)
    qs = f32(q) * jnp.float32(scale)
    gr = gate_rows(g, q.shape)
    reset = segment_starts(segment_ids, bsz, seqlen)
    s0 = jnp.zeros((bsz, heads, dk, dv), jnp.float32) if initial_state is None else f32(initial_state)

    def step(s: jax.Array, xs: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        q_t, k_t, v_t, b_t, g_t, r_t = xs  # [B,H,K] [B,H,K] [B,H,V] [B,H] [B,H,Kg] [B]
        s = jnp.where(r_t[:, None, None, None], 0.0, s)
        s = jnp.exp(g_t)[..., None] * s
        pred = jnp.einsum("bhkv,bhk->bhv", s, k_t, precision=HIGHEST)
        s = s + (b_t[..., None] * k_t)[..., None] * (v_t - pred)[..., None, :]
        o_t = jnp.einsum("bhkv,bhk->bhv", s, q_t, precision=HIGHEST)
        return s, o_t

    time_major = lambda x: jnp.moveaxis(x, 1, 0)
    xs = (qs, f32(k), f32(v), f32(beta), gr, reset)
    s_final, o = jax.lax.scan(step, s0, tuple(time_major(x) for x in xs))
    return time_major(o).astype(q.dtype), s_final
