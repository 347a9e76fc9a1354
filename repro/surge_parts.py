"""The linear-Gaussian assimilation task of the SURGE reproduction, its runs and their scores.

The system is fixed (seeds draw the truth, the observations and the particles): a 4-D state made of two damped
rotations, x_{t+1} = A x_t + w, w ~ N(0, Q), observed in its first and third coordinates with noise std 0.5.
The diffusion surrogate is `GaussianTransition`'s exact score, so the Kalman filter of the discretised chain's
own transition (F, P) (`surrogate_transition`) is the exact filtering posterior every particle method targets.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo import assimilation as da

__all__ = ["METHODS", "Task", "kalman_rows", "make_task", "particle_scores", "run_particles", "standardised_errors",
           "system_matrices"]

METHODS = ("surge", "guidance")  # SURGE (weighted), plain guidance (the same paths, weights dropped)
OBSERVATION_STD = 0.5
INITIAL_STD = 1.0


def _rotation(angle: float) -> np.ndarray:
    return np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])


def system_matrices() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(A [4, 4], Q [4, 4], H [2, 4], R [2, 2]): A = 0.95 · blockdiag(rot(0.3), rot(0.7)), Q with
    variances 0.3, 0.2, 0.3, 0.2 and a 0.05 covariance inside each block, H picks coordinates 1 and 3."""
    a = np.zeros((4, 4))
    a[:2, :2], a[2:, 2:] = 0.95 * _rotation(0.3), 0.95 * _rotation(0.7)
    block = np.array([[0.3, 0.05], [0.05, 0.2]])
    q = np.kron(np.eye(2), block)
    h = np.zeros((2, 4))
    h[0, 0] = h[1, 2] = 1.0
    return a, q, h, OBSERVATION_STD**2 * np.eye(2)


class Task(NamedTuple):
    """One seed's data: the truth x_1..x_T [T, 4], observations y_1..y_T [T, 2], the initial particles [N, 4],
    and the exact (Kalman) filtering means [T, 4] and variances [T, 4] under the chain's transition (F, P)."""

    truth: np.ndarray
    observations: np.ndarray
    initial: jax.Array
    kalman_means: np.ndarray
    kalman_vars: np.ndarray
    kalman_log_evidences: np.ndarray


def make_task(seed: int, *, cycles: int, config: da.SurgeConfig) -> Task:
    """Simulates `cycles` steps of the system from x_0 ~ N(0, I) and filters them exactly."""
    a, q, h, r = system_matrices()
    rng = np.random.default_rng(seed)
    state = rng.normal(scale=INITIAL_STD, size=4)
    truth, observations = [], []
    for _ in range(cycles):
        state = a @ state + rng.multivariate_normal(np.zeros(4), q)
        truth.append(state)
        observations.append(h @ state + rng.normal(scale=OBSERVATION_STD, size=2))
    transition, noise = da.surrogate_transition(da.gaussian_transition(a, q), config)
    exact = da.kalman_filter(np.zeros(4), INITIAL_STD**2 * np.eye(4), np.asarray(observations),
                             transition=transition, noise_cov=noise, observation=h, observation_cov=r)
    initial = jnp.asarray(rng.normal(scale=INITIAL_STD, size=(config.num_particles, 4)), jnp.float32)
    return Task(np.asarray(truth), np.asarray(observations), initial, exact.means,
                np.diagonal(exact.covs, axis1=1, axis2=2), exact.log_evidences)


def run_particles(task: Task, method: str, guidance_scale: float, *, seed: int,
                  config: da.SurgeConfig) -> da.FilterTrace:
    """SURGE (`method` "surge") or plain guidance ("guidance") over the task's observations."""
    a, q, h, r = system_matrices()
    config = dataclasses.replace(config, guidance_scale=guidance_scale)
    return da.surge_filter(jax.random.PRNGKey(1000 + seed), task.initial,
                           jnp.asarray(task.observations, jnp.float32),
                           surrogate=da.gaussian_transition(a, q), observation=da.linear_observation(h, np.diag(r)),
                           config=config, weighted=method == "surge")


def standardised_errors(task: Task, trace: da.FilterTrace) -> np.ndarray:
    """(particle mean − Kalman mean) / Kalman std per cycle and coordinate, [T, 4]."""
    return (np.asarray(trace.means, np.float64) - task.kalman_means) / np.sqrt(task.kalman_vars)


def particle_scores(task: Task, trace: da.FilterTrace) -> dict[str, float]:
    """Scores of a particle filter against the exact answer and the truth, averaged over cycles:

    err_kalman: RMS over cycles and coordinates of (mean − Kalman mean) / Kalman std (0 = exact);
    var_ratio: mean of the particle variance over the Kalman variance (1 = exact);
    rmse_truth: RMS error of the posterior mean to the true state;
    ess_min: the smallest ESS / N of any cycle; logZ_err: mean of (log-evidence estimate − Kalman's), per cycle.
    """
    means = np.asarray(trace.means, np.float64)
    variances = np.diagonal(np.asarray(trace.covs, np.float64), axis1=1, axis2=2)
    standardised = standardised_errors(task, trace)
    log_evidences = np.asarray(trace.log_evidences, np.float64)
    return {"err_kalman": float(np.sqrt(np.mean(standardised**2))),
            "var_ratio": float(np.mean(variances / task.kalman_vars)),
            "rmse_truth": float(np.sqrt(np.mean((means - task.truth) ** 2))),
            "ess_min": float(np.min(np.asarray(trace.ess_min))),
            "logZ_err": float(np.mean(log_evidences - task.kalman_log_evidences))}


def kalman_rows(task: Task) -> dict[str, dict[str, float]]:
    """The two Kalman filters' scores: the exact one (the chain's (F, P), the reference, error 0 by definition)
    and the one of the true system (A, Q), whose distance to the exact one is the diffusion's discretisation."""
    a, q, h, r = system_matrices()
    system_filter = da.kalman_filter(np.zeros(4), INITIAL_STD**2 * np.eye(4), task.observations, transition=a,
                                     noise_cov=q, observation=h, observation_cov=r)
    system_vars = np.diagonal(system_filter.covs, axis1=1, axis2=2)
    standardised = (system_filter.means - task.kalman_means) / np.sqrt(task.kalman_vars)
    return {
        "kalman_chain": {"err_kalman": 0.0, "var_ratio": 1.0,
                         "rmse_truth": float(np.sqrt(np.mean((task.kalman_means - task.truth) ** 2)))},
        "kalman_system": {"err_kalman": float(np.sqrt(np.mean(standardised**2))),
                          "var_ratio": float(np.mean(system_vars / task.kalman_vars)),
                          "rmse_truth": float(np.sqrt(np.mean((system_filter.means - task.truth) ** 2)))},
    }
