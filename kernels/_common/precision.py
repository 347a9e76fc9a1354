"""Precision and dtype constants shared by every op.

Float32 matmuls default to TF32 on GPUs (and to bf16 passes on TPUs); the ops' accuracy notes are measured
at full float32, so every matmul that accumulates gates, decays or states asks for `HIGHEST`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

HIGHEST = lax.Precision.HIGHEST
ACCUM_DTYPE = jnp.float32


def einsum_f32(spec: str, *operands: jax.Array) -> jax.Array:
    """`jnp.einsum` at full float32 precision with a float32 result, whatever the operand dtypes."""
    return jnp.einsum(spec, *operands, precision=HIGHEST, preferred_element_type=ACCUM_DTYPE)
