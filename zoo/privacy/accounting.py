"""Privacy accounting through dp-accounting's privacy-loss distributions (PLDs): the Gaussian's own PLD, the
SGG family's PLD from its numerical loss distribution (`sgg.privacy_loss_pmf`), an independent discretised
PLD of a MoG shift, and tight composition by convolution (`PrivacyLossDistribution.self_compose`).

dp-accounting is the `privacy` extra (`pip install "icml26-zoo[privacy]"`); it is imported inside the
functions, so the rest of `icml26zoo.privacy` works without it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from icml26zoo.privacy import mog, sgg
from icml26zoo.privacy._checks import check_delta, check_epsilon
from icml26zoo.validation import check_int, check_positive

__all__ = ["composed_delta", "composed_epsilon", "gaussian_pld", "mog_pld", "sgg_pld"]


def _pld_module() -> Any:
    try:
        from dp_accounting.pld import privacy_loss_distribution
    except ImportError as error:
        raise ImportError('privacy accounting needs dp-accounting: pip install "icml26-zoo[privacy]"') from error
    return privacy_loss_distribution


def gaussian_pld(sigma: float, sens: float = 1.0, discretization: float = 1e-4) -> Any:
    """dp-accounting's (pessimistic, connect-the-dots) PLD of N(0, σ²) noise at sensitivity `sens`."""
    sigma, sens = check_positive("sigma", sigma, finite=True), check_positive("sens", sens, finite=True)
    discretization = check_positive("discretization", discretization, finite=True)
    return _pld_module().from_gaussian_mechanism(sigma, sensitivity=sens, value_discretization_interval=discretization)


def sgg_pld(sigma: float, a: float, p: float, dim: int, sens: float = 1.0, discretization: float = 1e-3,
            **grid_kwargs: Any) -> Any:
    """The PLD of SGG noise from `sgg.privacy_loss_pmf` (losses rounded up, symmetric). Pessimistic in the
    rounding; the quadrature underneath is numerical, not a certified bound."""
    pmf, infinity_mass = sgg.privacy_loss_pmf(sigma, a, p, dim, sens, discretization, **grid_kwargs)
    return _pld_module().PrivacyLossDistribution.create_from_rounded_probability(
        pmf, infinity_mass, discretization, pessimistic_estimate=True)


def mog_pld(sigma: float, weights: ArrayLike, spacing: float = 1.0, sens: float = 1.0, shift: float | None = None, *,
            bin_width: float | None = None, discretization: float = 1e-4) -> Any:
    """A PLD of MoG noise at one shift (default Δ), built by dp-accounting from the two noise laws binned on a
    z-grid of width `bin_width` (default σ/200) with exact bin masses.

    Binning is post-processing, so its δ(ε) is at most the continuous one and converges to it as the bins
    shrink: an independent check of `mog.mog_delta`, which integrates the continuous laws."""
    sigma, sens = check_positive("sigma", sigma, finite=True), check_positive("sens", sens, finite=True)
    spacing = check_positive("spacing", spacing, finite=True)
    weights = mog.check_weights(weights)
    shift = sens if shift is None else check_positive("shift", shift, finite=True)
    width = sigma / 200 if bin_width is None else check_positive("bin_width", bin_width, finite=True)
    means = (np.arange(weights.size) - weights.size // 2) * spacing * sens
    reach = means.max() + shift + 14 * sigma
    edges = np.concatenate([[-math.inf], np.arange(-reach, reach + width, width), [math.inf]])
    upper = _bin_log_masses(edges, weights, means, sigma)
    lower = _bin_log_masses(edges - shift, weights, means, sigma)
    finite = np.isfinite(upper) & np.isfinite(lower)
    return _pld_module().from_two_probability_mass_functions(
        dict(enumerate(lower[finite])), dict(enumerate(upper[finite])),
        value_discretization_interval=check_positive("discretization", discretization, finite=True), symmetric=True)


def _bin_log_masses(edges: np.ndarray, weights: np.ndarray, means: np.ndarray, sigma: float) -> np.ndarray:
    from scipy import special

    # The mass of each bin from whichever normal tail is small, summed over components in log space.
    upper_tail = special.log_ndtr(-(edges[:, None] - means[None, :]) / sigma)
    lower_tail = special.log_ndtr((edges[:, None] - means[None, :]) / sigma)
    right = edges[1:, None] <= means[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        from_lower = lower_tail[1:] + np.log1p(-np.exp(np.minimum(lower_tail[:-1] - lower_tail[1:], 0.0)))
        from_upper = upper_tail[:-1] + np.log1p(-np.exp(np.minimum(upper_tail[1:] - upper_tail[:-1], 0.0)))
        per_component = np.where(right, from_lower, from_upper) + np.log(weights)[None, :]
        return special.logsumexp(per_component, axis=1)


def composed_epsilon(pld: Any, count: int, delta: float) -> float:
    """ε at `delta` of `count` adaptive releases, composing `pld` with itself by convolution."""
    count = check_int("count", count)
    composed = pld if count == 1 else pld.self_compose(count)
    return float(composed.get_epsilon_for_delta(check_delta(delta)))


def composed_delta(pld: Any, count: int, eps: float) -> float:
    """δ at `eps` of `count` adaptive releases of the mechanism with PLD `pld`."""
    count = check_int("count", count)
    composed = pld if count == 1 else pld.self_compose(count)
    return float(composed.get_delta_for_epsilon(check_epsilon(eps)))
