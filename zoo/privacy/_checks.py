"""Argument checks shared by the privacy mechanisms: each raises ValueError naming the argument and the value."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def check_epsilon(value: Any, name: str = "eps") -> float:
    """ε finite and > 0 (ε ≤ 0 is not a privacy level any additive noise reaches with δ < 1)."""
    number = _number(value)
    if number is None or number <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def check_delta(value: Any, name: str = "delta") -> float:
    """δ strictly inside (0, 1)."""
    number = _number(value)
    if number is None or not 0 < number < 1:
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {value!r}")
    return number


def check_positive(value: Any, name: str) -> float:
    """A finite number > 0 (sensitivities, clip norms, noise scales, shape parameters)."""
    number = _number(value)
    if number is None or number <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def check_dimension(value: Any, name: str = "dim") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def calibrate(delta_of_sigma: Callable[[float], float], delta: float, *, start: float, max_sigma: float,
              what: str, tol: float = 1e-6) -> float:
    """The smallest σ ≤ `max_sigma` on a bracketing scan with δ(σ) ≤ `delta`, refined by bisection.

    The scan walks σ upward by factors of 2 from `start`, so a δ that is not monotone in σ cannot hide a
    feasible σ below an infeasible one by more than that factor; the bisection then keeps the invariant
    δ(lo) > delta ≥ δ(hi) and returns hi, which is verified feasible. If even `max_sigma` misses `delta`,
    ValueError says that `what` cannot meet the requested guarantee.
    """
    lo = start
    if delta_of_sigma(lo) <= delta:
        while lo > max_sigma * 1e-12 and delta_of_sigma(lo / 2) <= delta:
            lo /= 2
        hi, lo = lo, lo / 2
    else:
        hi = lo * 2
        while delta_of_sigma(hi) > delta:
            lo, hi = hi, hi * 2
            if hi > max_sigma:
                if delta_of_sigma(max_sigma) > delta:
                    raise ValueError(f"{what} cannot meet the requested (eps, delta): even sigma = {max_sigma:g} "
                                     f"(max_sigma) gives delta = {delta_of_sigma(max_sigma):.3g} > {delta:g}")
                hi = max_sigma
                break
    while hi - lo > tol * hi:
        mid = 0.5 * (lo + hi)
        if delta_of_sigma(mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi
