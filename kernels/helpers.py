"""The kernels' shared building blocks that the model layer may use too (its decode paths and prefill plans
do the same masking and gate sums as the ops): re-exported from the private `kernels/_common`, so a mixer never
imports a private module of the kernels.

- `segment_sums`: segment-local running sums of log-gates (never a difference of a global cumsum).
- `attention_mask`: the causal, packed-segment mask of materialized attention.
- `pad_time`: pad the time axis to a multiple of a block or chunk.
- `einsum_f32`: an einsum accumulated in float32 at the highest precision.
"""

from icml26zoo.kernels._common.gate_sums import segment_sums
from icml26zoo.kernels._common.layout import pad_time
from icml26zoo.kernels._common.masks import attention_mask
from icml26zoo.kernels._common.precision import einsum_f32

__all__ = ["attention_mask", "einsum_f32", "pad_time", "segment_sums"]
