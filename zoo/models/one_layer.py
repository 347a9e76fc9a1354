"""The one-layer transformer of the RL vs SFT paper (k-sparse Boolean chains; Lyu, Jia, Cai, Zhu,
arXiv 2511.17852), registered as model "one_layer".

The paper's model adds a learned embedding of each absolute position to the token embedding and applies
one softmax-attention layer and a readout. Learning the chain means finding, for every chain step j, the
absolute parent positions a(j), b(j), so the position must be visible to the query: with rotary positions
alone (the "llama" model) a step's query sees only its own bit, and relative offsets differ from step to
step. Everything after the embedding is the zoo's decoder (`DecoderLM`: cfg.num_layers blocks of cfg.mixer
and the MLP, the final norm and the head), so the spec's model is this one with num_layers=1, num_heads=1,
mixer "attention" with mixer_options (("position", "none"),) (preset `configs/boolean_sft.py`); the table's
size is model option `max_positions`. The exact
parameterisation of the paper's embedding and readout is a reconstruction.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.layers.embed import EMBED_INIT_STD
from icml26zoo.models.block import run_layers
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.models.lm import (
    DecodeCache,
    DecoderLM,
    check_token_arrays,
    check_tokens,
    decode_positions,
    positions_from_segments,
)
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int

FIELD = MODEL_OPTIONS_FIELD


@dataclasses.dataclass(frozen=True)
class OneLayerOptions:
    """The one_layer model's options (ModelConfig.model_options)."""

    # Rows P of the learned position table [P, D]: positions 0 .. P - 1 (not tied to max_seq_len, so the
    # parameter count does not depend on the longest sequence).
    max_positions: int = 256

    def __post_init__(self) -> None:
        check_int(f"{FIELD}: one_layer option 'max_positions'", self.max_positions)


def one_layer_options(cfg: ModelConfig) -> OneLayerOptions:
    """cfg.model_options as OneLayerOptions; ValueError naming model.model_options."""
    return parse_model_options(OneLayerOptions, cfg, owner="one_layer model")


@register_model("one_layer")
class OneLayerTransformer(DecoderLM):
    """DecoderLM whose input is token embedding + a learned absolute position embedding [max_positions, D].

    Positions (given, or the index inside each segment) must be < max_positions (model_options); a longer
    row raises ValueError, given positions are not checked under jit.
    """

    options_class = OneLayerOptions
    # The conformance harness's case (tests/zoo/test_conformance.py): the spec's shape, one layer, one head.
    CONFORMANCE_CONFIGS = ({"mixer": "attention", "num_layers": 1, "num_heads": 1, "num_kv_heads": 1,
                            "mixer_options": (("position", "none"),)},)

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.max_positions = one_layer_options(cfg).max_positions
        super().__init__(cfg, rngs=rngs)
        init = jax.nn.initializers.normal(EMBED_INIT_STD)
        self.position_embedding = nnx.Param(init(rngs.params(), (self.max_positions, cfg.d_model), jnp.float32))

    def _embed(self, tokens: jax.Array, positions: jax.Array) -> jax.Array:
        """tokens, positions [B, T] -> token + position embeddings [B, T, D] in the compute dtype."""
        table = self.position_embedding[...].astype(jnp.dtype(self.cfg.compute_dtype))
        return self.embed(tokens) + jnp.take(table, positions, axis=0)

    def __call__(
        self, tokens: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array | None = None
    ) -> jax.Array:
        """tokens [B, T] int -> logits [B, T, vocab] float32 (segment_ids and positions as in DecoderLM)."""
        check_tokens(tokens)
        check_token_arrays(tokens.shape, segment_ids=segment_ids, positions=positions)
        if tokens.shape[1] > self.max_positions:
            raise ValueError(f"tokens must have at most max_positions = {self.max_positions} positions "
                             f"(the position table, model.model_options), got shape {tokens.shape}")
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
        positions = decode_positions(tokens, cache)
        length = tokens.shape[1]
        if not isinstance(cache.index, jax.core.Tracer) and int(cache.index) + length > self.max_positions:
            raise ValueError(f"tokens of shape {tokens.shape} do not fit: positions beyond max_positions = "
                             f"{self.max_positions} (model.model_options) after {int(cache.index)} tokens")
        x, layer_caches = run_layers(
            self.layers, self._embed(tokens, positions), cfg=self.cfg, segment_ids=None, positions=positions,
            caches=cache.layers,
        )
        new_cache = cache.replace(index=cache.index + jnp.asarray(length, jnp.int32), layers=layer_caches)
        return self.logits_from_hidden(x), new_cache
