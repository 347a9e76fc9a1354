"""Single-step SSD for autoregressive decoding: one token of the recurrence on a float32 state."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.precision import HIGHEST


def ssd_step(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, *,
             state: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """One recurrence step: S <- S diag(exp(a)) + x b^T; y = S c.

    Args:
      x: [B, H, P] (already times dt); a: [B, H] (scalar) or [B, H, N] (diagonal) log-decay, <= 0;
      b, c: [B, H, N]; state: [B, H, P, N] or None (zeros; a new sequence).
    Returns:
      y [B, H, P] in x.dtype and the new state [B, H, P, N] float32 (kept in float32 so that a decode
      cache is bit-stable across steps whatever the activation dtype).
    """
    if x.ndim != 3:
        raise ValueError(f"ssd_step: `x` has shape {x.shape}, expected [B, H, P]")
    bsz, heads, p = x.shape
    if b.ndim != 3 or b.shape[:2] != (bsz, heads):
        raise ValueError(f"ssd_step: `b` has shape {b.shape}, expected [B, H, N] = ({bsz}, {heads}, N)")
    n = b.shape[-1]
    if c.shape != b.shape:
        raise ValueError(f"ssd_step: `c` has shape {c.shape}, expected {b.shape} = b.shape")
    if a.shape not in ((bsz, heads), (bsz, heads, n)):
        raise ValueError(f"ssd_step: `a` has shape {a.shape}, expected {(bsz, heads)} or {(bsz, heads, n)}")
    if state is not None and state.shape != (bsz, heads, p, n):
        raise ValueError(f"ssd_step: `state` has shape {state.shape}, expected {(bsz, heads, p, n)}")
    f32 = lambda z: z.astype(jnp.float32)
    s = jnp.zeros((bsz, heads, p, n), jnp.float32) if state is None else f32(state)
    decay = jnp.exp(f32(a))
    decay = decay[..., None, None] if a.ndim == 2 else decay[..., None, :]
    s = s * decay + f32(x)[..., :, None] * f32(b)[..., None, :]
    y = jnp.einsum("bhpn,bhn->bhp", s, f32(c), precision=HIGHEST)
    return y.astype(x.dtype), s
