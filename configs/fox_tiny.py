"""A 2-layer, 64-wide FoX (Forgetting Transformer, arXiv 2503.02130) on the built-in byte corpus.

The same shape and schedule as llama_tiny with the "fox" mixer (data-dependent forget gate, no RoPE).
The Pro block: `model.mixer_options="(('pro', True),)"`; other gates: `(('gate', 'bias_only'),)` etc.
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("fox")
