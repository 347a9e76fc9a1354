"""A 2-layer, 64-wide Mamba2 (SSD, arXiv 2405.21060) on multi-query associative recall (MQAR).

16 keys, 16 values and 4 pairs per example in 32 tokens, the sizes of fox_mqar (vocabulary 64 covers
padding + keys + values = 33). Recall lives in the fixed-size state, so the state size matters here:
N = 32 per head (H = 8 heads of width 16). The diagonal decay:
`model.mixer_options="(('decay', 'diagonal'), ('state_size', 32))"`.
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("mamba2", (("decay", "scalar"), ("state_size", 32)))
