"""The uniform b-bit grid every rounding method shares: symmetric half-integer levels with one step per row.

A b-bit row quantiser maps a real value x of output row i to s_i · (k + 1/2) with the integer code
k ∈ [−2^{b−1}, 2^{b−1} − 1]: 2^b levels placed symmetrically about 0 (for b = 2: ±s/2, ±3s/2). Rounding to
nearest picks k = floor(x / s_i), clipped to the code range, so values beyond the outermost level clip to it.
The step s_i is fixed from the original weights before any rounding (every method then rounds onto the same
grid): "absmax" puts the outermost level at max|W_i|, "mse" picks, per row, the step of a small search over
clipping ratios that minimises the row's own round-to-nearest error (at 2-4 bits clipping the tails wins).
"""

from __future__ import annotations

import numpy as np

from icml26zoo.validation import is_integer

__all__ = ["BITS", "SCALE_METHODS", "check_bits", "codes", "grid_values", "level_count", "round_to_grid", "row_steps"]

BITS = (2, 3, 4)
SCALE_METHODS = ("absmax", "mse")
# Clipping ratios the "mse" step search tries: the outermost level at ratio · max|W_i|.
CLIP_RATIOS = np.linspace(0.25, 1.0, 31)


def check_bits(bits: object) -> int:
    """`bits` if it is one of BITS (2, 3, 4); otherwise ValueError naming `bits`."""
    if not is_integer(bits) or int(bits) not in BITS:  # 3.0 is not a bit width
        raise ValueError(f"bits must be one of {list(BITS)} (uniform 2-4 bit grids), got {bits!r}")
    return int(bits)


def level_count(bits: int) -> int:
    """2^bits: the number of grid levels per row."""
    return 2 ** check_bits(bits)


def _half_range(bits: int) -> float:
    """The outermost level in steps, (2^b − 1) / 2."""
    return (level_count(bits) - 1) / 2


def grid_values(bits: int) -> np.ndarray:
    """The 2^bits levels in units of the step, k + 1/2 for k = −2^{b−1} .. 2^{b−1} − 1, ascending."""
    half = level_count(bits) // 2
    return np.arange(-half, half, dtype=np.float64) + 0.5


def codes(x: np.ndarray, steps: np.ndarray, bits: int) -> np.ndarray:
    """Integer codes in [0, 2^bits) of round-to-nearest: x [m, ...] with steps [m] (one per leading row)."""
    steps = _row_broadcast(np.asarray(steps, np.float64), np.ndim(x))
    half = level_count(bits) // 2
    k = np.clip(np.floor(np.asarray(x, np.float64) / steps), -half, half - 1)
    return (k + half).astype(np.int64)


def round_to_grid(x: np.ndarray, steps: np.ndarray, bits: int) -> np.ndarray:
    """Round-to-nearest onto the grid: x [m, ...] float, steps [m] > 0 -> the nearest levels, same shape."""
    steps = np.asarray(steps, np.float64)
    values = grid_values(bits)[codes(x, steps, bits)]
    return values * _row_broadcast(steps, np.ndim(x))


def row_steps(w: np.ndarray, bits: int, method: str = "mse") -> np.ndarray:
    """The step s_i of every row of w [m, n] (rows = output channels) -> [m], all > 0.

    "absmax": s_i = max|w_i| / ((2^b − 1)/2). "mse": the clipping ratio (CLIP_RATIOS) with the smallest
    round-to-nearest squared error of that row. An all-zero row gets step 1 (its values round to ±s/2 either
    way; there is no better choice on a grid without a zero level).
    """
    check_bits(bits)
    if method not in SCALE_METHODS:
        raise ValueError(f"method must be one of {list(SCALE_METHODS)}, got {method!r}")
    w = np.asarray(w, np.float64)
    if w.ndim != 2:
        raise ValueError(f"w must be a matrix [m, n], got shape {w.shape}")
    absmax = np.max(np.abs(w), axis=1)
    absmax = np.where(absmax > 0, absmax, _half_range(bits))
    base = absmax / _half_range(bits)
    if method == "absmax":
        return base
    candidates = base[None, :] * CLIP_RATIOS[:, None]  # [R, m]
    errors = [np.sum((round_to_grid(w, steps, bits) - w) ** 2, axis=1) for steps in candidates]
    best = np.argmin(np.stack(errors), axis=0)
    return candidates[best, np.arange(w.shape[0])]


def _row_broadcast(steps: np.ndarray, ndim: int) -> np.ndarray:
    return steps.reshape(steps.shape + (1,) * (ndim - steps.ndim))
