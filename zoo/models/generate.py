"""Autoregressive sampling with a decode cache: temperature, top-k, greedy at temperature 0."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx


def sample_logits(logits: jax.Array, key: jax.Array, *, temperature: float, top_k: int | None) -> jax.Array:
    """logits [B, V] float32 -> tokens [B] int32.

    temperature 0 is greedy (argmax). top_k keeps the k largest logits (ties with the k-th included)
    and samples from the renormalized softmax of logits / temperature over them.
    """
    if temperature == 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    if top_k is not None:
        kth_largest = jax.lax.top_k(logits, top_k)[0][:, -1:]  # [B, 1]
        # Masked to -inf before the softmax inside categorical, so excluded tokens have probability 0.
        logits = jnp.where(logits < kth_largest, -jnp.inf, logits)
    return jax.random.categorical(key, logits / temperature, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "max_len", "temperature", "top_k"))
def _generate(
    graphdef: nnx.GraphDef, params: nnx.State, prompt: jax.Array, key: jax.Array, *, max_new_tokens: int,
    max_len: int, temperature: float, top_k: int | None,
) -> jax.Array:
    """The whole loop under one jit: prefill the prompt, then a `lax.scan` of single-token decode steps."""
    model = nnx.merge(graphdef, params)
    cache = model.init_cache(prompt.shape[0], max_len)
    logits, cache = model.decode(prompt, cache)
    keys = jax.random.split(key, max_new_tokens)
    first = sample_logits(logits[:, -1], keys[0], temperature=temperature, top_k=top_k)

    def step(carry, step_key):
        token, cache = carry
        step_model = nnx.merge(graphdef, params)
        step_logits, cache = step_model.decode(token[:, None], cache)
        next_token = sample_logits(step_logits[:, -1], step_key, temperature=temperature, top_k=top_k)
        return (next_token, cache), token

    (last, _), emitted = jax.lax.scan(step, (first, cache), keys[1:])  # emitted: [N - 1, B]
    return jnp.concatenate([emitted.T, last[:, None]], axis=1)


def generate(
    model: nnx.Module,
    prompt: jax.Array,
    *,
    max_new_tokens: int,
    key: jax.Array,
    temperature: float = 1.0,
    top_k: int | None = None,
    max_len: int | None = None,
) -> jax.Array:
    """Samples max_new_tokens continuations of prompt [B, P] int; returns the new tokens [B, max_new_tokens].

    Each step feeds the previous token through `model.decode` (prompt prefilled in one call). The cache
    holds max_len tokens (default P + max_new_tokens). Compiled once per (shapes, temperature, top_k).
    """
    if not hasattr(prompt, "dtype") or not jnp.issubdtype(prompt.dtype, jnp.integer) or prompt.ndim != 2:
        raise ValueError(
            f"prompt must be an integer array of shape [B, P], got {getattr(prompt, 'dtype', type(prompt))} "
            f"with shape {getattr(prompt, 'shape', None)}"
        )
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    vocab_size = model.cfg.vocab_size
    if top_k is not None and not (isinstance(top_k, int) and 1 <= top_k <= vocab_size):
        raise ValueError(f"top_k must be None or an int in [1, {vocab_size}], got {top_k!r}")
    needed = prompt.shape[1] + max_new_tokens
    max_len = needed if max_len is None else max_len
    if max_len < needed:
        raise ValueError(
            f"max_len = {max_len} cannot hold prompt of shape {prompt.shape} plus {max_new_tokens} new tokens"
        )
    graphdef, params = nnx.split(model, nnx.Param)
    return _generate(
        graphdef,
        params,
        prompt.astype(jnp.int32),
        key,
        max_new_tokens=max_new_tokens,
        max_len=max_len,
        temperature=float(temperature),
        top_k=top_k,
    )
