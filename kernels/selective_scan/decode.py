"""Single-step selective scan for autoregressive decoding: one token of the recurrence on a float32 state."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.precision import HIGHEST


def selective_scan_step(u: jax.Array, delta: jax.Array, A: jax.Array, B: jax.Array, C: jax.Array, *,
                        D: jax.Array | None = None, state: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """One step: h <- exp(Δ A) ⊙ h + Δ u B; y = h C (+ D u).

    Args:
      u, delta: [B, D_in]; A: [D_in, N] (< 0); B, C: [B, N]; D: [D_in] or None;
      state: [B, D_in, N] or None (zeros: a new sequence).
    Returns:
      y [B, D_in] in u.dtype and the new state [B, D_in, N] float32 (float32 whatever the activation
      dtype, so that a decode cache matches the chunked forward).
    """
    if u.ndim != 2:
        raise ValueError(f"selective_scan_step: `u` has shape {u.shape}, expected [B, D_in]")
    bsz, d_in = u.shape
    if delta.shape != u.shape:
        raise ValueError(f"selective_scan_step: `delta` has shape {delta.shape}, expected {u.shape} = [B, D_in]")
    if A.ndim != 2 or A.shape[0] != d_in:
        raise ValueError(f"selective_scan_step: `A` has shape {A.shape}, expected [D_in, N] = ({d_in}, N)")
    n = A.shape[1]
    for name, z in (("B", B), ("C", C)):
        if z.shape != (bsz, n):
            raise ValueError(f"selective_scan_step: `{name}` has shape {z.shape}, expected {(bsz, n)} = [B, N]")
    if D is not None and D.shape != (d_in,):
        raise ValueError(f"selective_scan_step: `D` has shape {D.shape}, expected {(d_in,)} = [D_in]")
    if state is not None and state.shape != (bsz, d_in, n):
        raise ValueError(f"selective_scan_step: `state` has shape {state.shape}, expected {(bsz, d_in, n)}")
    f32 = lambda z: z.astype(jnp.float32)
    h = jnp.zeros((bsz, d_in, n), jnp.float32) if state is None else f32(state)
    dt = f32(delta)
    h = jnp.exp(dt[..., None] * f32(A)) * h + (dt * f32(u))[..., None] * f32(B)[:, None, :]
    y = jnp.einsum("bdn,bn->bd", h, f32(C), precision=HIGHEST)
    if D is not None:
        y = y + f32(D) * f32(u)
    return y.astype(u.dtype), h
