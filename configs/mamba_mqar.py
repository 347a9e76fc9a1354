"""A 2-layer, 64-wide Mamba (Mamba1 selective SSM, arXiv 2312.00752) on multi-query associative recall.

16 keys, 16 values and 4 pairs per example in 32 tokens, the sizes of mamba2_mqar. Recall lives in the
fixed-size state (d_inner × N = 128 × 32 here), so the state size is raised to N = 32 as for mamba2_mqar.
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("mamba", (("state_size", 32),))
