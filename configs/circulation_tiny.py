"""A 2-layer, 64-wide circulation attention (logits M_sym + α·M_skew, arXiv 2605.27476)
on the built-in byte corpus.

The same shape and schedule as fox_tiny with the "circulation" mixer;
options: `model.mixer_options`, e.g. (("alpha", 1.05),).
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("circulation", (("alpha", 1.05),))
