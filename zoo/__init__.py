"""The zoo's NNX modules: layers, sequence mixers, models, losses and optimizers."""

from icml26zoo import functional
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import MIXERS, MODELS, OPTIMIZERS, register_mixer, register_model, register_optimizer

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
