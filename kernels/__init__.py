"""Pure array ops: one folder per op (reference, xla, pallas, api, decode), re-exported here with each op's
single-step decode form (block-sparse attention is a prefill op and the grouped matmul of the MoE experts has
no time axis; they have none).

Every op validates its arguments (shapes, dtypes, gate ranges that NaN fails) and raises a ValueError naming
the op and the argument. The value checks need concrete arrays, so under `jit` they are skipped; wrap an op
in `checked` to keep them (as `jax.experimental.checkify` checks):

    jax.jit(checked(gated_delta_rule))(q, k, v, beta=beta)   # a NaN in beta raises, naming the op and `beta`

A NaN or inf in one packed segment never reaches another segment (docs/numerics.md, "Bad values").

`icml26zoo.kernels.fla` takes flash-linear-attention's signatures (`chunk_gated_delta_rule(q, k, v, g, beta,
..., cu_seqlens=...)` and the rest of docs/fla.md's table) and calls these ops; an op called in fla's style
raises a TypeError that names its entry point there.
"""

from icml26zoo.kernels.block_sparse_attention import block_sparse_attention
from icml26zoo.kernels.checked import checked
from icml26zoo.kernels.delta_rule import gated_delta_rule, gated_delta_rule_step
from icml26zoo.kernels.forgetting_attention import forgetting_attention, forgetting_attention_step
from icml26zoo.kernels.grouped_matmul import grouped_matmul
from icml26zoo.kernels.long_conv import causal_long_conv, causal_long_conv_step
from icml26zoo.kernels.momentum_delta_rule import momentum_delta_rule, momentum_delta_rule_step
from icml26zoo.kernels.selective_scan import selective_scan, selective_scan_step
from icml26zoo.kernels.ssd import ssd, ssd_step
from icml26zoo.kernels.value_forget_attention import value_forget_attention, value_forget_attention_step

__all__ = [
    "block_sparse_attention",
    "causal_long_conv",
    "causal_long_conv_step",
    "checked",
    "forgetting_attention",
    "forgetting_attention_step",
    "gated_delta_rule",
    "gated_delta_rule_step",
    "grouped_matmul",
    "momentum_delta_rule",
    "momentum_delta_rule_step",
    "selective_scan",
    "selective_scan_step",
    "ssd",
    "ssd_step",
    "value_forget_attention",
    "value_forget_attention_step",
]
