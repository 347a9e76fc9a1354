"""Sequence mixers. Importing this package registers every built-in mixer in icml26zoo.registry.MIXERS.

The interface a mixer implements is documented in zoo/mixers/base.py. Each class maps x `[B, T, D]` to
y `[B, T, D]` and is built from a `ModelConfig` (`Attention(cfg, rngs=nnx.Rngs(0))`); configs name it
by its registered name (`ModelConfig(mixer="fox")`).
"""

from icml26zoo.mixers.attention import Attention
from icml26zoo.mixers.base import SequenceMixer, conformance_options
from icml26zoo.mixers.circulation import CirculationAttention
from icml26zoo.mixers.delta_net import DeltaNet, GatedDeltaNet, KimiDeltaAttention
from icml26zoo.mixers.fix import FineGrainedForgettingAttention
from icml26zoo.mixers.fox import ForgettingAttention
from icml26zoo.mixers.goat import GOATAttention
from icml26zoo.mixers.hyena import Hyena
from icml26zoo.mixers.mamba import Mamba
from icml26zoo.mixers.mamba2 import Mamba2
from icml26zoo.mixers.mdn import MomentumDeltaNet
from icml26zoo.mixers.protot import ProtoT

__all__ = [
    "Attention",
    "CirculationAttention",
    "DeltaNet",
    "FineGrainedForgettingAttention",
    "ForgettingAttention",
    "GOATAttention",
    "GatedDeltaNet",
    "Hyena",
    "KimiDeltaAttention",
    "Mamba",
    "Mamba2",
    "MomentumDeltaNet",
    "ProtoT",
    "SequenceMixer",
    "conformance_options",
]
