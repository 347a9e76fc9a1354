"""SwiGLU feed-forward block."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


class SwiGLU(nnx.Module):
    """`down(silu(gate(x)) * up(x))`, no biases (Shazeer 2020, as in Llama).

    Parameters are float32; `dtype` is the compute dtype the inputs and kernels are cast to.
    """

    def __init__(self, dim: int, hidden_dim: int, *, dtype: jnp.dtype = jnp.float32, rngs: nnx.Rngs) -> None:
        def linear(n_in: int, n_out: int) -> nnx.Linear:
            return nnx.Linear(n_in, n_out, use_bias=False, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

        self.gate = linear(dim, hidden_dim)
        self.up = linear(dim, hidden_dim)
        self.down = linear(hidden_dim, dim)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: [..., D] -> [..., D] in the compute dtype."""
        return self.down(jax.nn.silu(self.gate(x)) * self.up(x))
