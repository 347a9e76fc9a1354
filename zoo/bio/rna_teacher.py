"""TinyRNALM: the small sequence-only masked-LM teacher of FGD (icml26zoo.bio.rna_design), frozen after training.

The paper's teacher is an RNA foundation model (RNA-FM, a BERT-style masked LM); the zoo does not ship it. This
stand-in is a bidirectional pre-norm transformer (icml26zoo.geometric.baseline.Block) over A, C, G, U plus a
MASK token, with learned positions, trained by `train_teacher` (a small pure loop: BERT-style masking of 15% of
the real positions, cross-entropy on them, Adam) on a sequence corpus. Any model with the same interface,
`teacher(s, mask) -> z [B, L, d_T]`, plugs in (RNA-FM would be an optional dependency, never in CI).

`context_embeddings` computes the default teacher_mode="context" embeddings: z_i from a pass in which position i
itself is masked, so z_i carries no identity of s_i (L passes per sequence, computed once per dataset);
teacher_mode="plain" (one unmasked pass) exists only for the leak ablation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.geometric.baseline import Block
from icml26zoo.validation import check_choice, check_int, check_positive

MASK_TOKEN = 4
MASK_RATE = 0.15


class TinyRNALM(nnx.Module):
    """tokens int [B, L] (0..3 bases, 4 MASK), mask [B, L] -> (z [B, L, d], logits [B, L, 4])."""

    def __init__(self, d: int = 64, layers: int = 4, heads: int = 4, max_len: int = 64, *, rngs: nnx.Rngs) -> None:
        check_int("d", d)
        check_int("layers", layers)
        check_int("max_len", max_len)
        self.max_len = max_len
        self.embed = nnx.Embed(5, d, rngs=rngs)
        self.position = nnx.Embed(max_len, d, rngs=rngs)
        self.blocks = nnx.List([Block(d, heads, 2 * d, rngs=rngs) for _ in range(layers)])
        self.norm = nnx.LayerNorm(d, rngs=rngs)
        self.head = nnx.Linear(d, 4, rngs=rngs)

    def __call__(self, tokens: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        if tokens.shape[-1] > self.max_len:
            raise ValueError(f"tokens must have at most max_len = {self.max_len} positions, got {tokens.shape}")
        x = self.embed(tokens) + self.position(jnp.arange(tokens.shape[-1]))[None]
        weights = (mask > 0).astype(jnp.float32)
        for block in self.blocks:
            x = block(x, weights)
        z = self.norm(x)
        return z, self.head(z)


def mlm_loss(model: TinyRNALM, tokens: jax.Array, mask: jax.Array, key: jax.Array) -> jax.Array:
    """Cross-entropy on MASK_RATE of the real positions, replaced by MASK (BERT-style, without the 10/10 split)."""
    chosen = jax.random.bernoulli(key, MASK_RATE, tokens.shape) & (mask > 0)
    _, logits = model(jnp.where(chosen, MASK_TOKEN, tokens), mask)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, tokens)
    chosen = chosen.astype(jnp.float32)
    return jnp.sum(ce * chosen) / jnp.maximum(jnp.sum(chosen), 1.0)


def train_teacher(model: TinyRNALM, sequences: np.ndarray, mask: np.ndarray, *, steps: int, batch_size: int = 64,
                  learning_rate: float = 1e-3, seed: int = 0) -> list[float]:
    """Trains `model` in place on sequences int [E, L] (mask [E, L]) with Adam; returns the loss per step."""
    check_int("steps", steps, minimum=0)
    check_int("batch_size", batch_size)
    check_positive("learning_rate", learning_rate, finite=True)
    optimizer = nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, tokens, mask, key):
        loss, grads = nnx.value_and_grad(mlm_loss)(model, tokens, mask, key)
        optimizer.update(model, grads)
        return loss

    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)
    losses = []
    for index in range(steps):
        rows = rng.integers(0, len(sequences), batch_size)
        loss = step(model, optimizer, jnp.asarray(sequences[rows]), jnp.asarray(mask[rows], jnp.float32),
                    jax.random.fold_in(key, index))
        losses.append(float(loss))
    return losses


def context_embeddings(model: TinyRNALM, sequences: np.ndarray, mask: np.ndarray, *, mode: str = "context",
                       chunk: int = 64) -> np.ndarray:
    """Teacher embeddings float32 [E, L, d] of sequences int [E, L] (0 on padding rows): "context" masks
    position i for z_i (module docstring), "plain" is one unmasked pass (the leak ablation)."""
    check_choice("mode", mode, ("context", "plain"))
    graphdef, state = nnx.split(model)

    @jax.jit
    def embed(state, tokens, mask):
        model = nnx.merge(graphdef, state)
        if mode == "plain":
            return model(tokens, mask)[0]
        length = tokens.shape[1]
        # [b, L(i), L]: copy i has position i masked; z_i is read from copy i.
        masked = jnp.where(jnp.eye(length, dtype=bool)[None], MASK_TOKEN, tokens[:, None, :])
        z = model(masked.reshape(-1, length), jnp.repeat(mask, length, axis=0))[0]
        z = z.reshape(tokens.shape[0], length, length, -1)
        return jnp.einsum("bii...->bi...", z)

    out = [np.asarray(embed(state, jnp.asarray(sequences[i:i + chunk]), jnp.asarray(mask[i:i + chunk], jnp.float32)))
           for i in range(0, len(sequences), chunk)]
    return np.concatenate(out) * (np.asarray(mask) > 0)[..., None]
