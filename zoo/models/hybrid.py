"""Hybrid stacks ("hybrid"): each layer its own registered mixer, from a pattern string (Liao et al., "A Provable
Expressiveness Hierarchy in Hybrid Linear-Full Attention", arXiv 2602.01763).

Model option `pattern` lists mixer names separated by commas, e.g. "gated_deltanet,gated_deltanet,attention":
layer i runs mixer pattern[i mod len(pattern)] (cfg.num_layers must be a multiple of the pattern's length, so a
short pattern repeats), each followed by the usual MLP sublayer, as in the paper's hybrids of linear-attention
layers (any recurrent mixer: GDN, Mamba, DeltaNet, ...) and full (softmax) attention. cfg.mixer_options go to the
layers whose mixer is cfg.mixer; the other mixers take their defaults. The empty pattern (the default) means
cfg.mixer in every layer.

A pattern of one mixer is that mixer's plain stack, the "llama" model with the same parameters (scanned or
unrolled as cfg.scan_layers says). Layers of different types cannot share one scanned parameter stack, so a
mixed pattern needs cfg.scan_layers=False and runs its layers in a Python loop. Each layer keeps its own decode
cache (a KV cache for attention, a recurrent state for a linear mixer), so decoding works for any mix.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx

from icml26zoo.layers.embed import Embedding
from icml26zoo.layers.norms import build_norm
from icml26zoo.models.block import Block, build_layers
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.models.lm import FINAL_NORM_PLACEMENTS, DecoderLM, _head_init
from icml26zoo.registry import MIXERS, register_model

FIELD = MODEL_OPTIONS_FIELD


@dataclasses.dataclass(frozen=True)
class HybridOptions:
    """The hybrid model's options (ModelConfig.model_options): the comma-separated mixer pattern."""

    pattern: str = ""

    def mixers(self, default: str = "attention") -> tuple[str, ...]:
        """The pattern's mixer names (the empty pattern: `default`); ValueError naming the field for an empty
        name or an unknown mixer."""
        if not self.pattern.strip():
            return (default,)
        names = tuple(name.strip() for name in self.pattern.split(","))
        if not all(names):
            raise ValueError(
                f"{FIELD} option 'pattern' must be comma-separated registered mixer names such as "
                f"'gated_deltanet,attention', got {self.pattern!r}"
            )
        for position, name in enumerate(names):
            if name not in MIXERS:
                raise ValueError(
                    f"{FIELD} option 'pattern' names unknown mixer {name!r} at position {position} "
                    f"(pattern {self.pattern!r}); valid mixers: {MIXERS.names()}"
                )
        return names


def layer_mixers(cfg: ModelConfig) -> tuple[str, ...]:
    """The mixer of each of cfg.num_layers layers (the pattern repeated); ValueError naming the field."""
    options = parse_model_options(HybridOptions, cfg, owner="hybrid model")
    names = options.mixers(cfg.mixer)
    if cfg.num_layers % len(names):
        raise ValueError(
            f"num_layers must be a multiple of the {FIELD} pattern's length {len(names)} ({options.pattern!r}), "
            f"got num_layers={cfg.num_layers}"
        )
    if cfg.scan_layers and len(set(names)) > 1:
        raise ValueError(
            f"scan_layers must be False for a hybrid pattern of different mixers ({options.pattern!r}: they cannot "
            "share one scanned parameter stack), got True"
        )
    return names * (cfg.num_layers // len(names))


def layer_config(cfg: ModelConfig, mixer: str) -> ModelConfig:
    """cfg for one layer of `mixer`: cfg.mixer_options only where the mixer is cfg.mixer."""
    return dataclasses.replace(cfg, mixer=mixer, mixer_options=cfg.mixer_options if mixer == cfg.mixer else ())


@register_model("hybrid")
class HybridLM(DecoderLM):
    """Embedding -> Block(pattern[0]) -> Block(pattern[1]) -> ... -> final norm -> head (the "llama" layout)."""

    options_class = HybridOptions
    # The conformance harness's case (tests/zoo/test_conformance.py): a recurrent layer under an attention layer.
    CONFORMANCE_CONFIGS = (
        {"mixer": "attention", "scan_layers": False, "model_options": (("pattern", "deltanet,attention"),)},
    )

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        mixers = layer_mixers(cfg)
        self.cfg = cfg
        self.mixers = mixers
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, dtype=jnp.dtype(cfg.compute_dtype), rngs=rngs)
        if cfg.scan_layers:
            # One mixer throughout (layer_mixers checked it): the plain scanned stack.
            self.layers = build_layers(layer_config(cfg, mixers[0]), rngs=rngs)
        else:
            self.layers = nnx.List([Block(layer_config(cfg, mixer), rngs=rngs) for mixer in mixers])
        self.final_norm = (
            build_norm(cfg.norm, cfg.d_model, eps=cfg.norm_eps) if cfg.norm_placement in FINAL_NORM_PLACEMENTS else None
        )
        self.head = None if cfg.tie_embeddings else nnx.Param(_head_init(rngs, cfg.d_model, cfg.vocab_size))
