"""The analytic Gaussian mechanism (Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy:
Analytical Calibration and Optimal Denoising", ICML 2018, arXiv 1805.06530).

M(D) = Q(D) + Z with Z ~ N(0, σ² I) and ℓ2 sensitivity Δ is (ε, δ)-DP iff

    δ ≥ Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ),

the exact hockey-stick divergence of N(0, σ²) and N(Δ, σ²). It is increasing in Δ/σ, so the smallest σ is
found by bisection (`analytic_gaussian_sigma`). Host-side float64 (numpy/scipy): calibration runs once.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from icml26zoo.privacy._checks import calibrate, check_delta, check_epsilon
from icml26zoo.validation import check_positive

__all__ = ["analytic_gaussian_delta", "analytic_gaussian_sigma", "gaussian_expected_l1", "gaussian_expected_l2"]


def analytic_gaussian_delta(eps: float, sigma: float, sens: float = 1.0) -> float:
    """δ(ε) of N(0, σ²) noise at sensitivity `sens`: the closed form above, with e^ε Φ(·) taken in log space."""
    eps = check_epsilon(eps)
    sigma, sens = check_positive("sigma", sigma, finite=True), check_positive("sens", sens, finite=True)
    ratio = sens / sigma
    upper = special.ndtr(ratio / 2 - eps / ratio)
    lower = math.exp(eps + special.log_ndtr(-ratio / 2 - eps / ratio))
    return float(max(upper - lower, 0.0))


def analytic_gaussian_sigma(eps: float, delta: float, sens: float = 1.0, *, max_sigma: float | None = None) -> float:
    """The smallest σ (relative tolerance 1e-9) with `analytic_gaussian_delta(eps, σ, sens)` ≤ `delta`.

    ValueError when even `max_sigma` (default 1e4 · sens) cannot meet (eps, delta)."""
    eps, delta, sens = check_epsilon(eps), check_delta(delta), check_positive("sens", sens, finite=True)
    max_sigma = 1e4 * sens if max_sigma is None else check_positive("max_sigma", max_sigma, finite=True)
    # The classical sqrt(2 ln(1.25/δ)) Δ / ε starts the scan near the answer for ε ≤ 1.
    start = min(sens * math.sqrt(2 * math.log(1.25 / delta)) / eps, max_sigma)
    return calibrate(lambda s: analytic_gaussian_delta(eps, s, sens), delta, start=start, max_sigma=max_sigma,
                     what="the Gaussian mechanism", tol=1e-9)


def gaussian_expected_l1(sigma: float) -> float:
    """E|Z| for Z ~ N(0, σ²): σ √(2/π)."""
    return float(check_positive("sigma", sigma, finite=True) * np.sqrt(2 / np.pi))


def gaussian_expected_l2(sigma: float) -> float:
    """E Z² for Z ~ N(0, σ²): σ²."""
    return float(check_positive("sigma", sigma, finite=True) ** 2)
