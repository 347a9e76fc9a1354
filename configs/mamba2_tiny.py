"""A 2-layer, 64-wide Mamba2 (SSD, arXiv 2405.21060) on the built-in byte corpus.

The same shape and schedule as llama_tiny with the "mamba2" mixer: expand 2 (d_inner 128), head_dim 16
(from d_model / num_heads, so H = 8 SSD heads), state size N = 16, conv width 4, chunk 64 (EDEN's small
settings). The generalized diagonal decay: `model.mixer_options="(('decay', 'diagonal'),)"`.
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("mamba2", (("decay", "scalar"), ("state_size", 16)))
