"""Block-sparse attention: causal softmax attention over a per-query-block list of key blocks."""

from icml26zoo.kernels.block_sparse_attention.api import block_sparse_attention
from icml26zoo.kernels.block_sparse_attention.lists import causal_lists, density, from_mask, random_lists

__all__ = ["block_sparse_attention", "causal_lists", "density", "from_mask", "random_lists"]
