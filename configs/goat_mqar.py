"""A 2-layer, 64-wide GOAT (learned attention prior folded into q/k channels, arXiv 2601.15380)
on multi-query associative recall (MQAR).

The same data and schedule as fox_mqar with the "goat" mixer;
options: `model.mixer_options`, e.g. (("pos_rank", 4),).
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("goat", (("pos_rank", 4),))
