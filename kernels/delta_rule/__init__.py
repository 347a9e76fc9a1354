"""Gated delta rule (DeltaNet / Gated DeltaNet / KDA): reference, chunked XLA, Pallas and decode forms."""

from kernels._common.chunks import CHUNK_SIZES
from kernels.delta_rule.api import gated_delta_rule
from kernels.delta_rule.decode import gated_delta_rule_step

__all__ = ["CHUNK_SIZES", "gated_delta_rule", "gated_delta_rule_step"]
