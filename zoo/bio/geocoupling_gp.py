"""The Gaussian-process surrogate of GeoCoupling's upper level (RECONSTRUCTION: the paper, arXiv
2606.01628, names "bi-level optimisation with a Gaussian-process surrogate"; its kernel and fitting are not public).

One GP per modality over design points (t_x, t_s) ∈ [0, 1]²: an ARD RBF kernel σ_f² exp(−½ Σ_d (Δ_d / ℓ_d)²)
plus noise σ_n², on standardised targets (zero mean, unit variance), Cholesky with jitter. The lengthscales and
the noise are chosen by the log marginal likelihood over a small candidate grid (no gradient steps: a few dozen
design points make the search exact and cheap). Computed in float64 NumPy: the upper level runs between training
segments, outside `jit`, and float64 keeps the Cholesky of a near-noise-free kernel well conditioned.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from icml26zoo.validation import check_non_negative, check_positive

__all__ = ["GPSurface", "rbf_kernel"]

LENGTHSCALES = (0.1, 0.2, 0.35, 0.6, 1.0)
NOISES = (1e-3, 1e-2, 1e-1)


def rbf_kernel(a: np.ndarray, b: np.ndarray, lengthscales: np.ndarray, signal: float = 1.0) -> np.ndarray:
    """ARD RBF kernel [P, Q] between points a [P, D] and b [Q, D]."""
    scaled = (a[:, None, :] - b[None, :, :]) / np.asarray(lengthscales)[None, None, :]
    return signal * np.exp(-0.5 * np.sum(scaled**2, axis=-1))


@dataclasses.dataclass(frozen=True)
class GPSurface:
    """A fitted GP: design points x [P, D], the Cholesky factor and weights α of standardised targets."""

    x: np.ndarray
    lengthscales: np.ndarray
    noise: float
    mean: float
    scale: float
    cholesky: np.ndarray
    alpha: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, *, lengthscales: tuple[float, ...] | None = None,
            noise: float | None = None, jitter: float = 1e-6) -> GPSurface:
        """Fits x [P, D] in [0, 1]^D -> y [P]. `lengthscales` (one per dimension) or `noise` given are used as
        they are; those left None are chosen by marginal likelihood over LENGTHSCALES^D × NOISES."""
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.ndim != 2 or y.shape != x.shape[:1] or len(y) < 2:
            raise ValueError(f"x must be [P >= 2, D] and y [P], got {list(x.shape)} and {list(y.shape)}")
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            raise ValueError("x and y must be finite, got a NaN or infinite value")
        check_non_negative("jitter", jitter, finite=True)
        mean, scale = float(y.mean()), float(y.std())
        scale = scale if scale > 1e-12 else 1.0
        target = (y - mean) / scale
        ls_options = [tuple(lengthscales)] if lengthscales is not None else list(
            itertools.product(LENGTHSCALES, repeat=x.shape[1]))
        if noise is not None:
            check_non_negative("noise", noise, finite=True)
        noise_options = [noise] if noise is not None else list(NOISES)
        best = None
        for ls, sigma in itertools.product(ls_options, noise_options):
            for value in ls:
                check_positive("lengthscales[i]", value, finite=True)
            fitted = cls._solve(x, target, np.asarray(ls, np.float64), sigma, jitter)
            if best is None or fitted[0] > best[0]:
                best = (*fitted, np.asarray(ls, np.float64), sigma)
        _, cholesky, alpha, ls, sigma = best
        return cls(x=x, lengthscales=ls, noise=float(sigma), mean=mean, scale=scale, cholesky=cholesky, alpha=alpha)

    @staticmethod
    def _solve(x: np.ndarray, target: np.ndarray, ls: np.ndarray, noise: float, jitter: float):
        """(log marginal likelihood, Cholesky factor, α = K⁻¹ y) of standardised targets."""
        kernel = rbf_kernel(x, x, ls) + (noise**2 + jitter) * np.eye(len(x))
        cholesky = np.linalg.cholesky(kernel)
        alpha = np.linalg.solve(cholesky.T, np.linalg.solve(cholesky, target))
        evidence = -0.5 * target @ alpha - np.log(np.diag(cholesky)).sum() - 0.5 * len(x) * np.log(2 * np.pi)
        return float(evidence), cholesky, alpha

    def posterior_mean(self, points: np.ndarray) -> np.ndarray:
        """Posterior mean [Q] at points [Q, D], in the targets' units."""
        cross = rbf_kernel(np.asarray(points, np.float64), self.x, self.lengthscales)
        return self.mean + self.scale * cross @ self.alpha

    def posterior_variance(self, points: np.ndarray) -> np.ndarray:
        """Posterior variance [Q] of the latent function at points [Q, D] (≥ 0), in the targets' units²."""
        cross = rbf_kernel(np.asarray(points, np.float64), self.x, self.lengthscales)
        solved = np.linalg.solve(self.cholesky, cross.T)
        return self.scale**2 * np.maximum(1.0 - np.sum(solved**2, axis=0), 0.0)
