"""Feed-forward blocks: SwiGLU (the default) and the two-matrix GELU MLP (`ModelConfig.mlp_activation`)."""

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


class GeluMLP(nnx.Module):
    """`down(gelu(up(x)))`, no biases (the GPT-2 / original-Transformer MLP with the exact erf GELU).

    Two matrices instead of SwiGLU's three: hidden width 4·D has the parameters of SwiGLU at 8/3·D.
    """

    def __init__(self, dim: int, hidden_dim: int, *, dtype: jnp.dtype = jnp.float32, rngs: nnx.Rngs) -> None:
        def linear(n_in: int, n_out: int) -> nnx.Linear:
            return nnx.Linear(n_in, n_out, use_bias=False, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

        self.up = linear(dim, hidden_dim)
        self.down = linear(hidden_dim, dim)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: [..., D] -> [..., D] in the compute dtype."""
        return self.down(jax.nn.gelu(self.up(x), approximate=False))


def build_mlp(
    activation: str, dim: int, hidden_dim: int, *, dtype: jnp.dtype = jnp.float32, rngs: nnx.Rngs
) -> nnx.Module:
    """The feed-forward block named by `activation`: "swiglu" -> SwiGLU, "gelu" -> GeluMLP."""
    if activation == "swiglu":
        return SwiGLU(dim, hidden_dim, dtype=dtype, rngs=rngs)
    if activation == "gelu":
        return GeluMLP(dim, hidden_dim, dtype=dtype, rngs=rngs)
    raise ValueError(f"mlp activation must be one of ['swiglu', 'gelu'], got {activation!r}")
