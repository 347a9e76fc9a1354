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

_HI = jax.lax.Precision.HIGHEST


def segment_starts(segment_ids: jax.Array | None, batch: int, length: int) -> jax.Array:
    """Boolean [B, T]: True where the state resets (a segment start other than position 0)."""
    if segment_ids is None:
        return jnp.zeros((batch, length), dtype=bool)
    prev = jnp.concatenate([segment_ids[:, :1], segment_ids[:, :-1]], axis=1)
    return segment_ids != prev


def gate_rows(g: jax.Array | None, shape: tuple[int, int, int, int]) -> jax.Array:
    """Log-decay as [B, T, H, Kg] float32, Kg = 1 (None / [B,T,H]) or K ([B,T,H,K])."""
    if g is None:
        return jnp.zeros(shape[:3] + (1,), jnp.float32)
    g = g.astype(jnp.float32)
    return g[..., None] if g.ndim == 3 else g


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def gated_delta_rule(q, k, v, *, beta, g=None, scale=None, initial_state=None, segment_ids=None,
                     chunk_size=None):
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

    def step(s, xs):
        q_t, k_t, v_t, b_t, g_t, r_t = xs  # [B,H,K] [B,H,K] [B,H,V] [B,H] [B,H,Kg] [B]
        s = jnp.where(r_t[:, None, None, None], 0.0, s)
        s = jnp.exp(g_t)[..., None] * s
        pred = jnp.einsum("bhkv,bhk->bhv", s, k_t, precision=_HI)
        s = s + (b_t[..., None] * k_t)[..., None] * (v_t - pred)[..., None, :]
        o_t = jnp.einsum("bhkv,bhk->bhv", s, q_t, precision=_HI)
        return s, o_t

    time_major = lambda x: jnp.moveaxis(x, 1, 0)
    xs = (qs, f32(k), f32(v), f32(beta), gr, reset)
    s_final, o = jax.lax.scan(step, s0, tuple(time_major(x) for x in xs))
    return time_major(o).astype(q.dtype), s_final
