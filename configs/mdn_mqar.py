"""A 2-layer, 64-wide Momentum DeltaNet (arXiv 2605.05838) on multi-query associative recall (MQAR).

16 keys, 16 values and 4 pairs per example in 32 tokens, the sizes the trainer's own MQAR tests use; the
vocabulary (64) covers padding + keys + values (33). Options: `(('expand_v', 2),)` gives d_v = 2·d_k.
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("mdn")
