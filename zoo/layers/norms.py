"""RMSNorm with float32 statistics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


class RMSNorm(nnx.Module):
    """Root-mean-square norm over the last axis: `y = x / sqrt(mean(x²) + eps) · scale`.

    The mean square and the rescaling run in float32 whatever the input dtype (a bfloat16 mean of
    squares loses about three digits); the result is cast back to the input dtype.
    """

    def __init__(self, dim: int, *, eps: float = 1e-6):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: [..., dim] -> [..., dim] in x.dtype."""
        if x.shape[-1] != self.scale.shape[0]:
            raise ValueError(f"x must have last dimension {self.scale.shape[0]}, got shape {x.shape}")
        x32 = x.astype(jnp.float32)
        mean_square = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
        y = x32 * jax.lax.rsqrt(mean_square + self.eps) * self.scale[...]
        return y.astype(x.dtype)
