"""A 2-layer, 64-wide ProtoT (prototype mixer, arXiv 2602.11852 — a reconstruction) on multi-query associative
recall (MQAR).

16 keys, 16 values and 4 pairs per example in 32 tokens, the sizes of fox_mqar. A key's value has to be
routed into a channel that its later query reads, so there is one prototype per key (K₀ = 16) at S = 3
scales, e ∈ {1, 3, 5} (half-lives ≈ 1.4, 5.5 and 22 tokens: the 32-token row), d_p = 32, d_v = 64.
"""

from icml26zoo.train.presets import tiny_mqar


def get_config():
    return tiny_mqar("protot", (("num_prototypes", 16), ("prototype_dim", 32), ("scale_exponents", (1, 3, 5))))
