"""Grouped matmul for mixture-of-experts: row m of x times the weight matrix of its group (its expert)."""

from icml26zoo.kernels.grouped_matmul.api import grouped_matmul

__all__ = ["grouped_matmul"]
