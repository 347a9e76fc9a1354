"""Reference (oracle) momentum delta rule (MDN): the step-by-step recurrence as a float32 `lax.scan`.

Per head, with states S, M [K, V] (key-major) and scale folded into q (MDN, arXiv 2605.05838):

    e_t = S^T p_t - v_t                          (prediction error of the pre-update state)
    M  <- exp(log_mu_t) M + (eta_t k_t) e_t^T    (momentum buffer)
    S  <- exp(g_t) S - beta_t M                  (state follows the momentum)
    o_t = S^T (scale * q_t)

With `segment_ids`, both S and M are reset to zero at every segment start after the first (a position
whose id differs from its predecessor), so nothing flows across a packed-sequence boundary.

This path is meant to be read, and to be the oracle for every other implementation; it is slow.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels._common.segments import segment_starts


def initial_states(initial_state: tuple[jax.Array, jax.Array] | None,
                   shape: tuple[int, int, int, int]) -> tuple[jax.Array, jax.Array]:
    """(S0, M0) float32 [B, H, K, V]; None means zeros for both."""
    if initial_state is None:
        zeros = jnp.zeros(shape, jnp.float32)
        return zeros, zeros
    s0, m0 = initial_state
    return s0.astype(jnp.float32), m0.astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def momentum_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, p: jax.Array, *, g: jax.Array, log_mu: jax.Array,
                        beta: jax.Array, eta: jax.Array, scale: float | None = None,
                        initial_state: tuple[jax.Array, jax.Array] | None = None,
                        segment_ids: jax.Array | None = None,
                        chunk_size: int | None = None) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Momentum delta rule by plain recurrence.

    Args:
      q, k, p: [B, T, H, K]; v: [B, T, H, V]; g, log_mu, beta, eta: [B, T, H] (g, log_mu log-decays).
      scale: multiplies q; None means K**-0.5. initial_state: (S0, M0) each [B, H, K, V], or None.
      segment_ids: [B, T] int or None. chunk_size: ignored (accepted so every path has one signature).
    Returns:
      o [B, T, H, V] in q.dtype, (S, M) final states [B, H, K, V] float32.
    """
    del chunk_size
    bsz, seqlen, heads, dk = q.shape
    scale = dk**-0.5 if scale is None else scale
    f32 = lambda x: x.astype(jnp.float32)
    reset = segment_starts(segment_ids, bsz, seqlen)
    state0 = initial_states(initial_state, (bsz, heads, dk, v.shape[-1]))

    def step(state: tuple[jax.Array, jax.Array],
             xs: tuple[jax.Array, ...]) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        q_t, k_t, p_t, v_t, g_t, lm_t, b_t, eta_t, r_t = xs  # [B,H,K]x3 [B,H,V] [B,H]x4 [B]
        s, m = (jnp.where(r_t[:, None, None, None], 0.0, x) for x in state)
        e = jnp.einsum("bhkv,bhk->bhv", s, p_t, precision=HIGHEST) - v_t
        m = jnp.exp(lm_t)[..., None, None] * m + (eta_t[..., None] * k_t)[..., None] * e[..., None, :]
        s = jnp.exp(g_t)[..., None, None] * s - b_t[..., None, None] * m
        o_t = jnp.einsum("bhkv,bhk->bhv", s, q_t, precision=HIGHEST)
        return (s, m), o_t

    time_major = lambda x: jnp.moveaxis(x, 1, 0)
    xs = (f32(q) * jnp.float32(scale), f32(k), f32(p), f32(v), f32(g), f32(log_mu), f32(beta), f32(eta),
          reset)
    final, o = jax.lax.scan(step, state0, tuple(time_major(x) for x in xs))
    return time_major(o).astype(q.dtype), final
