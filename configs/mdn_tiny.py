"""A 2-layer, 64-wide Momentum DeltaNet (arXiv 2605.05838) on the built-in byte corpus.

The same shape and schedule as gated_deltanet_tiny with the "mdn" mixer: 4 value heads sharing 2 query/key heads
(num_kv_heads), short conv width 4, log μ floored at −2 and τ = √d_model (the 400M settings). Options:
`(('expand_v', 2),)` gives d_v = 2·d_k as at 400M; `(('min_log_mu', -1.0), ('tau_factor', 8.0))` the 1B gates.
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("mdn")
