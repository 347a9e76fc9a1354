"""Mixture-of-Gaussians (MoG) additive noise for scalar queries, after Liu, Selvi, Wiesemann, "Mind the Gap:
Mixtures of Gaussians in Approximate Differential Privacy" (ICML 2026, arXiv 2605.28078).

Noise Z = K·m·Δ + σ ξ with ξ ~ N(0, 1) and K ~ π on the integer offsets {−R, …, R} (π symmetric), so

    p(z) = Σ_k π_k φ_σ(z − μ_k),   μ_k = k m Δ.

π_0 = 1 is the analytic Gaussian mechanism. RECONSTRUCTION: the paper's exact weights and mean placement
were not available (no code); the means at multiples of the sensitivity and the weight family
`geometric_weights` (π_k ∝ e^{−λ|k|}, a Gaussian-smoothed discrete Laplace) are the zoo's choice
(docs/papers/dp_mixture_mechanisms.md). Any symmetric π can be passed instead.

Privacy: δ(ε; s) = ∫ (p(z) − e^ε p(z − s))_+ dz for every shift 0 < s ≤ Δ (a mixture's worst shift can be
interior). The integral is not done by plain quadrature: the privacy loss L(z) = log p(z) − log p(z − s) is
evaluated (log space, logsumexp) on a fine z-grid, its crossings of ε are refined by root finding, and on each
interval where L > ε the masses of p and of p(· − s) are closed-form sums of normal CDFs, so δ is exact up to
the root tolerance (it reproduces Balle–Wang's closed form to ~1e-15 for π_0 = 1).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from icml26zoo.privacy._checks import calibrate, check_delta, check_epsilon
from icml26zoo.validation import check_int, check_positive

__all__ = ["default_shift_grid", "geometric_weights", "mog_delta", "mog_expected_l1", "mog_expected_l2",
           "mog_sample", "mog_sigma"]

# Each crossing of ε by the loss lies between two z-grid points this many σ apart (the loss varies on scale σ).
_GRID_STEP = 1 / 16
# Beyond this many σ outside the component means the loss is linear in z to float64 precision.
_TAIL = 40.0


def geometric_weights(decay: float, radius: int) -> np.ndarray:
    """π_k ∝ exp(−decay·|k|) for k = −radius … radius, normalised: float64 [2·radius + 1]."""
    radius = check_int("radius", radius, minimum=0)
    decay = check_positive("decay", decay, finite=True)
    weights = np.exp(-decay * np.abs(np.arange(-radius, radius + 1)))
    return weights / weights.sum()


def check_weights(weights: ArrayLike) -> np.ndarray:
    """`weights` as float64 [2R + 1]: finite, ≥ 0, summing to 1 (within 1e-9) and symmetric (π_k = π_{−k})."""
    array = np.asarray(weights, dtype=np.float64)
    if array.ndim != 1 or array.size % 2 != 1:
        raise ValueError(f"weights must be a 1-D array of odd length 2R+1 (offsets -R..R), got shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array < 0) or abs(array.sum() - 1) > 1e-9:
        raise ValueError(f"weights must be finite, >= 0 and sum to 1, got {array.tolist()}")
    if not np.allclose(array, array[::-1], rtol=0, atol=1e-12):
        raise ValueError(f"weights must be symmetric (pi_k = pi_-k), got {array.tolist()}")
    return array


def _means(weights: np.ndarray, spacing: float, sens: float) -> np.ndarray:
    radius = weights.size // 2
    return np.arange(-radius, radius + 1) * spacing * sens


def default_shift_grid(sens: float, points: int = 32) -> np.ndarray:
    """The shifts s ∈ (0, Δ] on which `mog_delta` takes its maximum: `points` evenly spaced, Δ included."""
    return np.linspace(sens / points, sens, points)


def _log_density(z: np.ndarray, log_w: np.ndarray, means: np.ndarray, sigma: float) -> np.ndarray:
    """log p(z) for z [N] (the normal constant dropped: it cancels in the loss): [N]."""
    return special.logsumexp(log_w[None, :] - 0.5 * ((z[:, None] - means[None, :]) / sigma) ** 2, axis=1)


def _mass(lo: float, hi: float, weights: np.ndarray, means: np.ndarray, sigma: float) -> float:
    """P(lo < Z ≤ hi) for the mixture, each component's mass from the upper tail when that is the small side."""
    upper = np.where(np.isinf(hi), 0.0, special.ndtr(-(hi - means) / sigma))
    lower = special.ndtr(-(lo - means) / sigma)
    return float(np.sum(weights * (lower - upper)))


def _loss_excess(z: np.ndarray, shift, log_w: np.ndarray, means: np.ndarray, sigma: float,
                 eps: float) -> np.ndarray:
    """L(z; s) − ε = log p(z) − log p(z − s) − ε for z [N] and a shift (a scalar or one per point [N]): [N]."""
    return _log_density(z, log_w, means, sigma) - _log_density(z - shift, log_w, means, sigma) - eps


