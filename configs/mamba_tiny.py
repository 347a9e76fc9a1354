"""A 2-layer, 64-wide Mamba (Mamba1 selective SSM, arXiv 2312.00752) on the built-in byte corpus.

The same shape and schedule as llama_tiny with the "mamba" mixer: expand 2 (d_inner 128), state size
N = 16, dt_rank = ceil(64 / 16) = 4, conv width 4, chunk 64 (mamba_simple's defaults at this width).
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("mamba", (("state_size", 16),))
