"""Single-step gated delta rule for autoregressive decoding (one token, recurrent form).

The decode signature of every recurrent op: `<op>_step(inputs..., *, gates..., state, options) -> (o, state)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.fla_hint import points_to_fla
from icml26zoo.kernels._common.precision import HIGHEST


@points_to_fla("fused_recurrent_gated_delta_rule")
def gated_delta_rule_step(q: jax.Array, k: jax.Array, v: jax.Array, *, beta: jax.Array, g: jax.Array | None = None,
                          state: jax.Array, scale: float | None = None) -> tuple[jax.Array, jax.Array]:
    """One recurrence step.

    Args:
      q, k: [B, H, K]; v: [B, H, V]; beta: [B, H]; g: None | [B, H] | [B, H, K] log-decay (<= 0);
      state: [B, H, K, V]; scale: multiplies q, None means K**-0.5.
    Returns:
      o [B, H, V] in q.dtype, new state [B, H, K, V] float32 (gates and state are always float32, so a
      decode cache carried in float32 is bit-stable across steps).
    """
    if q.ndim != 3 or k.shape != q.shape or v.shape[:2] != q.shape[:2] or beta.shape != q.shape[:2]:
        raise ValueError(
            f"gated_delta_rule_step: expected q, k [B,H,K], v [B,H,V], beta [B,H]; got q {q.shape}, "
            f"k {k.shape}, v {v.shape}, beta {beta.shape}")
    want_state = q.shape + v.shape[-1:]
    if state.shape != want_state:
        raise ValueError(f"gated_delta_rule_step: state has shape {state.shape}, expected {want_state}")
    if g is not None and g.shape not in (q.shape[:2], q.shape):
        raise ValueError(f"gated_delta_rule_step: g has shape {g.shape}, expected {q.shape[:2]} or {q.shape}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    f32 = lambda x: x.astype(jnp.float32)
    s = f32(state)
    if g is not None:
        gr = f32(g)
        s = jnp.exp(gr[..., None, None] if gr.ndim == 2 else gr[..., None]) * s
    kf = f32(k)
    pred = jnp.einsum("bhkv,bhk->bhv", s, kf, precision=HIGHEST)
    s = s + (f32(beta)[..., None] * kf)[..., None] * (f32(v) - pred)[..., None, :]
    o = jnp.einsum("bhkv,bhk->bhv", s, f32(q) * jnp.float32(scale), precision=HIGHEST)
    return o.astype(q.dtype), s
