"""The decoding loop: prefill a prompt, then single-token decode steps, the whole loop under one `jax.jit`.

Works for every registered LM: the model's `init_cache(batch, max_len)` fixes the cache shape (a KV cache for
attention, a recurrent state for the linear mixers) and `decode(tokens, cache) -> (logits, cache)` advances it.
A *logits processor* changes the next-token logits before sampling and may carry its own decode state (e.g.
the caches of auxiliary models that must see exactly the same tokens): see `LogitsProcessor`.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.decode.sampling import check_sampling, sample_logits
from icml26zoo.validation import check_int

__all__ = ["LogitsProcessor", "check_cache", "generate"]


class LogitsProcessor(Protocol):
    """An `nnx.Module` that rewrites next-token logits during decoding, with a state advanced in lockstep.

    `init_state(batch_size, max_len)` returns its decode state (a pytree; e.g. auxiliary models' caches);
    `__call__(logits [B, T, V], tokens [B, T], state) -> (logits [B, T, V], state)` receives the model's
    logits for the tokens just fed (the prompt at prefill, one token per step after) and returns the logits
    to sample from. Its parameters travel through `jit` with it (`nnx.split`); plain attributes are static.
    """

    def init_state(self, batch_size: int, max_len: int) -> Any: ...

    def __call__(self, logits: jax.Array, tokens: jax.Array, state: Any) -> tuple[jax.Array, Any]: ...


def check_cache(model: nnx.Module, cache: Any, batch_size: int) -> None:
    """ValueError unless `cache` has exactly the structure, shapes and dtypes of
    `model.init_cache(batch_size, cache.max_len)` (it may hold tokens already)."""
    max_len = getattr(cache, "max_len", None)
    if getattr(cache, "batch_size", None) != batch_size or not isinstance(max_len, int):
        raise ValueError(
            f"cache must be a decode cache from model.init_cache({batch_size}, max_len), got "
            f"{type(cache).__name__} with batch_size {getattr(cache, 'batch_size', None)!r}"
        )
    expected = jax.eval_shape(lambda: model.init_cache(batch_size, max_len))
    got = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(jnp.shape(leaf), jnp.result_type(leaf)), cache)
    if jax.tree.structure(got) != jax.tree.structure(expected) or jax.tree.leaves(got) != jax.tree.leaves(expected):
        raise ValueError(
            f"cache has the wrong shape for this model: expected leaves "
            f"{[(x.shape, str(x.dtype)) for x in jax.tree.leaves(expected)]} (model.init_cache({batch_size}, "
            f"{max_len})), got {[(x.shape, str(x.dtype)) for x in jax.tree.leaves(got)]}"
        )


def _step_logits(graphdef, params, processor_def, processor_state, tokens, cache, aux):
    """Feeds tokens [B, T] to the model (and the processor): (last-position logits [B, V], cache, aux)."""
    logits, cache = nnx.merge(graphdef, params).decode(tokens, cache)
    if processor_def is not None:
        logits, aux = nnx.merge(processor_def, processor_state)(logits, tokens, aux)
    return logits[:, -1], cache, aux


@functools.partial(
    jax.jit, static_argnames=("graphdef", "processor_def", "max_new_tokens", "max_len", "temperature", "top_k",
                              "top_p"),
)
def _generate(
    graphdef, params, processor_def, processor_state, prompt, key, cache, *, max_new_tokens, max_len, temperature,
    top_k, top_p,
) -> jax.Array:
    """Prefill, then a `lax.scan` of decode steps; every cache keeps its shape, so this compiles once."""
    batch = prompt.shape[0]
    aux = None if processor_def is None else nnx.merge(processor_def, processor_state).init_state(batch, max_len)
    if cache is None:
        cache = nnx.merge(graphdef, params).init_cache(batch, max_len)
    sample = functools.partial(sample_logits, temperature=temperature, top_k=top_k, top_p=top_p)
    logits, cache, aux = _step_logits(graphdef, params, processor_def, processor_state, prompt, cache, aux)
    keys = jax.random.split(key, max_new_tokens)
    first = sample(logits, keys[0])

    def step(carry, step_key):
        token, cache, aux = carry
        logits, cache, aux = _step_logits(graphdef, params, processor_def, processor_state, token[:, None], cache,
                                          aux)
        return (sample(logits, step_key), cache, aux), token

    (last, _, _), emitted = jax.lax.scan(step, (first, cache, aux), keys[1:])  # emitted: [N - 1, B]
    return jnp.concatenate([emitted.T, last[:, None]], axis=1)


def generate(
    model: nnx.Module,
    prompt: jax.Array,
    *,
    max_new_tokens: int,
    key: jax.Array,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_len: int | None = None,
    processor: LogitsProcessor | None = None,
    cache: Any = None,
) -> jax.Array:
    """Continues prompt [B, P] int by max_new_tokens tokens; returns them, [B, max_new_tokens] int32.

    The prompt is prefilled in one `decode` call, then each step feeds the previous token. Sampling follows
    `icml26zoo.decode.sampling` (temperature 0 = greedy; top_k; top_p). The cache holds max_len tokens
    (default P + max_new_tokens). `processor` (a `LogitsProcessor`, e.g. Divergence Decoding) rewrites the
    logits before sampling. `cache` continues a cache that already holds a prefix (from
    `model.init_cache(B, max_len)` and `model.decode`); it cannot be combined with a processor, whose own
    state starts empty. Compiled once per (shapes, sampling settings, processor structure).
    """
    if not hasattr(prompt, "dtype") or not jnp.issubdtype(prompt.dtype, jnp.integer) or prompt.ndim != 2:
        raise ValueError(
            f"prompt must be an integer array of shape [B, P], got {getattr(prompt, 'dtype', type(prompt))} "
            f"with shape {getattr(prompt, 'shape', None)}"
        )
    check_int("max_new_tokens", max_new_tokens)
    check_sampling(temperature, top_k, top_p, model.cfg.vocab_size)
    batch, prompt_len = prompt.shape
    start = 0
    if cache is not None:
        if processor is not None:
            raise ValueError("cache must be None when a processor is given: the processor's state starts empty, "
                             "so both must prefill the same full prompt")
        check_cache(model, cache, batch)
        start, max_len = int(cache.index), cache.max_len
    needed = start + prompt_len + max_new_tokens
    max_len = needed if max_len is None else max_len
    if check_int("max_len", max_len) < needed:
        raise ValueError(
            f"max_len = {max_len} cannot hold {start} cached tokens, a prompt of shape {tuple(prompt.shape)} and "
            f"{max_new_tokens} new tokens"
        )
    graphdef, params = nnx.split(model, nnx.Param)
    processor_def, processor_state = (None, None) if processor is None else nnx.split(processor)
    return _generate(
        graphdef, params, processor_def, processor_state, prompt.astype(jnp.int32), key, cache,
        max_new_tokens=max_new_tokens, max_len=max_len, temperature=float(temperature), top_k=top_k,
        top_p=None if top_p is None else float(top_p),
    )
