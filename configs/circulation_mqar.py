"""A 2-layer, 64-wide circulation attention (logits M_sym + α·M_skew, arXiv 2605.27476)
on multi-query associative recall (MQAR).

The same data and schedule as fox_mqar with the "circulation" mixer;
options: `model.mixer_options`, e.g. (("alpha", 1.05),).
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("circulation", (("alpha", 1.05),))
