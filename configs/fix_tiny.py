"""A 2-layer, 64-wide FiX (fine-grained forgetting attention, ICML 2026) on the byte corpus.

The same shape and schedule as llama_tiny with the "fix" mixer: per-channel value forget gates (low rank,
r = 16), the FoX scalar gate, the fp32 output RMSNorm and output gate, no RoPE. FiX is a reconstruction
from the paper's abstract. Mamba-style gates: `model.mixer_options="(('vgate', 'mamba'),)"`.
"""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("fix")
