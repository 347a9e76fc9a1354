"""Forgetting attention (FoX): causal softmax attention with a per-head scalar forget gate."""

from icml26zoo.kernels.forgetting_attention.api import forgetting_attention
from icml26zoo.kernels.forgetting_attention.decode import (
    ForgettingAttentionState,
    forgetting_attention_step,
    init_forgetting_attention_state,
)

__all__ = [
    "ForgettingAttentionState",
    "forgetting_attention",
    "forgetting_attention_step",
    "init_forgetting_attention_state",
]
