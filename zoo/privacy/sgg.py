"""Spherical Generalized Gamma (SGG) noise, after Wei, Bienstock, Polychroniadou, "Asymptotic Optimality of the
High-Dimensional Gaussian Mechanism and Improved Low-Dimensional Mechanisms for Differential Privacy" (ICML
2026, arXiv 2606.08681).

Noise X ∈ R^T, spherically symmetric, with density f(x) ∝ ‖x‖^{a−T} exp(−(‖x‖/σ)^p) (a, p, σ > 0), so the
radius R = ‖X‖ has the generalized-gamma density ∝ r^{a−1} exp(−(r/σ)^p). Members: a = T, p = 2 is the
Gaussian N(0, (σ²/2) I_T); a = T, p = 1 is the ℓ2 mechanism (Joseph, Kulesza, Yu, arXiv 2502.15929), density
∝ exp(−‖x‖/σ), pure (Δ/σ)-DP. RECONSTRUCTION: the paper's code is not available; this density form is the
zoo's reading of the abstract ("a three-parameter family containing the Gaussian and the ℓ2 mechanism").

Privacy: by rotation invariance the worst shift of norm Δ is s = Δ e₁; the privacy loss
L = log f(x) − log f(x − s) depends on (r, u = cos∠(x, e₁)) only, ‖x − s‖² = r² − 2ruΔ + Δ², and

    δ(ε) = E_{X∼f}[(1 − e^{ε − L(X)})_+]

by a 2-D product quadrature: r on a uniform grid in log G (G = (R/σ)^p ~ Gamma(a/p), from its 1e-30 to its
1 − 1e-30 quantile), u = cos θ with θ on a midpoint grid weighted ∝ sin^{T−2} θ (T = 1: u = ±1). The same grid
gives the privacy-loss distribution (`privacy_loss_pmf`) that `accounting.sgg_pld` composes. δ depends on
Δ/σ only, so `sgg_sigma` bisects on σ; shifts shorter than Δ are equivalent to a larger σ, and `sgg_sigma`
verifies them (0.25Δ, 0.5Δ, 0.75Δ) rather than assuming monotonicity.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from icml26zoo.privacy._checks import calibrate, check_delta, check_dimension, check_epsilon
from icml26zoo.validation import check_positive, is_integer

__all__ = ["privacy_loss_pmf", "sgg_delta", "sgg_expected_l1", "sgg_expected_l2", "sgg_sample", "sgg_sigma"]

DEFAULT_GRID = (1200, 1200)
# Mass left outside the radius grid on each side: counted as infinite loss by the pessimistic PLD.
_TAIL_MASS = 1e-30
_SHORTER_SHIFTS = (0.25, 0.5, 0.75)


def check_shape(a: float, p: float, dim: int) -> tuple[float, float, int]:
    return check_positive("a", a, finite=True), check_positive("p", p, finite=True), check_dimension(dim, "dim")


def _radius_grid(sigma: float, a: float, p: float, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Radii [N] and their probabilities [N] (summing to 1): a uniform grid in y = log G, G ~ Gamma(a/p),
    R = σ G^{1/p}, the density of y being exp(k y − e^y) / Γ(k) with k = a/p."""
    shape = a / p
    lo = math.log(max(special.gammaincinv(shape, _TAIL_MASS), 1e-300))
    hi = math.log(special.gammainccinv(shape, _TAIL_MASS))
    y = np.linspace(lo, hi, points)
    log_weight = shape * y - np.exp(y)
    weights = np.exp(log_weight - log_weight.max())
    return sigma * np.exp(y / p), weights / weights.sum()


def _cosine_grid(dim: int, points: int) -> tuple[np.ndarray, np.ndarray]:
    """u = cos∠(X, e₁) [M] and probabilities [M] for X uniform on the sphere S^{T−1}."""
    if dim == 1:
        return np.array([-1.0, 1.0]), np.array([0.5, 0.5])
    theta = (np.arange(points) + 0.5) * (np.pi / points)
    weights = np.sin(theta) ** (dim - 2)
    return np.cos(theta), weights / weights.sum()


