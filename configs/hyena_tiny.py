"""A 2-layer, 64-wide Hyena (order 2, arXiv 2302.10866) on the built-in byte corpus.

The same shape and schedule as llama_tiny with the "hyena" mixer: filter FFN width 64, emb_dim 5, short
conv 3 (EDEN's small settings). The implicit filter covers model.max_seq_len (256) ≥ the 64-token rows.
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("hyena", (("order", 2), ("filter_order", 64), ("emb_dim", 5)))
