"""The one-layer transformer of spec train-16 (RL vs SFT on k-sparse Boolean chains; Lyu, Jia, Cai, Zhu,
arXiv 2511.17852), registered as model "one_layer".

The paper's model adds a learned embedding of each absolute position to the token embedding and applies
one softmax-attention layer and a readout. Learning the chain means finding, for every chain step j, the
absolute parent positions a(j), b(j), so the position must be visible to the query: with rotary positions
alone (the "llama" model) a step's query sees only its own bit, and relative offsets differ from step to
step. Everything after the embedding is the zoo's decoder (`DecoderLM`: cfg.num_layers blocks of cfg.mixer
and the MLP, the final norm and the head), so the spec's model is this one with num_layers=1, num_heads=1,
mixer "attention" with mixer_options (("position", "none"),) (preset `configs/boolean_sft.py`). The exact
parameterisation of the paper's embedding and readout is a reconstruction.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.layers.embed import EMBED_INIT_STD
from icml26zoo.models.block import run_layers
from icml26zoo.models.config import ModelConfig
from icml26zoo.models.lm import DecodeCache, DecoderLM, _check_int_like, _check_tokens, positions_from_segments
from icml26zoo.registry import register_model


@register_model("one_layer")
class OneLayerTransformer(DecoderLM):
    """DecoderLM whose input is token embedding + a learned absolute position embedding [max_seq_len, D].

    Positions (given, or the index inside each segment) must be < cfg.max_seq_len.
    """

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        super().__init__(cfg, rngs=rngs)
        init = jax.nn.initializers.normal(EMBED_INIT_STD)
        self.position_embedding = nnx.Param(init(rngs.params(), (cfg.max_seq_len, cfg.d_model), jnp.float32))

    def _embed(self, tokens: jax.Array, positions: jax.Array) -> jax.Array:
        """tokens, positions [B, T] -> token + position embeddings [B, T, D] in the compute dtype."""
        table = self.position_embedding[...].astype(jnp.dtype(self.cfg.compute_dtype))
        return self.embed(tokens) + jnp.take(table, positions, axis=0)

    def __call__(
        self, tokens: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array | None = None
    ) -> jax.Array:
        """tokens [B, T] int -> logits [B, T, vocab] float32 (segment_ids and positions as in DecoderLM)."""
        _check_tokens(tokens)
        _check_int_like("segment_ids", segment_ids, tokens.shape)
        _check_int_like("positions", positions, tokens.shape)
        if tokens.shape[1] > self.cfg.max_seq_len:
            raise ValueError(f"tokens must have at most max_seq_len = {self.cfg.max_seq_len} positions "
                             f"(the position table), got shape {tokens.shape}")
        if positions is None:
            positions = (
                jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
                if segment_ids is None
                else positions_from_segments(segment_ids)
            )
        x = self._embed(tokens, positions)
        return self.forward_embeddings(x, segment_ids=segment_ids, positions=positions)

    def decode(self, tokens: jax.Array, cache: DecodeCache) -> tuple[jax.Array, DecodeCache]:
        """Appends tokens [B, T'] to the cache; (logits [B, T', vocab] float32, new cache), as DecoderLM."""
        _check_tokens(tokens)
        if not isinstance(cache, DecodeCache):
            raise ValueError(f"cache must be a DecodeCache from init_cache, got {type(cache).__name__}")
        batch, length = tokens.shape
        if batch != cache.batch_size or length > cache.max_len:
            raise ValueError(f"tokens must have shape [B, T'] with B = {cache.batch_size} and "
                             f"T' <= max_len = {cache.max_len} (the cache's), got shape {tokens.shape}")
        limit = min(cache.max_len, self.cfg.max_seq_len)
        if not isinstance(cache.index, jax.core.Tracer) and int(cache.index) + length > limit:
            raise ValueError(f"tokens of shape {tokens.shape} do not fit: the cache holds {int(cache.index)} "
                             f"of {limit} tokens")
        positions = jnp.broadcast_to(cache.index + jnp.arange(length, dtype=jnp.int32), tokens.shape)
        x, layer_caches = run_layers(
            self.layers, self._embed(tokens, positions), cfg=self.cfg, segment_ids=None, positions=positions,
            caches=cache.layers,
        )
        new_cache = cache.replace(index=cache.index + jnp.asarray(length, jnp.int32), layers=layer_caches)
        return self._logits(x), new_cache
