"""Momentum delta rule (Momentum DeltaNet): reference, chunked XLA and decode forms."""

from kernels._common.chunks import CHUNK_SIZES
from kernels.momentum_delta_rule.api import momentum_delta_rule
from kernels.momentum_delta_rule.decode import momentum_delta_rule_step

__all__ = ["CHUNK_SIZES", "momentum_delta_rule", "momentum_delta_rule_step"]
