"""Momentum delta rule (Momentum DeltaNet): reference, chunked XLA and decode forms."""

from icml26zoo.kernels._common.chunks import CHUNK_SIZES
from icml26zoo.kernels.momentum_delta_rule.api import momentum_delta_rule
from icml26zoo.kernels.momentum_delta_rule.decode import momentum_delta_rule_step

__all__ = ["CHUNK_SIZES", "momentum_delta_rule", "momentum_delta_rule_step"]
