"""Long-context attention at inference: PBS-Attn block-sparse prefill, HARD-KV cache compression, ISA routing.

Papers: PBS-Attn (arXiv 2510.21270), HARD-KV (arXiv 2606.28831), ISA (arXiv 2605.04569). The block-sparse
attention op they share is `icml26zoo.kernels.block_sparse_attention`. HARD-KV's model-level pieces (which import
the models, and so the attention mixer, which imports this package for PBS) are imported from their modules:
`icml26zoo.longctx.hard_kv_model` (HardKVLM, HardKVCache, hard_kv_decode, hard_kv_generate, memory_per_token) and
`icml26zoo.longctx.hard_kv_calibrate` (HeadScores, calibrate_head_scores).
"""

from icml26zoo.longctx.hard_kv import HardKVConfig, cache_rows, compress_cache
from icml26zoo.longctx.isa import isa_attention, isa_attention_and_plan, isa_flop_fraction, isa_gate
from icml26zoo.longctx.isa_plan import IsaPlan, IsaSizes, isa_sizes
from icml26zoo.longctx.pbs import PBSOptions, PBSPlan, PBSPrefill, PBSPrefillOptions, pbs_prefill, select_blocks

__all__ = [
    "HardKVConfig",
    "IsaPlan",
    "IsaSizes",
    "PBSOptions",
    "PBSPlan",
    "PBSPrefill",
    "PBSPrefillOptions",
    "cache_rows",
    "compress_cache",
    "isa_attention",
    "isa_attention_and_plan",
    "isa_flop_fraction",
    "isa_gate",
    "isa_sizes",
    "pbs_prefill",
    "select_blocks",
]
