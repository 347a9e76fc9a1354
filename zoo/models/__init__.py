"""Language models. Importing this package registers every built-in model in zoo.registry.MODELS."""

from __future__ import annotations

import jax
from flax import nnx

from icml26zoo.models import confsmoe, hybrid, lm, looped, one_layer  # noqa: F401  (register them, llama from lm)
from icml26zoo.models.block import convert_layer_layout, stack_layers, unstack_layers
from icml26zoo.models.config import ModelConfig
from icml26zoo.models.generate import generate, sample_logits
from icml26zoo.models.lm import DecodeCache, DecoderLM
from icml26zoo.registry import MODELS


def build_model(cfg: ModelConfig, *, rngs: nnx.Rngs) -> nnx.Module:
    """The registered model cfg.name built from cfg (parameters initialized from rngs).

    A model that takes cfg.model_options declares its options dataclass as `options_class`; the others reject
    any (ValueError naming model.model_options).
    """
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    model_class = MODELS.get(cfg.name)
    if cfg.model_options and getattr(model_class, "options_class", None) is None:
        raise ValueError(f"model.model_options: model {cfg.name!r} takes no options, got {cfg.model_options!r}")
    return model_class(cfg, rngs=rngs)


def is_language_model(name: str) -> bool:
    """Whether the registered model `name` maps tokens [B, T] to next-token logits [B, T, V] (the LM harnesses'
    contract: causality, decoding, packing). A model over point sets, meshes or other features declares
    `LANGUAGE_MODEL = False` and is tested by its own family's harness instead."""
    return bool(getattr(MODELS.get(name), "LANGUAGE_MODEL", True))


def language_model_names() -> list[str]:
    """The registered language models (`is_language_model`), in registration order."""
    return [name for name in MODELS.names() if is_language_model(name)]


def count_params(model: nnx.Module) -> int:
    """Total number of scalar parameters (nnx.Param leaves) in model."""
    return sum(int(leaf.size) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


__all__ = [
    "DecodeCache",
    "DecoderLM",
    "ModelConfig",
    "build_model",
    "convert_layer_layout",
    "count_params",
    "is_language_model",
    "language_model_names",
    "generate",
    "sample_logits",
    "stack_layers",
    "unstack_layers",
]
