"""Pure array ops: one folder per op (reference, xla, pallas, api), re-exported here."""

from kernels.delta_rule import gated_delta_rule
from kernels.forgetting_attention import forgetting_attention
from kernels.long_conv import causal_long_conv
from kernels.momentum_delta_rule import momentum_delta_rule
from kernels.selective_scan import selective_scan
from kernels.ssd import ssd
from kernels.value_forget_attention import value_forget_attention

__all__ = [
    "causal_long_conv",
    "forgetting_attention",
    "gated_delta_rule",
    "momentum_delta_rule",
    "selective_scan",
    "ssd",
    "value_forget_attention",
]
