"""The mixers' linear projections: float32 parameters computing in the compute dtype, split into heads."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.layers.rope import apply_rope


def linear(n_in: int, n_out: int, *, dtype: Any, rngs: nnx.Rngs, use_bias: bool = False, **kwargs: Any) -> nnx.Linear:
    """x [..., n_in] -> [..., n_out] computed in `dtype`, kernel [n_in, n_out] float32, no bias unless asked.

    `kwargs` go to nnx.Linear (e.g. kernel_init, bias_init).
    """
    return nnx.Linear(n_in, n_out, use_bias=use_bias, dtype=dtype, param_dtype=jnp.float32, rngs=rngs, **kwargs)


def project_heads(x: jax.Array, proj: nnx.Linear, num_heads: int, head_dim: int) -> jax.Array:
    """x [B, T, D] -> proj(x) split into heads, [B, T, num_heads, head_dim]."""
    batch, length = x.shape[:2]
    return proj(x).reshape(batch, length, num_heads, head_dim)


def project_qkv(
    x: jax.Array, q_proj: nnx.Linear, k_proj: nnx.Linear, v_proj: nnx.Linear,
    num_heads: int, num_kv_heads: int, head_dim: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """x [B, T, D] -> q [B, T, num_heads, head_dim], k and v [B, T, num_kv_heads, head_dim] (GQA widths)."""
    q = project_heads(x, q_proj, num_heads, head_dim)
    k = project_heads(x, k_proj, num_kv_heads, head_dim)
    v = project_heads(x, v_proj, num_kv_heads, head_dim)
    return q, k, v


def rope_qk(q: jax.Array, k: jax.Array, positions: jax.Array, theta: float) -> tuple[jax.Array, jax.Array]:
    """RoPE on q [B, T, H, Dh] and k [B, T, Hkv, Dh] at positions [B, T]; shapes and dtypes unchanged."""
    return apply_rope(q, positions, theta=theta), apply_rope(k, positions, theta=theta)
