"""The Pallas (B, H)-grid wrapper shared by the chunked state passes: one program per (batch, head).

Every array handed to `call` is `[B, H, ...]` (or `[B, ...]` when all heads read it); a program sees its
`[...]` block. The kernels run with
`interpret=True` (CPU); the ops' `api.py` refuses "pallas" on backends where they are not yet checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from icml26zoo.kernels._common.precision import HIGHEST


def dot(a: jax.Array, b: jax.Array) -> jax.Array:
    """a [M, K] @ b [K, N] at full precision with a float32 result, inside a kernel."""
    return jnp.dot(a, b, precision=HIGHEST, preferred_element_type=jnp.float32)


def shape_dtype(x: jax.Array, shape: tuple[int, ...] | None = None) -> jax.ShapeDtypeStruct:
    """A float32 output spec of x's shape (or of `shape`)."""
    return jax.ShapeDtypeStruct(x.shape if shape is None else shape, jnp.float32)


def call(kernel: Callable[..., None], inputs: Sequence[jax.Array], out_shapes: Sequence[jax.ShapeDtypeStruct],
         shared_by_heads: Sequence[int] = ()) -> list[jax.Array]:
    """`pl.pallas_call` of kernel with grid (B, H); inputs and outputs are [B, H, ...], blocks [...].

    The inputs at positions `shared_by_heads` are [B, ...] instead (one array read by every head).
    """
    bsz, heads = inputs[0].shape[:2]

    def spec(shape: tuple[int, ...], per_row: bool = False) -> pl.BlockSpec:
        lead = 1 if per_row else 2
        rest = tuple(shape[lead:])
        squeeze = (pl.squeezed,) * lead
        if per_row:
            return pl.BlockSpec(squeeze + rest, lambda b, h: (b,) + (0,) * len(rest))
        return pl.BlockSpec(squeeze + rest, lambda b, h: (b, h) + (0,) * len(rest))

    return pl.pallas_call(
        kernel, grid=(bsz, heads),
        in_specs=[spec(x.shape, i in shared_by_heads) for i, x in enumerate(inputs)],
        out_specs=[spec(s.shape) for s in out_shapes],
        out_shape=out_shapes, interpret=True,
    )(*inputs)
