"""Token embedding whose table can double as the output head (`attend`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

# GPT-2 / Llama initialization scale for the embedding table (and a tied head).
EMBED_INIT_STD = 0.02


class Embedding(nnx.Module):
    """A float32 table [vocab, D]; lookups and `attend` run in the compute dtype `dtype`."""

    def __init__(self, vocab_size: int, dim: int, *, dtype: jnp.dtype = jnp.float32, rngs: nnx.Rngs) -> None:
        self.dtype = dtype
        init = jax.nn.initializers.normal(EMBED_INIT_STD)
        self.embedding = nnx.Param(init(rngs.params(), (vocab_size, dim), jnp.float32))

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """tokens: [B, T] int -> [B, T, D] in the compute dtype."""
        if not jnp.issubdtype(tokens.dtype, jnp.integer):
            raise ValueError(
                f"tokens must be an integer array, got dtype {tokens.dtype} shape {tokens.shape}"
            )
        return jnp.take(self.embedding[...], tokens, axis=0).astype(self.dtype)

    def attend(self, x: jax.Array) -> jax.Array:
        """Tied output head. x: [B, T, D] -> logits [B, T, vocab] in float32.

        The matmul runs in the compute dtype and accumulates in float32 (bfloat16 logits would round
        the softmax inputs to about 3 significant digits).
        """
        table = self.embedding[...].astype(self.dtype)
        return jnp.einsum("btd,vd->btv", x.astype(self.dtype), table, preferred_element_type=jnp.float32)
