"""A 2-layer, 64-wide KDA, Kimi Delta Attention (Kimi Linear) on the built-in byte corpus.

The same shape and schedule as llama_tiny with the "kda" mixer: 4 value heads sharing 2 query/key heads
(num_kv_heads), short conv width 4. Options: the safe gate g ∈ (−5, 0): `(('safe_gate', True),)`.
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("kda")
