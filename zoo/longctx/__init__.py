"""Long-context attention at inference: PBS-Attn block-sparse prefill, HARD-KV cache compression, ISA routing.

Specs: mixers-07-pbs-attn, mixers-12-hard-kv, mixers-13-isa. The block-sparse attention op they share is
`icml26zoo.kernels.block_sparse_attention`.
"""

from icml26zoo.longctx.isa import isa_attention, isa_attention_and_plan, isa_flop_fraction, isa_gate
from icml26zoo.longctx.isa_plan import IsaPlan, IsaSizes, isa_sizes

__all__ = [
    "IsaPlan",
    "IsaSizes",
    "isa_attention",
    "isa_attention_and_plan",
    "isa_flop_fraction",
    "isa_gate",
    "isa_sizes",
]
