"""Discrete bottlenecks shared by the tokenizers (issue 34): finite scalar quantisation (FSQ), nearest-codebook
vector quantisation (VQ) with the straight-through estimator, and codebook usage statistics.

    fsq     levels, the tanh bound, straight-through rounding, mixed-radix code indices, the `FSQ` module
    vq      nearest code, commitment and codebook losses, the `VectorQuantizer` module
    usage   per-code counts, perplexity, dead codes (for either quantiser's indices)
"""

from icml26zoo.vq.fsq import (
    FSQ,
    check_levels,
    codebook_size,
    fsq_bound,
    fsq_codes_to_indices,
    fsq_indices_to_codes,
    fsq_quantize,
    round_straight_through,
)
from icml26zoo.vq.usage import code_counts, dead_code_count, perplexity, usage_statistics
from icml26zoo.vq.vq import VectorQuantizer, VQOutput, check_codebook_size, nearest_code, vector_quantize

__all__ = [
    "FSQ",
    "VQOutput",
    "VectorQuantizer",
    "check_codebook_size",
    "check_levels",
    "code_counts",
    "codebook_size",
    "dead_code_count",
    "fsq_bound",
    "fsq_codes_to_indices",
    "fsq_indices_to_codes",
    "fsq_quantize",
    "nearest_code",
    "perplexity",
    "round_straight_through",
    "usage_statistics",
    "vector_quantize",
]
