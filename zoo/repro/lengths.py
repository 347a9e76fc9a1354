"""What the length-extrapolation reproductions (FoX/FiX, GOAT) share: the loss at one evaluation length and
its split over positions, and a weighted binning of per-position values for plots."""

from __future__ import annotations

import dataclasses

import numpy as np

from icml26zoo.validation import check_int

__all__ = ["LengthLoss", "binned"]


@dataclasses.dataclass(frozen=True)
class LengthLoss:
    """The eval loss at one sequence length: mean bits per token and its split over positions."""

    length: int
    bits: float  # weighted mean next-token loss over the evaluated tokens, in bits
    tokens: int  # predicted tokens it averages
    position_bits: np.ndarray  # [length] mean loss (bits) of the targets at each position in their segment
    position_tokens: np.ndarray  # [length] how many targets each position had


def binned(values: np.ndarray, weights: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Weighted means of `values` [T] over `bins` equal position bins: (bin centres [bins], means [bins])."""
    check_int("bins", bins)
    edges = np.linspace(0, len(values), bins + 1).round().astype(int)
    centres, means = [], []
    for start, stop in zip(edges[:-1], edges[1:], strict=True):
        w = weights[start:stop]
        if w.sum() > 0:
            centres.append((start + stop - 1) / 2)
            means.append(float(np.nansum(values[start:stop] * w) / w.sum()))
    return np.asarray(centres), np.asarray(means)
