"""The zoo's NNX modules: layers, sequence mixers, models, losses and optimizers.

The names a user needs first are here: `ModelConfig`, `build_model` and `generate` for the language
models, `functional` (`init` / `apply` as pure functions) and `MixerConfig` for using a model or mixer
without NNX, the registries, and the subpackages `kernels` (array ops), `mixers` (mixer classes) and
`optim` (optax constructors).
"""

from icml26zoo import functional, kernels, mixers, optim
from icml26zoo.functional import MixerConfig
from icml26zoo.models import DecoderLM, build_model, count_params, generate
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import MIXERS, MODELS, OPTIMIZERS, register_mixer, register_model, register_optimizer

__all__ = [
    "MIXERS",
    "MODELS",
    "OPTIMIZERS",
    "DecoderLM",
    "MixerConfig",
    "ModelConfig",
    "build_model",
    "count_params",
    "functional",
    "generate",
    "kernels",
    "mixers",
    "optim",
    "register_mixer",
    "register_model",
    "register_optimizer",
]
