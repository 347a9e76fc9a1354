"""Time-axis layout helpers shared by the chunked and blocked paths (`[B, T, H, ...]` inputs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def pad_time(x: jax.Array, pad: int, mode: str = "constant") -> jax.Array:
    """Pads axis 1 (time) of x `[B, T, ...]` by `pad` steps at the end (`mode` as in `jnp.pad`)."""
    widths = [(0, 0)] * x.ndim
    widths[1] = (0, pad)
    return jnp.pad(x, widths, mode=mode)


def padded_length(length: int, block: int) -> int:
    """The smallest multiple of `block` that is ≥ `length`."""
    return -(-length // block) * block
