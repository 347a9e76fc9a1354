"""The Kalman filter: the exact filtering posterior of a linear-Gaussian model, SURGE's reference answer.

Model: x_{n+1} = F x_n + w, w ~ N(0, P); y_n = H x_n + η, η ~ N(0, R). Everything is NumPy float64 and
written out step by step, as an oracle should be: predict (m⁻ = F m, C⁻ = F C Fᵀ + P), then update with the
gain K = C⁻Hᵀ(H C⁻ Hᵀ + R)⁻¹ (m = m⁻ + K(y − H m⁻), C = (I − K H) C⁻ (I − K H)ᵀ + K R Kᵀ, Joseph's form,
symmetric and positive by construction). The evidence of each observation is log N(y; H m⁻, H C⁻ Hᵀ + R).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["KalmanTrace", "kalman_filter", "kalman_predict", "kalman_update"]


class KalmanTrace(NamedTuple):
    """Filtering means [T, D], covariances [T, D, D] and log-evidences [T] (log p(y_t | y_{<t}))."""

    means: np.ndarray
    covs: np.ndarray
    log_evidences: np.ndarray


def kalman_predict(mean: np.ndarray, cov: np.ndarray, transition: np.ndarray,
                   noise_cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """N(mean [D], cov [D, D]) pushed through x' = F x + w, w ~ N(0, P): returns (F m, F C Fᵀ + P)."""
    return transition @ mean, transition @ cov @ transition.T + noise_cov


def kalman_update(mean: np.ndarray, cov: np.ndarray, y: np.ndarray, observation: np.ndarray,
                  noise_cov: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The Gaussian prior N(mean [D], cov [D, D]) conditioned on y [M] = H x + η, η ~ N(0, R [M, M]).

    Returns (posterior mean [D], posterior covariance [D, D], log N(y; H m, H C Hᵀ + R)).
    """
    innovation = y - observation @ mean
    innovation_cov = observation @ cov @ observation.T + noise_cov
    gain = np.linalg.solve(innovation_cov, observation @ cov).T
    shrink = np.eye(mean.shape[0]) - gain @ observation
    posterior_cov = shrink @ cov @ shrink.T + gain @ noise_cov @ gain.T
    _, logdet = np.linalg.slogdet(2 * np.pi * innovation_cov)
    log_evidence = -0.5 * (logdet + innovation @ np.linalg.solve(innovation_cov, innovation))
    return mean + gain @ innovation, posterior_cov, float(log_evidence)


def kalman_filter(mean: np.ndarray, cov: np.ndarray, observations: np.ndarray, *, transition: np.ndarray,
                  noise_cov: np.ndarray, observation: np.ndarray, observation_cov: np.ndarray) -> KalmanTrace:
    """Filters observations [T, M] from the prior N(mean, cov) on x_0: each step predicts, then updates on y_t
    (y_t observes x_t, t = 1..T). Returns the T filtering posteriors and log-evidences."""
    mean, cov = np.asarray(mean, np.float64), np.asarray(cov, np.float64)
    means, covs, evidences = [], [], []
    for y in np.asarray(observations, np.float64):
        mean, cov = kalman_predict(mean, cov, transition, noise_cov)
        mean, cov, log_evidence = kalman_update(mean, cov, y, observation, observation_cov)
        means.append(mean)
        covs.append(cov)
        evidences.append(log_evidence)
    return KalmanTrace(np.stack(means), np.stack(covs), np.asarray(evidences))
