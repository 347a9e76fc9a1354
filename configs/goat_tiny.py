"""A 2-layer, 64-wide GOAT (learned attention prior folded into q/k channels, arXiv 2601.15380)
on the built-in byte corpus.

The same shape and schedule as fox_tiny with the "goat" mixer;
options: `model.mixer_options`, e.g. (("pos_rank", 4),).
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("goat", (("pos_rank", 4),))
