"""HARD-KV against the full cache on one model: teacher-forced next-token agreement, logit error, rows kept.

`compare_with_full(model, lm, tokens, prompt)` prefills each sequence's first `prompt` tokens through
`HardKVLM.decode` (chunked, compressing as the rows fill), then feeds the remaining tokens one per step under one
`lax.scan`, and compares each step's logits and greedy next token with the full model's on the same prefix. The
`hard_kv` experiment (repro/hard_kv.py) runs it on a trained LM for several budgets, next to the static-budget
baseline at the same memory.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.longctx.hard_kv_model import HardKVLM

__all__ = ["compare_with_full", "teacher_forced"]


@functools.partial(jax.jit, static_argnames=("graphdef",))
def teacher_forced(graphdef: Any, state: Any, prompt: jax.Array, rest: jax.Array, cache: Any) -> tuple:
    """Prefill prompt [B, P], then feed rest [B, N] one token per step: (logits [B, N, V], final cache)."""
    lm = nnx.merge(graphdef, state)
    logits, cache = lm.decode(prompt, cache)

    def step(cache: Any, token: jax.Array) -> tuple[Any, jax.Array]:
        logits, cache = nnx.merge(graphdef, state).decode(token[:, None], cache)
        return cache, logits[:, 0]

    cache, steps = jax.lax.scan(step, cache, rest[:, :-1].T)
    return jnp.concatenate([logits[:, -1:], jnp.swapaxes(steps, 0, 1)], axis=1), cache


def compare_with_full(model: nnx.Module, lm: HardKVLM, tokens: jax.Array, prompt: int) -> dict[str, Any]:
    """Agreement of HARD-KV decoding with the full model on tokens [B, T] after the first `prompt` tokens.

    Returns the greedy next-token agreement, the max and mean |logit difference|, and the rows each
    (layer, KV head) holds at the end, averaged over the batch, [L, Hkv].
    """
    full = model(tokens)[:, prompt - 1:-1]
    graphdef, state = nnx.split(lm)
    cache = lm.init_cache(tokens.shape[0], tokens.shape[1])
    logits, cache = teacher_forced(graphdef, state, tokens[:, :prompt], tokens[:, prompt:], cache)
    error = jnp.abs(logits - full)
    return {
        "agreement": float((logits.argmax(-1) == full.argmax(-1)).mean()),
        "max_logit_error": float(error.max()),
        "mean_logit_error": float(error.mean()),
        "rows_per_head": np.stack([np.asarray(c["valid"].sum(-1).mean(0)) for c in cache.layers]).tolist(),
    }