def _loss_grid(eps, sigma, log_w, means, shift) -> tuple[np.ndarray, np.ndarray]:
    """z-points [N] and L − ε on them, from where L > ε on the left to past the last mean + s + 40σ.

    For s > 0, L → +∞ as z → −∞ (p(z − s) has the lighter left tail), but for small s the crossing lies far
    out (≈ μ_min + s/2 − σ²ε/s for one Gaussian); the grid grows leftwards in doubling chunks (each of at most
    4096 points) until it starts inside the region {L > ε}."""
    step = _GRID_STEP * sigma
    z = np.arange(means.min() - _TAIL * sigma, means.max() + shift + _TAIL * sigma, step)
    values = _loss_excess(z, shift, log_w, means, sigma, eps)
    width = _TAIL * sigma
    while not values[0] > 0:
        chunk = np.linspace(z[0] - width, z[0], min(4096, int(width / step) + 2))[:-1]
        z, values = np.concatenate([chunk, z]), np.concatenate([_loss_excess(chunk, shift, log_w, means, sigma,
                                                                             eps), values])
        width *= 2
    return z, values


def _brackets(eps, sigma, log_w, means, shift) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo [C], hi [C], inside at lo [C]): the z-grid cells where L(z; s) − ε changes sign.

    Inside means L > ε strictly: a loss equal to ε (aligned components with π_k/π_{k+1} = e^ε) is outside, so
    the boundary count stays odd (inside at the left end, outside at the right end)."""
    z, values = _loss_grid(eps, sigma, log_w, means, shift)
    inside = values > 0
    index = np.nonzero(inside[:-1] != inside[1:])[0]
    return z[index], z[index + 1], inside[index]


def _delta_per_shift(eps: float, sigma: float, weights: np.ndarray, means: np.ndarray,
                     shifts: np.ndarray) -> np.ndarray:
    """δ(ε; s) for each shift [S] = Σ over the intervals I where L > ε of [P(I) − e^ε P(I − s)]: [S].

    The crossings of ε are bracketed per shift on `_loss_grid`, then bisected to float64 resolution all at once
    (δ's error is second order in a root's error: p = e^ε p_s at a root)."""
    keep = weights > 0
    w, mu = weights[keep], means[keep]
    log_w = np.log(w)
    found = [_brackets(eps, sigma, log_w, mu, float(shift)) for shift in shifts]
    owner = np.concatenate([np.full(lo.size, i) for i, (lo, _, _) in enumerate(found)])
    lo, hi, lo_inside = (np.concatenate(parts) for parts in zip(*found, strict=True))
    shift_of = shifts[owner]
    for _ in range(26):
        mid = 0.5 * (lo + hi)
        same = (_loss_excess(mid, shift_of, log_w, mu, sigma, eps) > 0) == lo_inside
        lo, hi = np.where(same, mid, lo), np.where(same, hi, mid)
    roots = 0.5 * (lo + hi)
    deltas = np.zeros(shifts.size)
    for index, shift in enumerate(shifts):
        # The region is (−∞, r1] ∪ [r2, r3] ∪ ... (inside at the grid's left end, outside at its right end).
        edges = [-math.inf, *np.sort(roots[owner == index])]
        if len(edges) % 2:
            raise ArithmeticError(f"mog_delta: the privacy loss did not end below eps at shift {shift:g}")
        for a, b in zip(edges[0::2], edges[1::2], strict=True):
            deltas[index] += _mass(a, b, w, mu, sigma) - math.exp(eps) * _mass(a - shift, b - shift, w, mu, sigma)
    return np.maximum(deltas, 0.0)


def mog_delta(eps: float, sigma: float, weights: ArrayLike, spacing: float = 1.0, sens: float = 1.0,
              s_grid: ArrayLike | None = None) -> float:
    """max over shifts s in `s_grid` (default `default_shift_grid(sens)`) of δ(ε; s) for MoG noise, the worst
    grid shift refined between its grid neighbours.

    Args: eps > 0; sigma > 0 the common standard deviation; weights [2R + 1] symmetric π; spacing m > 0 (means
    k·m·Δ); sens Δ > 0; s_grid shifts in (0, Δ] (the mechanism's guarantee covers every shift ≤ Δ only as far
    as the grid resolves it; δ(ε; s) is smooth in s).
    """
    eps, sigma = check_epsilon(eps), check_positive("sigma", sigma, finite=True)
    spacing, sens = check_positive("spacing", spacing, finite=True), check_positive("sens", sens, finite=True)
    weights = check_weights(weights)
    shifts = default_shift_grid(sens) if s_grid is None else np.asarray(s_grid, dtype=np.float64).reshape(-1)
    if shifts.size == 0 or np.any(shifts <= 0) or np.any(shifts > sens * (1 + 1e-12)):
        raise ValueError(f"s_grid must hold shifts in (0, sens={sens:g}], got {shifts.tolist()}")
    means = _means(weights, spacing, sens)
    deltas = _delta_per_shift(eps, sigma, weights, means, shifts)
    return max(float(deltas.max()), _refine_worst_shift(eps, sigma, weights, means, shifts, deltas))


def _refine_worst_shift(eps, sigma, weights, means, shifts, deltas) -> float:
    """δ at the worst shift between the grid neighbours of the grid's worst one (bounded scalar search, to
    1e-4 of the bracket): δ(ε; s) is smooth in s, and its peak can fall between grid points."""
    from scipy import optimize  # only here: keeps the registry's import of icml26zoo.privacy light

    order = np.argsort(shifts)
    shifts, deltas = shifts[order], deltas[order]
    best = int(np.argmax(deltas))
    if shifts.size < 2 or deltas[best] == 0:
        return float(deltas[best])
    lo, hi = shifts[max(best - 1, 0)], shifts[min(best + 1, shifts.size - 1)]
    result = optimize.minimize_scalar(
        lambda s: -_delta_per_shift(eps, sigma, weights, means, np.array([s]))[0], bounds=(lo, hi),
        method="bounded", options={"xatol": 1e-4 * (hi - lo)})
    return float(-result.fun)


def mog_sigma(eps: float, delta: float, weights: ArrayLike, spacing: float = 1.0, sens: float = 1.0,
              s_grid: ArrayLike | None = None, *,
              max_sigma: float | None = None) -> float:
    """The smallest σ (relative tolerance 1e-4, on a factor-2 bracketing scan: δ need not be monotone in σ for
    a mixture) with `mog_delta(...) ≤ delta`. ValueError when no σ ≤ `max_sigma` (default 1e4·Δ) does."""
    eps, delta, sens = check_epsilon(eps), check_delta(delta), check_positive("sens", sens, finite=True)
    max_sigma = 1e4 * sens if max_sigma is None else check_positive("max_sigma", max_sigma, finite=True)
    weights = check_weights(weights)
    # The classical Gaussian calibration starts the bracketing scan near the answer's scale.
    start = min(sens * math.sqrt(2 * math.log(1.25 / delta)) / eps, max_sigma)
    return calibrate(lambda s: mog_delta(eps, s, weights, spacing, sens, s_grid), delta, start=start,
                     max_sigma=max_sigma, what="the mixture-of-Gaussians mechanism", tol=1e-4)


def mog_expected_l1(sigma: float, weights: ArrayLike, spacing: float = 1.0, sens: float = 1.0) -> float:
    """E|Z| = Σ_k π_k [σ √(2/π) e^{−μ_k²/(2σ²)} + μ_k (1 − 2Φ(−μ_k/σ))]."""
    sigma, weights = check_positive("sigma", sigma, finite=True), check_weights(weights)
    mu = _means(weights, check_positive("spacing", spacing, finite=True), check_positive("sens", sens, finite=True))
    folded = sigma * np.sqrt(2 / np.pi) * np.exp(-(mu**2) / (2 * sigma**2)) + mu * (1 - 2 * special.ndtr(-mu / sigma))
    return float(np.sum(weights * folded))


def mog_expected_l2(sigma: float, weights: ArrayLike, spacing: float = 1.0, sens: float = 1.0) -> float:
    """E Z² = σ² + Σ_k π_k μ_k²."""
    sigma, weights = check_positive("sigma", sigma, finite=True), check_weights(weights)
    mu = _means(weights, check_positive("spacing", spacing, finite=True), check_positive("sens", sens, finite=True))
    return float(sigma**2 + np.sum(weights * mu**2))


def mog_sample(key: jax.Array, sigma: float, weights: ArrayLike, spacing: float = 1.0, sens: float = 1.0,
               shape: tuple[int, ...] = ()) -> jax.Array:
    """Draws of Z: k ~ Categorical(π) over −R…R, z = k·m·Δ + σ·N(0, 1); float32 `shape`.

    JAX's PRNG is fine for simulation; a deployment needs a cryptographically secure generator."""
    sigma, weights = check_positive("sigma", sigma, finite=True), check_weights(weights)
    spacing, sens = check_positive("spacing", spacing, finite=True), check_positive("sens", sens, finite=True)
    offset_key, noise_key = jax.random.split(key)
    logits = jnp.log(jnp.asarray(weights, jnp.float32))
    offsets = jax.random.categorical(offset_key, logits, shape=shape) - weights.size // 2
    return offsets.astype(jnp.float32) * (spacing * sens) + sigma * jax.random.normal(noise_key, shape, jnp.float32)
