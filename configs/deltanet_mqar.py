"""A 2-layer, 64-wide DeltaNet (Yang et al. 2024, arXiv 2406.06484) on multi-query associative recall (MQAR).

16 keys, 16 values and 4 pairs per example in 32 tokens, the sizes the trainer's own MQAR tests use; the
vocabulary (64) covers padding + keys + values (33). Options: `(('allow_neg_eigval', True),)` lets β reach 2.
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("deltanet")
