"""The velocity network: a SiLU MLP on the state and a sinusoidal embedding of the time."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.validation import check_int

__all__ = ["VelocityMLP", "time_features"]


def time_features(t: jax.Array, count: int) -> jax.Array:
    """[B, count] sines and cosines of 2π 2^k t, k = 0 .. count/2 - 1, for times t [B] in [0, 1]."""
    check_int("count", count, minimum=2)
    if count % 2:
        raise ValueError(f"count must be even (a sine and a cosine per frequency), got {count}")
    frequencies = 2 * math.pi * 2.0 ** jnp.arange(count // 2, dtype=t.dtype)
    angles = t[:, None] * frequencies
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=1)


class VelocityMLP(nnx.Module):
    """v(z, t): `depth` hidden SiLU layers of `width` on [z, time features]; z [B, dim], t [B] -> [B, dim]."""

    def __init__(self, dim: int, *, width: int = 256, depth: int = 4, time_count: int = 16,
                 rngs: nnx.Rngs) -> None:
        check_int("dim", dim)
        check_int("width", width)
        check_int("depth", depth)
        time_features(jnp.zeros((1,)), time_count)
        self.dim, self.time_count = dim, time_count
        sizes = [dim + time_count] + [width] * depth
        self.hidden = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:], strict=True)])
        self.out = nnx.Linear(width, dim, rngs=rngs)

    def __call__(self, z: jax.Array, t: jax.Array) -> jax.Array:
        if z.ndim != 2 or z.shape[1] != self.dim:
            raise ValueError(f"z must have shape [B, {self.dim}], got shape {z.shape}")
        if t.shape != (z.shape[0],):
            raise ValueError(f"t must have shape ({z.shape[0]},), one time per row of z, got shape {t.shape}")
        h = jnp.concatenate([z, time_features(t, self.time_count)], axis=1)
        for layer in self.hidden:
            h = jax.nn.silu(layer(h))
        return self.out(h)
