"""A 2-layer, 64-wide Hyena (order 2, arXiv 2302.10866) on multi-query associative recall (MQAR).

16 keys, 16 values and 4 pairs per example in 32 tokens, the sizes of fox_mqar. The implicit filter
covers model.max_seq_len (64) ≥ the 32-token rows. Order 3 (one more gate and long conv):
`model.mixer_options="(('order', 3),)"`.
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("hyena", (("order", 2), ("filter_order", 64), ("emb_dim", 5)))
