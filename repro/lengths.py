"""What the length-extrapolation reproductions (FoX/FiX, GOAT) share: the loss at one evaluation length and
its split over positions, and a weighted binning of per-position values for plots."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from icml26zoo.validation import check_int

__all__ = ["LengthLoss", "binned", "check_lengths"]


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


def check_lengths(lengths: Sequence[int], max_seq_len: int, row: int | None = None) -> tuple[int, ...]:
    """`lengths` as a strictly increasing tuple of integers >= 2, each at most the model's `max_seq_len` and,
    when `row` is given, dividing the evaluated rows' length `row`; otherwise ValueError naming the length."""
    lengths = tuple(lengths)
    if not lengths:
        raise ValueError("lengths must name at least one sequence length, got none")
    for length in lengths:
        check_int("lengths[i]", length, minimum=2)
        if length > max_seq_len:
            raise ValueError(f"length {length} exceeds the model's max_seq_len ({max_seq_len}); evaluate at most "
                             f"max_seq_len tokens per row or train with a larger model.max_seq_len")
        if row is not None and row % length:
            raise ValueError(f"lengths: {length} must divide the batch's row length {row}")
    if list(lengths) != sorted(set(lengths)):
        raise ValueError(f"lengths must be strictly increasing, got {list(lengths)}")
    return lengths
