"""Value-forget attention (FiX): causal softmax attention with per-channel forget gates on the values.

A reconstruction from the FiX paper's abstract (specs/mixers-01 Part B); the authors' code is not available.
"""

from kernels.value_forget_attention.api import value_forget_attention

__all__ = ["value_forget_attention"]
