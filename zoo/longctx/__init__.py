"""Long-context attention at inference: PBS-Attn block-sparse prefill, HARD-KV cache compression, ISA routing.

Papers: PBS-Attn (arXiv 2510.21270), HARD-KV (arXiv 2606.28831), ISA (arXiv 2605.04569). The block-sparse
attention op they share is `icml26zoo.kernels.block_sparse_attention`.
"""

from icml26zoo.longctx.hard_kv import HardKVConfig, cache_rows, compress_cache
from icml26zoo.longctx.isa import isa_attention, isa_attention_and_plan, isa_flop_fraction, isa_gate
from icml26zoo.longctx.isa_plan import IsaPlan, IsaSizes, isa_sizes
from icml26zoo.longctx.pbs import PBSOptions, PBSPlan, PBSPrefill, PBSPrefillOptions, pbs_prefill, select_blocks

# HARD-KV's model-level names load on first use: they import icml26zoo.decode and the models, which import
# the attention mixer, which imports this package (for PBS); an eager import here would be circular.
_LAZY = {
    "HardKVCache": "hard_kv_model",
    "HardKVLM": "hard_kv_model",
    "hard_kv_decode": "hard_kv_model",
    "hard_kv_generate": "hard_kv_model",
    "memory_per_token": "hard_kv_model",
    "HeadScores": "hard_kv_calibrate",
    "calibrate_head_scores": "hard_kv_calibrate",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"icml26zoo.longctx.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'icml26zoo.longctx' has no attribute {name!r}")


__all__ = [
    "HardKVCache",
    "HardKVConfig",
    "HardKVLM",
    "HeadScores",
    "IsaPlan",
    "IsaSizes",
    "PBSOptions",
    "PBSPlan",
    "PBSPrefill",
    "PBSPrefillOptions",
    "cache_rows",
    "calibrate_head_scores",
    "compress_cache",
    "hard_kv_decode",
    "hard_kv_generate",
    "isa_attention",
    "isa_attention_and_plan",
    "isa_flop_fraction",
    "isa_gate",
    "isa_sizes",
    "memory_per_token",
    "pbs_prefill",
    "select_blocks",
]
