"""Forgetting attention (FoX): causal softmax attention with a per-head scalar forget gate."""

from kernels.forgetting_attention.api import forgetting_attention

__all__ = ["forgetting_attention"]