def _loss_on_grid(sigma, a, p, dim, sens, grid) -> tuple[np.ndarray, np.ndarray]:
    """(L [N, M], probability [N, M]) of the privacy loss L = log f(x) − log f(x − Δ e₁) under X ~ f."""
    # With one dimension there is no angle grid, so the radius grid takes its points (same cost, finer r).
    radii, radius_weights = _radius_grid(sigma, a, p, grid[0] * (grid[1] // 2 if dim == 1 else 1))
    cosines, cosine_weights = _cosine_grid(dim, grid[1])
    r, u = radii[:, None], cosines[None, :]
    shifted_sq = np.maximum(r**2 - 2 * r * u * sens + sens**2, 1e-300)
    shifted = np.sqrt(shifted_sq)
    loss = (a - dim) * (np.log(r) - 0.5 * np.log(shifted_sq)) - (r / sigma) ** p + (shifted / sigma) ** p
    return loss, radius_weights[:, None] * cosine_weights[None, :]


def _check_grid(grid) -> tuple[int, int]:
    if (not isinstance(grid, tuple) or len(grid) != 2
            or not all(is_integer(n) and n >= 16 for n in grid)):
        raise ValueError(f"grid must be a pair of integers >= 16 (radius points, angle points), got {grid!r}")
    return grid


def sgg_delta(eps: float, sigma: float, a: float, p: float, dim: int, sens: float = 1.0, *,
              grid: tuple[int, int] = DEFAULT_GRID) -> float:
    """δ(ε) of SGG(σ, a, p) noise in R^dim at ℓ2 sensitivity `sens` (the shift Δ e₁), by the 2-D quadrature."""
    eps = check_epsilon(eps)
    sigma, sens = check_positive("sigma", sigma, finite=True), check_positive("sens", sens, finite=True)
    a, p, dim = check_shape(a, p, dim)
    loss, prob = _loss_on_grid(sigma, a, p, dim, sens, _check_grid(grid))
    return float(np.sum(prob * -np.expm1(np.minimum(eps - loss, 0.0))))


def sgg_sigma(eps: float, delta: float, a: float, p: float, dim: int, sens: float = 1.0, *,
              grid: tuple[int, int] = DEFAULT_GRID, max_sigma: float | None = None) -> float:
    """The smallest σ (relative tolerance 1e-5) with `sgg_delta(...) ≤ delta`, also checked at the shifts
    0.25Δ, 0.5Δ, 0.75Δ. ValueError when no σ ≤ `max_sigma` (default 1e4·Δ) meets (eps, delta)."""
    eps, delta, sens = check_epsilon(eps), check_delta(delta), check_positive("sens", sens, finite=True)
    a, p, dim = check_shape(a, p, dim)
    max_sigma = 1e4 * sens if max_sigma is None else check_positive("max_sigma", max_sigma, finite=True)
    start = min(sens * math.sqrt(2 * math.log(1.25 / delta)) / eps, max_sigma)
    what = f"the SGG mechanism (a={a:g}, p={p:g}, dim={dim})"
    sigma = calibrate(lambda s: sgg_delta(eps, s, a, p, dim, sens, grid=grid), delta, start=start,
                      max_sigma=max_sigma, what=what, tol=1e-5)
    for fraction in _SHORTER_SHIFTS:
        shorter = sgg_delta(eps, sigma, a, p, dim, fraction * sens, grid=grid)
        if shorter > delta:
            raise ValueError(f"{what}: sigma = {sigma:.6g} meets delta at the shift sens but not at "
                             f"{fraction:g}*sens (delta {shorter:.3g} > {delta:g}); it cannot meet (eps, delta) "
                             f"by this calibration")
    return sigma


def privacy_loss_pmf(sigma: float, a: float, p: float, dim: int, sens: float = 1.0,
                     discretization: float = 1e-3, *,
                     grid: tuple[int, int] = DEFAULT_GRID) -> tuple[dict[int, float], float]:
    """The privacy-loss distribution of SGG noise, rounded up to multiples of `discretization` (pessimistic):
    ({k: P(L ∈ ((k−1)h, kh])}, infinity_mass). The mass the radius grid leaves out (2e-30) is counted as
    infinite loss. By symmetry (x ↦ s − x swaps f and f(· − s)) the reverse direction has the same PLD."""
    sigma, sens = check_positive("sigma", sigma, finite=True), check_positive("sens", sens, finite=True)
    discretization = check_positive("discretization", discretization, finite=True)
    a, p, dim = check_shape(a, p, dim)
    loss, prob = _loss_on_grid(sigma, a, p, dim, sens, _check_grid(grid))
    index = np.ceil(loss.reshape(-1) / discretization).astype(np.int64)
    offset = index.min()
    masses = np.bincount(index - offset, weights=prob.reshape(-1))
    keep = np.nonzero(masses > 0)[0]
    return {int(k + offset): float(masses[k]) for k in keep}, 2 * _TAIL_MASS


def sgg_expected_l2(sigma: float, a: float, p: float) -> float:
    """E‖X‖₂² = σ² Γ((a+2)/p) / Γ(a/p) (per-coordinate MSE: divide by the dimension)."""
    sigma = check_positive("sigma", sigma, finite=True)
    a, p = check_positive("a", a, finite=True), check_positive("p", p, finite=True)
    return float(sigma**2 * math.exp(special.gammaln((a + 2) / p) - special.gammaln(a / p)))


def sgg_expected_l1(sigma: float, a: float, p: float, dim: int) -> float:
    """E‖X‖₁ = T · E R · E|U₁|, E R = σ Γ((a+1)/p) / Γ(a/p), E|U₁| = Γ(T/2) / (√π Γ((T+1)/2))."""
    sigma, (a, p, dim) = check_positive("sigma", sigma, finite=True), check_shape(a, p, dim)
    mean_radius = sigma * math.exp(special.gammaln((a + 1) / p) - special.gammaln(a / p))
    mean_abs_cosine = math.exp(special.gammaln(dim / 2) - special.gammaln((dim + 1) / 2)) / math.sqrt(math.pi)
    return float(dim * mean_radius * mean_abs_cosine)


def sgg_sample(key: jax.Array, sigma: float, a: float, p: float, dim: int,
               shape: tuple[int, ...] = ()) -> jax.Array:
    """Draws of X: G ~ Gamma(a/p, 1), R = σ G^{1/p}, U = N(0, I)/‖N(0, I)‖, X = R U; float32 `shape + (dim,)`.

    JAX's PRNG is fine for simulation; a deployment needs a cryptographically secure generator."""
    sigma, (a, p, dim) = check_positive("sigma", sigma, finite=True), check_shape(a, p, dim)
    return _draw(key, jnp.float32(sigma), jnp.float32(a), jnp.float32(p), dim, tuple(shape))


@functools.partial(jax.jit, static_argnums=(4, 5))
def _draw(key: jax.Array, sigma: jax.Array, a: jax.Array, p: jax.Array, dim: int,
          shape: tuple[int, ...]) -> jax.Array:
    """One compiled program per (dim, shape); σ, a, p are traced, so a sweep over them compiles once."""
    radius_key, direction_key = jax.random.split(key)
    gamma = jax.random.gamma(radius_key, a / p, shape, jnp.float32)
    radius = sigma * gamma ** (1.0 / p)
    direction = jax.random.normal(direction_key, (*shape, dim), jnp.float32)
    direction = direction / jnp.linalg.norm(direction, axis=-1, keepdims=True)
    return radius[..., None] * direction
