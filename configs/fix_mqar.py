"""A 2-layer, 64-wide FiX (ICML 2026, a reconstruction) on multi-query associative recall.

16 keys, 16 values and 4 pairs per example in 32 tokens, the sizes the trainer's own MQAR tests use; the
vocabulary (64) covers padding + keys + values (33). Without the FoX scalar gate:
`model.mixer_options="(('scalar_gate', False),)"`.
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("fix")
