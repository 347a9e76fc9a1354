"""The linear-Gaussian assimilation task of the SURGE reproduction, its runs and their scores.

The system is fixed (seeds draw the truth, the observations and the particles): a 4-D state made of two damped
rotations, x_{t+1} = A x_t + w, w ~ N(0, Q), observed in its first and third coordinates with noise std 0.5.
The diffusion surrogate is `GaussianTransition`'s exact score, so the Kalman filter of the discretised chain's
own transition (F, P) (`surrogate_transition`) is the exact filtering posterior every particle method targets.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo import assimilation as da

__all__ = ["LorenzTask", "METHODS", "Task", "ensemble_kalman_filter", "kalman_rows", "lorenz_models",
           "make_lorenz_task", "make_task", "particle_scores", "run_lorenz", "run_particles", "standardised_errors",
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


# Lorenz-63: the paper's small benchmark, with the analytic surrogate (`assimilation.lorenz63`).
LORENZ_NOISE_VAR = 0.25      # model noise std 0.5 per cycle of 0.1 time units
LORENZ_OBSERVATION_STD = 1.0  # only x is observed
LORENZ_SPIN_UP = 200          # cycles run before the first observation, onto the attractor
LORENZ_BETA_MAX = 20.0        # α_1 ≈ 0.007: the chain's N(0, I) start forgets Φ(x_n)'s scale (|x| ~ 20)


class LorenzTask(NamedTuple):
    """One seed's Lorenz-63 data: truth [T, 3], observations of x [T, 1], initial particles [N, 3]
    (the spun-up initial state plus N(0, I) noise)."""

    truth: np.ndarray
    observations: np.ndarray
    initial: jax.Array


def lorenz_models() -> tuple[da.Lorenz63Transition, da.LinearObservation]:
    """The transition (RK4 dt = 0.01 x 10, noise variance 0.25) and the observation of x (noise std 1)."""
    transition = da.Lorenz63Transition(jnp.full(3, LORENZ_NOISE_VAR, jnp.float32))
    observation = da.linear_observation(np.array([[1.0, 0.0, 0.0]]), np.array([LORENZ_OBSERVATION_STD**2]))
    return transition, observation


def make_lorenz_task(seed: int, *, cycles: int, num_particles: int) -> LorenzTask:
    """Simulates the noisy Lorenz-63 system from (1, 1, 20) + N(0, I) through a spin-up, then `cycles` observed
    cycles."""
    transition, observation = lorenz_models()
    truth, observations, initial = _simulate_lorenz(jax.random.PRNGKey(seed), transition, observation,
                                                    cycles=cycles, num_particles=num_particles)
    return LorenzTask(np.asarray(truth), np.asarray(observations), initial)


# One compiled program for the whole simulation (spin-up, observed cycles, initial particles).
@functools.partial(jax.jit, static_argnames=("cycles", "num_particles"))
def _simulate_lorenz(key: jax.Array, transition: da.Lorenz63Transition, observation: da.LinearObservation, *,
                     cycles: int, num_particles: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    keys = jax.random.split(key, 5)
    start = jnp.array([1.0, 1.0, 20.0]) + jax.random.normal(keys[0], (3,))

    def advance(state: jax.Array, step_key: jax.Array) -> tuple[jax.Array, jax.Array]:
        state = transition.sample(step_key, state[None])[0]
        return state, state

    state, _ = jax.lax.scan(advance, start, jax.random.split(keys[1], LORENZ_SPIN_UP))
    _, truth = jax.lax.scan(advance, state, jax.random.split(keys[2], cycles))
    initial = state + jax.random.normal(keys[3], (num_particles, 3))
    return truth, observation.sample(keys[4], truth), initial


def run_lorenz(task: LorenzTask, method: str, guidance_scale: float, *, seed: int,
               config: da.SurgeConfig) -> tuple[np.ndarray, np.ndarray]:
    """SURGE, plain guidance or the EnKF on a Lorenz task: (posterior means [T, 3], ESS_min / N [T], NaN for the
    EnKF and for plain guidance)."""
    transition, observation = lorenz_models()
    observations = jnp.asarray(task.observations, jnp.float32)
    key = jax.random.PRNGKey(1000 + seed)
    if method == "enkf":
        means = ensemble_kalman_filter(key, task.initial, observations, transition=transition,
                                       observation=observation)
        return np.asarray(means), np.full(len(task.truth), np.nan)
    config = dataclasses.replace(config, guidance_scale=guidance_scale, beta_max=LORENZ_BETA_MAX)
    trace = da.surge_filter(key, task.initial, observations, surrogate=transition, observation=observation,
                            config=config, weighted=method == "surge")
    ess = np.asarray(trace.ess_min) if method == "surge" else np.full(len(task.truth), np.nan)
    return np.asarray(trace.means), ess


@jax.jit
def ensemble_kalman_filter(key: jax.Array, initial: jax.Array, observations: jax.Array, *,
                           transition: da.Lorenz63Transition, observation: da.LinearObservation) -> jax.Array:
    """The stochastic (perturbed-observation) EnKF, the standard baseline: each cycle samples the transition for
    every member, then moves it by the gain of the ensemble covariance P: x += P Hᵀ (H P Hᵀ + R)⁻¹ (y + η − H x).
    initial [N, D], observations [T, M] -> analysis means [T, D]."""
    def cycle(ensemble: jax.Array, inputs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        y, cycle_key = inputs
        forecast_key, perturb_key = jax.random.split(cycle_key)
        ensemble = transition.sample(forecast_key, ensemble)
        anomalies = ensemble - ensemble.mean(0)
        cov = anomalies.T @ anomalies / (ensemble.shape[0] - 1)
        h = observation.matrix
        gain = jnp.linalg.solve(h @ cov @ h.T + jnp.diag(observation.noise_var), h @ cov).T
        noise = jax.random.normal(perturb_key, (ensemble.shape[0], y.shape[0]))
        perturbed = y + jnp.sqrt(observation.noise_var) * noise
        ensemble = ensemble + (perturbed - observation.apply(ensemble)) @ gain.T
        return ensemble, ensemble.mean(0)

    keys = jax.random.split(key, observations.shape[0])
    return jax.lax.scan(cycle, initial, (observations, keys))[1]
