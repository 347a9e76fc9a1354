"""Gated delta rule (DeltaNet / Gated DeltaNet / KDA): reference, chunked XLA, Pallas and decode forms."""

from icml26zoo.kernels._common.chunks import CHUNK_SIZES
from icml26zoo.kernels.delta_rule.api import gated_delta_rule
from icml26zoo.kernels.delta_rule.decode import gated_delta_rule_step

__all__ = ["CHUNK_SIZES", "gated_delta_rule", "gated_delta_rule_step"]
