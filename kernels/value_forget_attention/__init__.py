"""Value-forget attention (FiX): causal softmax attention with per-channel forget gates on the values.

A reconstruction from the abstract of "FiX: Introducing Fine-grained Forget Gate into Softmax Attention"
(ICML 2026); the authors' code is not available (docs/papers.md).
"""

from icml26zoo.kernels.value_forget_attention.api import value_forget_attention
from icml26zoo.kernels.value_forget_attention.decode import (
    ValueForgetAttentionState,
    init_value_forget_attention_state,
    value_forget_attention_step,
)

__all__ = [
    "ValueForgetAttentionState",
    "init_value_forget_attention_state",
    "value_forget_attention",
    "value_forget_attention_step",
]
