"""A 2-layer, 64-wide Gated DeltaNet (arXiv 2412.06464) on the built-in byte corpus.

The same shape and schedule as llama_tiny with the "gated_deltanet" mixer: 4 value heads sharing 2 query/key heads
(num_kv_heads), short conv width 4. Options: `(('allow_neg_eigval', True),)` lets β reach 2.
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("gated_deltanet")
