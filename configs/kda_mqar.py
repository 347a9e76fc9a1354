"""A 2-layer, 64-wide KDA, Kimi Delta Attention (Kimi Linear) on multi-query associative recall (MQAR).

16 keys, 16 values and 4 pairs per example in 32 tokens, the sizes the trainer's own MQAR tests use; the
vocabulary (64) covers padding + keys + values (33). Options: the safe gate g ∈ (−5, 0): `(('safe_gate', True),)`.
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("kda")
