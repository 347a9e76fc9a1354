"""The zoo's NNX modules: layers, sequence mixers, models, losses and optimizers."""

from zoo import functional
from zoo.models.config import ModelConfig
from zoo.registry import MIXERS, MODELS, OPTIMIZERS, register_mixer, register_model, register_optimizer

__all__ = [
    "MIXERS",
    "MODELS",
    "OPTIMIZERS",
    "ModelConfig",
    "functional",
    "register_mixer",
    "register_model",
    "register_optimizer",
]
