"""The iterative unmasking sampler of a masked diffusion LM (confidence-ordered, as in PUMA's `sampling.py`).

Start from the prompt with every other position [MASK]; at step s of S, with m masked positions left, reveal
the ceil(m / (S − s)) masked positions of highest confidence (max_v p_θ(v | x_t)), writing the model's token
there: argmax at temperature 0, otherwise a Gumbel-max draw at that temperature. After S steps nothing is
masked; prompt positions are never changed. Fixed shapes throughout: one jitted program per (B, T, S).
Conventions (mask id = vocab_size − 1, bidirectional model, sinusoidal positions): `losses.masked_diffusion`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.masked_diffusion import denoiser_logits, mask_id, require_bidirectional, reveal_ranked
from icml26zoo.validation import check_int


def unmask_schedule(masked: jax.Array, step: jax.Array, num_steps: int) -> jax.Array:
    """How many of the masked [B] positions step `step` reveals: ceil(masked / (num_steps − step))."""
    left = num_steps - step
    return (masked + left - 1) // left


def _step(model: nnx.Module, rng: jax.Array, tokens: jax.Array, step: jax.Array, num_steps: int,
          temperature: float) -> jax.Array:
    """One unmasking step on tokens [B, T] (masked = mask id)."""
    noise_key, tie_key = jax.random.split(jax.random.fold_in(rng, step))
    log_probs = jax.nn.log_softmax(denoiser_logits(model, tokens, None, None), axis=-1)
    if temperature > 0:
        choice_scores = log_probs / temperature + jax.random.gumbel(noise_key, log_probs.shape)
    else:
        choice_scores = log_probs
    choice = jnp.argmax(choice_scores, axis=-1)
    confidence = jnp.max(log_probs, axis=-1)
    masked = tokens == mask_id(model)
    counts = unmask_schedule(jnp.sum(masked, axis=1), step, num_steps)
    return jnp.where(reveal_ranked(confidence, masked, counts, tie_key), choice, tokens)


@nnx.jit(static_argnames=("num_steps", "temperature"))
def _sample(model: nnx.Module, prompt: jax.Array, prompt_mask: jax.Array, rng: jax.Array, num_steps: int,
            temperature: float) -> jax.Array:
    tokens = jnp.where(prompt_mask, prompt, mask_id(model))
    # A Python loop: S is small and static, and nnx modules do not cross lax.fori_loop without a split.
    for step in range(num_steps):
        tokens = _step(model, rng, tokens, jnp.asarray(step, jnp.int32), num_steps, temperature)
    return tokens


def sample(model: nnx.Module, prompt: jax.Array, prompt_mask: jax.Array, *, num_steps: int, rng: jax.Array,
           temperature: float = 0.0) -> jax.Array:
    """Fills every non-prompt position of prompt [B, T] int (prompt_mask [B, T] bool, True = given) in
    `num_steps` confidence-ordered unmasking steps; returns tokens [B, T] with no mask id left.

    Raises ValueError for a non-bidirectional model, num_steps < 1 or > T, a negative or non-finite temperature,
    mismatched shapes, or a prompt token equal to the mask id.
    """
    require_bidirectional(model)
    check_int("num_steps", num_steps)
    prompt, prompt_mask = jnp.asarray(prompt), jnp.asarray(prompt_mask, jnp.bool_)
    if prompt.ndim != 2 or prompt_mask.shape != prompt.shape:
        raise ValueError(f"prompt and prompt_mask must both have shape [B, T], got {prompt.shape} and "
                         f"{prompt_mask.shape}")
    if num_steps > prompt.shape[1]:
        raise ValueError(f"num_steps must be at most T = {prompt.shape[1]}, got {num_steps}")
    if not (isinstance(temperature, int | float) and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if bool(jnp.any(prompt_mask & ((prompt < 0) | (prompt >= mask_id(model))))):
        raise ValueError(f"prompt tokens must lie in [0, {mask_id(model)}) (the mask id is vocab_size - 1 = "
                         f"{mask_id(model)}), got values in [{int(prompt.min())}, {int(prompt.max())}]")
    return _sample(model, prompt.astype(jnp.int32), prompt_mask, rng, num_steps, float(temperature))
