"""Single-step momentum delta rule for autoregressive decoding (one token, recurrent form).

The decode signature of every recurrent op: `<op>_step(inputs..., *, gates..., state, options) -> (o, state)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.precision import HIGHEST


def _check(q: jax.Array, k: jax.Array, v: jax.Array, p: jax.Array, gates: dict[str, jax.Array],
           state: tuple[jax.Array, jax.Array]) -> None:
    """Raises ValueError naming the argument, its shape and the expected shape."""
    if q.ndim != 3:
        raise ValueError(f"momentum_delta_rule_step: `q` has shape {q.shape}, expected [B, H, K]")
    for name, x in (("k", k), ("p", p)):
        if x.shape != q.shape:
            raise ValueError(f"momentum_delta_rule_step: `{name}` has shape {x.shape}, expected {q.shape}")
    if v.ndim != 3 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"momentum_delta_rule_step: `v` has shape {v.shape}, expected {q.shape[:2]} + (V,)")
    for name, x in gates.items():
        if x.shape != q.shape[:2]:
            raise ValueError(f"momentum_delta_rule_step: `{name}` has shape {x.shape}, expected {q.shape[:2]}")
    want = q.shape + v.shape[-1:]
    if len(state) != 2 or any(x.shape != want for x in state):
        raise ValueError(f"momentum_delta_rule_step: `state` has shapes {[x.shape for x in state]}, "
                         f"expected a pair (S, M) of {want}")


def momentum_delta_rule_step(q: jax.Array, k: jax.Array, v: jax.Array, p: jax.Array, *, g: jax.Array, log_mu: jax.Array,
                             beta: jax.Array, eta: jax.Array, state: tuple[jax.Array, jax.Array],
                             scale: float | None = None) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """One recurrence step.

    Args:
      q, k, p: [B, H, K]; v: [B, H, V]; g, log_mu, beta, eta: [B, H] (g, log_mu log-decays <= 0);
      state: (S, M) each [B, H, K, V]; scale: multiplies q, None means K**-0.5.
    Returns:
      o [B, H, V] in q.dtype, new (S, M) each [B, H, K, V] float32 (gates and states are always float32,
      so a decode cache carried in float32 is bit-stable across steps).
    """
    gates = dict(g=g, log_mu=log_mu, beta=beta, eta=eta)
    _check(q, k, v, p, gates, state)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    f32 = lambda x: x.astype(jnp.float32)
    g, log_mu, beta, eta = (f32(x)[..., None, None] for x in gates.values())
    s, m = (f32(x) for x in state)
    e = jnp.einsum("bhkv,bhk->bhv", s, f32(p), precision=HIGHEST) - f32(v)
    m = jnp.exp(log_mu) * m + (eta * f32(k)[..., None]) * e[..., None, :]
    s = jnp.exp(g) * s - beta * m
    o = jnp.einsum("bhkv,bhk->bhv", s, f32(q) * jnp.float32(scale), precision=HIGHEST)
    return o.astype(q.dtype), (s, m)
