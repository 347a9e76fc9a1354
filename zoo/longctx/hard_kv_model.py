"""Decoding an attention LM through the HARD-KV compressed cache, and its memory accounting.

    scores = calibrate_head_scores(model, calibration_tokens, top_p=0.9)
    lm = HardKVLM(model, scores, HardKVConfig(budget=0.25, top_p=0.9))
    tokens = hard_kv_generate(lm, prompt, max_new_tokens=64, key=key, temperature=0.0)

`HardKVLM` has the decode contract of `icml26zoo.decode` (`cfg`, `init_cache(batch, max_len)`,
`decode(tokens, cache) -> (logits, cache)`), so `icml26zoo.decode.generate` runs it unchanged; the model's
own parameters and blocks (norms, projections, RoPE at the true token position, MLPs, head) are reused and
only the attention over the cache is replaced. A prompt is prefilled in chunks of `interval` tokens, each
preceded by a compression when it would overflow the rows, so a prompt longer than the budget fits.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from icml26zoo.decode import check_cache, generate
from icml26zoo.layers.projections import project_qkv, rope_qk
from icml26zoo.longctx.hard_kv import (
    HardKVConfig,
    append,
    attend,
    cache_rows,
    check_layer_cache,
    compress_cache,
    init_layer_cache,
)
from icml26zoo.longctx.hard_kv_calibrate import HeadScores, check_model, unrolled
from icml26zoo.validation import check_int


@struct.dataclass
class HardKVCache:
    """index: tokens seen (int32 scalar, the next token's position); layers: one HARD-KV layer cache each."""

    index: jax.Array
    layers: tuple
    batch_size: int = struct.field(pytree_node=False)
    max_len: int = struct.field(pytree_node=False)


def token_positions(tokens: Any, cache: HardKVCache) -> jax.Array:
    """Positions [B, T'] int32 (cache.index + i) of tokens [B, T'] int; ValueError on a wrong shape, or on
    overflowing max_len when the index is concrete (under jit the caller keeps index + T' <= max_len)."""
    if not hasattr(tokens, "dtype") or not jnp.issubdtype(tokens.dtype, jnp.integer) or tokens.ndim != 2:
        raise ValueError(f"tokens must be an int array [B, T'], got {getattr(tokens, 'dtype', type(tokens))} "
                         f"{getattr(tokens, 'shape', None)}")
    if tokens.shape[0] != cache.batch_size or (
        not isinstance(cache.index, jax.core.Tracer) and int(cache.index) + tokens.shape[1] > cache.max_len
    ):
        raise ValueError(f"tokens of shape {tokens.shape} do not fit the cache (batch {cache.batch_size}, "
                         f"max_len {cache.max_len})")
    return jnp.broadcast_to(cache.index + jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)


class HardKVLM(nnx.Module):
    """An attention-mixer LM (`icml26zoo.models.lm.DecoderLM`) decoding through HARD-KV compressed caches."""

    def __init__(self, model: nnx.Module, scores: HeadScores, config: HardKVConfig) -> None:
        check_model(model)
        if not isinstance(config, HardKVConfig):
            raise ValueError(f"config must be a HardKVConfig, got {type(config).__name__}")
        if not isinstance(scores, HeadScores):
            raise ValueError(f"scores must be HeadScores from calibrate_head_scores, got {type(scores).__name__}")
        scores.check(model.cfg.num_layers, model.cfg.num_kv_heads)
        self.model = unrolled(model)
        self.cfg = model.cfg
        self.config = config
        # A static tuple, not an array attribute: nnx would otherwise carry it as module state.
        self.temperatures = tuple(tuple(float(t) for t in row) for row in np.asarray(scores.temperature))

    def init_cache(self, batch_size: int, max_len: int | None = None) -> HardKVCache:
        """An empty compressed cache: per layer R = cache_rows(config, max_len) rows per KV head."""
        max_len = self.cfg.max_seq_len if max_len is None else max_len
        check_int("batch_size", batch_size)
        check_int("max_len", max_len)
        rows, cfg = cache_rows(self.config, max_len), self.cfg
        layers = tuple(
            init_layer_cache(batch_size, cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim, rows,
                             self.config.window, jnp.asarray(temps), jnp.dtype(cfg.compute_dtype))
            for temps in self.temperatures
        )
        return HardKVCache(jnp.zeros((), jnp.int32), layers, batch_size, max_len)

    def decode(self, tokens: jax.Array, cache: HardKVCache) -> tuple[jax.Array, HardKVCache]:
        """Appends tokens [B, T'] to the compressed cache; returns (logits [B, T', vocab] float32, new cache).

        Runs chunks of at most `interval` tokens; the max_len overflow check is `decode_positions`'.
        """
        if not isinstance(cache, HardKVCache):
            raise ValueError(f"cache must be a HardKVCache from HardKVLM.init_cache, got {type(cache).__name__}")
        positions = token_positions(tokens, cache)
        expected = jax.eval_shape(lambda: self.init_cache(cache.batch_size, cache.max_len))
        for got, want in zip(cache.layers, expected.layers, strict=True):
            check_layer_cache(got, want)
        x = self.model.embed(tokens).astype(jnp.dtype(self.cfg.compute_dtype))
        chunk = self.config.interval
        outs, layers = [], cache.layers
        for start in range(0, tokens.shape[1], chunk):
            h, layers = self._run_layers(x[:, start:start + chunk], positions[:, start:start + chunk], layers)
            outs.append(h)
        new_cache = cache.replace(index=cache.index + jnp.int32(tokens.shape[1]), layers=layers)
        return self.model.logits_from_hidden(jnp.concatenate(outs, axis=1)), new_cache

    def _run_layers(self, x: jax.Array, positions: jax.Array, caches: tuple) -> tuple[jax.Array, tuple]:
        """The model's blocks on x [B, C, D] with attention through the compressed caches."""
        new_caches = []
        for layer, cache in zip(self.model.layers, caches, strict=True):

            def mix(h: jax.Array, layer: nnx.Module = layer, cache: dict = cache) -> tuple[jax.Array, dict]:
                return self._attention(layer.mixer, h, positions, cache)

            x, new_cache = layer.mixer_residual(x, mix)
            if layer.has_mlp:
                x, _ = layer.mlp_residual(x, lambda h, layer=layer: (layer.mlp(h), None))
            new_caches.append(new_cache)
        return x, tuple(new_caches)

    def _attention(self, mixer: nnx.Module, x: jax.Array, positions: jax.Array, cache: dict) -> tuple[jax.Array, dict]:
        """The attention mixer's projections, compress-if-needed, append, attention, output projection."""
        batch, length = x.shape[:2]
        q, k, v = project_qkv(x, mixer.q_proj, mixer.k_proj, mixer.v_proj, mixer.num_heads, mixer.num_kv_heads,
                              mixer.head_dim)
        if mixer.q_norm is not None:
            q, k = mixer.q_norm(q), mixer.k_norm(k)
        if mixer.position == "rope":
            q, k = rope_qk(q, k, positions, mixer.rope_theta)
        cache = append(compress_cache(cache, self.config, length), q, k, v, positions)
        out = attend(cache, q, positions).astype(mixer.dtype)
        return mixer.o_proj(out.reshape(batch, length, mixer.num_heads * mixer.head_dim)), cache


def hard_kv_decode(lm: HardKVLM, tokens: jax.Array, cache: HardKVCache) -> tuple[jax.Array, HardKVCache]:
    """One jitted decode call through the compressed cache: tokens [B, T'] -> (logits [B, T', vocab], cache)."""
    check_cache(lm, cache, tokens.shape[0])
    graphdef, state = nnx.split(lm)
    return _decode(graphdef, state, tokens, cache)


@jax.jit
def _decode(graphdef: Any, state: Any, tokens: jax.Array, cache: HardKVCache) -> tuple[jax.Array, HardKVCache]:
    return nnx.merge(graphdef, state).decode(tokens, cache)


def hard_kv_generate(lm: HardKVLM, prompt: jax.Array, **kwargs: Any) -> jax.Array:
    """`icml26zoo.decode.generate` through the compressed cache (same arguments and sampling)."""
    if not isinstance(lm, HardKVLM):
        raise ValueError(f"lm must be a HardKVLM, got {type(lm).__name__}")
    return generate(lm, prompt, **kwargs)


def cache_bytes(cache: Any) -> int:
    """Bytes held by a decode cache (every array leaf: K/V rows, masks, positions, query window)."""
    return int(sum(np.dtype(leaf.dtype).itemsize * int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(cache)))


def memory_per_token(model: nnx.Module, lm: HardKVLM, batch_size: int, max_len: int) -> dict[str, float]:
    """Cache bytes per token of max_len, full (model.init_cache) vs compressed (lm.init_cache), and their ratio.

    Shapes only (`jax.eval_shape`): nothing is allocated.
    """
    full = cache_bytes(jax.eval_shape(lambda: model.init_cache(batch_size, max_len)))
    compressed = cache_bytes(jax.eval_shape(lambda: lm.init_cache(batch_size, max_len)))
    per = batch_size * max_len
    return {"full_bytes_per_token": full / per, "compressed_bytes_per_token": compressed / per,
            "ratio": compressed / full}
