"""A 2-layer, 64-wide ProtoT (prototype mixer, arXiv 2602.11852 — a reconstruction) on the built-in byte corpus.

The same shape and schedule as llama_tiny with the "protot" mixer: K₀ = 16 prototypes per layer, each
replicated at S = 4 fixed time scales λ = 1 − 2^(−e), e ∈ {1, 4, 7, 10} (K = 64 channels, fixed scales),
d_p = 32, d_v = d_model = 64, normalized ("avg") memories, one head. Learned time scales (option (A)):
`model.mixer_options="(('decay', 'learned'), ('num_prototypes', 16))"`.
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("protot", (("num_prototypes", 16), ("prototype_dim", 32), ("scale_exponents", (1, 4, 7, 10))))
