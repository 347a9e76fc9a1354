"""The privacy parameters' checks (ε, δ, the noise dimension), built on icml26zoo.validation, and the σ
calibration the mechanisms share. Each check raises ValueError naming the argument and the value; the other
arguments (sensitivities, clip norms, noise scales, shape parameters) use
`validation.check_positive(name, value, finite=True)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from icml26zoo.validation import check_int, check_interval, check_positive


def check_epsilon(value: Any, name: str = "eps") -> float:
    """ε finite and > 0 (ε ≤ 0 is not a privacy level any additive noise reaches with δ < 1), as a float."""
    return check_positive(name, value, finite=True)


def check_delta(value: Any, name: str = "delta") -> float:
    """δ strictly inside (0, 1), as a float."""
    return check_interval(name, value, 0, 1, closed="neither")


def check_dimension(value: Any, name: str = "dim") -> int:
    """The dimension of the noise: an integer >= 1."""
    return check_int(name, value)


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
