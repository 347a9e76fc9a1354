"""SURGE: sequential Monte Carlo over diffusion trajectories with path-measure (Girsanov) importance weights.

Paper: Wei, Ren, Shi, Lu, "SURGE: Approximation and Training Free Particle Filter for Diffusion Surrogate"
(arXiv 2605.18745, ICML 2026). **A reconstruction**: no official code exists; the algorithm below is the
standard guided-proposal SMC on diffusion paths consistent with the paper's summary (Girsanov weights on whole
simulated trajectories, periodic resampling, an unbiased terminal law). The zoo's page is
docs/papers/surge.md.

One assimilation cycle, for particles x_n [N, D] and an observation y [M] (see `assimilate`):

- A surrogate forecaster is a conditional diffusion model of p(x_{n+1} | x_n): a score `score(z, α_s, σ_s,
  x_n)` of the VP-noised transition. Its reverse chain runs k = K..1 with the **prior kernel**
  p_k(z_{k−1} | z_k) = N(m_k(z_k), β_k Δ I), m_k(z) = z + (½β_k z + β_k ∇log p_{s_k}(z | x_n)) Δ
  (Euler–Maruyama for the reverse SDE, s decreasing), from z_K ~ N(0, σ_S² I); z_0 is the forecast x_{n+1}.
- **Guidance** ĥ_k(z) = N(y; H x̂_0(z), R + r_k² I) (DPS-style), x̂_0(z) = (z + σ_k² ∇log p_{s_k}(z)) / α_k
  the Tweedie denoiser, r_k² = c σ_k²/(α_k² + σ_k²); ĥ_0 = p(y | z_0) since α_0 = 1, σ_0 = 0.
- **Guided proposal** q_k(z_{k−1} | z_k) = N(m_k(z_k) + λ β_k Δ ∇log ĥ_k(z_k), β_k Δ I). With
  u_k = λ √(β_k Δ) ∇log ĥ_k(z_k) and the proposal's normal ξ_k, z_{k−1} = m_k + √(β_k Δ)(u_k + ξ_k) and the
  **discrete Girsanov** ratio is log p_k/q_k = −u_kᵀξ_k − ½‖u_k‖², from quantities the step computed anyway.
- **Twisted incremental weights** ℓ += log ĥ_{k−1}(z_{k−1}) − log ĥ_k(z_k) + log p_k/q_k, started at
  log ĥ_K(z_K) and closed by log p(y | z_0) − log ĥ_0(z_0): their product telescopes to the whole-path weight
  W = p(y | z_0) Π_k p_k/q_k whatever ĥ is, so the weighted z_0 targets the exact filtering posterior.
- After a step whose ESS < ess_threshold · N, systematic resampling (`icml26zoo.decode.resampling`); the
  log-evidence estimate accumulates the log-mean weight at each resampling and at the end.

Shapes: particles [N, D], noise [N, D], log-weights [N] (always log space), y [M]. Every function is pure and
runs under `jax.jit`; `assimilate` and `surge_filter` are jitted with the config static, except λ and
`weighted`, which are traced so that a sweep over guidance scales and both methods compile once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.assimilation.config import SurgeConfig, vp_schedule
from icml26zoo.decode.resampling import effective_sample_size, systematic_resample
from icml26zoo.validation import check_bool, check_float_array

__all__ = ["FilterTrace", "Guidance", "SurgeCycle", "assimilate", "gaussian_log_ratio", "girsanov_log_ratio",
           "guidance", "prior_mean", "surge_filter", "tweedie_denoise", "weighted_moments",
           "whole_path_log_weight"]


class Guidance(NamedTuple):
    """log ĥ_k at the particles [N], its gradient [N, D] and the surrogate's score there [N, D]."""

    log_h: jax.Array
    grad: jax.Array
    score: jax.Array


class SurgeCycle(NamedTuple):
    """One cycle's output.

    Attributes:
      particles: z_0 of each path [N, D] (the weighted cloud; not resampled after the last weight).
      log_weights: [N], unnormalised.
      log_evidence: scalar, the estimate of log p(y | x_n cloud) (log-mean weights over resampling stages).
      ess_min: scalar, the smallest ESS / N seen after any step (before its resampling decision).
      resamples: int32 scalar, resampling events inside the path.
      path: [K + 1, N, D] the states z_K..z_0 when asked for (a lineage only without resampling), else None.
    """

    particles: jax.Array
    log_weights: jax.Array
    log_evidence: jax.Array
    ess_min: jax.Array
    resamples: jax.Array
    path: jax.Array | None = None


class FilterTrace(NamedTuple):
    """Per-cycle results of `surge_filter`: weighted means [T, D], covariances [T, D, D], ESS_min / N [T],
    log-evidences [T], resampling events [T]."""

    means: jax.Array
    covs: jax.Array
    ess_min: jax.Array
    log_evidences: jax.Array
    resamples: jax.Array


def tweedie_denoise(z: jax.Array, score: jax.Array, alpha: jax.Array, sigma: jax.Array) -> jax.Array:
    """x̂_0 = E[x_0 | z_s] = (z + σ_s² ∇log p_s(z)) / α_s: z, score [N, D] -> [N, D]."""
    return (z + sigma**2 * score) / alpha


def prior_mean(z: jax.Array, score: jax.Array, beta: jax.Array, delta: float) -> jax.Array:
    """The prior kernel's mean m_k(z) = z + (½β z + β score) Δ (one reverse Euler step): [N, D] -> [N, D]."""
    return z + (0.5 * beta * z + beta * score) * delta


def girsanov_log_ratio(shift: jax.Array, noise: jax.Array) -> jax.Array:
    """log p_k/q_k = −uᵀξ − ½‖u‖² per particle: shift u [N, D], the proposal's noise ξ [N, D] -> [N]."""
    return -jnp.sum(shift * noise, axis=-1) - 0.5 * jnp.sum(shift**2, axis=-1)


def gaussian_log_ratio(point: jax.Array, mean_p: jax.Array, mean_q: jax.Array, std: jax.Array) -> jax.Array:
    """log N(point; mean_p, std² I) − log N(point; mean_q, std² I) from the densities: [N, D] x3 -> [N]."""
    def log_density(mean: jax.Array) -> jax.Array:
        dim = point.shape[-1]
        return (-0.5 * jnp.sum((point - mean) ** 2, axis=-1) / std**2
                - dim * jnp.log(std) - 0.5 * dim * math.log(2 * math.pi))
    return log_density(mean_p) - log_density(mean_q)


def guidance(z: jax.Array, condition: jax.Array, y: jax.Array, *, surrogate: Any, observation: Any,
             alpha: jax.Array, sigma: jax.Array, inflation_var: jax.Array) -> Guidance:
    """log ĥ(z) = log N(y; H x̂_0(z), R + r² I) per particle, its gradient by autodiff through the Tweedie
    denoiser, and the score (returned so that the step reuses it for the prior mean: one score call per step).
    z, condition [N, D], y [M]."""
    def summed(points: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        score = surrogate.score(points, alpha, sigma, condition)
        denoised = tweedie_denoise(points, score, alpha, sigma)
        log_h = observation.log_likelihood(denoised, y, inflation_var)
        return jnp.sum(log_h), (log_h, score)  # particles are independent: grad of the sum is per particle

    (_, (log_h, score)), grad = jax.value_and_grad(summed, has_aux=True)(z)
    return Guidance(log_h, grad, score)


def weighted_moments(particles: jax.Array, log_weights: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Self-normalised mean [D] and covariance [D, D] of a weighted cloud: particles [N, D], log_weights [N]."""
    weights = jax.nn.softmax(log_weights)
    mean = weights @ particles
    centred = particles - mean
    return mean, (weights[:, None] * centred).T @ centred


class _Coefficients(NamedTuple):
    betas: jax.Array
    alphas: jax.Array
    sigmas: jax.Array
    inflation_vars: jax.Array
    delta: float


def _coefficients(config: SurgeConfig) -> _Coefficients:
    schedule = vp_schedule(config)
    posterior_var = schedule.sigmas**2 / (schedule.alphas**2 + schedule.sigmas**2)
    as_f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
    return _Coefficients(as_f32(schedule.betas), as_f32(schedule.alphas), as_f32(schedule.sigmas),
                         as_f32(config.inflation * posterior_var), schedule.delta)


def _guidance_at(k: jax.Array, z: jax.Array, condition: jax.Array, y: jax.Array, coefficients: _Coefficients,
                 surrogate: Any, observation: Any) -> Guidance:
    return guidance(z, condition, y, surrogate=surrogate, observation=observation, alpha=coefficients.alphas[k],
                    sigma=coefficients.sigmas[k], inflation_var=coefficients.inflation_vars[k])


def _log_mean_exp(log_weights: jax.Array) -> jax.Array:
    return jax.nn.logsumexp(log_weights) - math.log(log_weights.shape[0])


def _cycle(key: jax.Array, previous: jax.Array, y: jax.Array, surrogate: Any, observation: Any,
           guidance_scale: jax.Array, weighted: jax.Array, config: SurgeConfig, record_path: bool) -> SurgeCycle:
    # `weighted` is a traced bool (False: the increments are dropped), so both methods share one compiled cycle.
    coefficients = _coefficients(config)
    num_particles = previous.shape[0]
    start_key, steps_key = jax.random.split(key)
    z = z_start = config.prior_std * jax.random.normal(start_key, previous.shape, jnp.float32)
    start = _guidance_at(config.num_steps, z, previous, y, coefficients, surrogate, observation)
    log_w = jnp.where(weighted, start.log_h, 0.0)

    def step(carry: tuple, inputs: tuple[jax.Array, jax.Array]) -> tuple[tuple, jax.Array]:
        z, condition, here, log_w, log_evidence, ess_min, resamples = carry
        k, step_key = inputs
        noise_key, resample_key = jax.random.split(step_key)
        std = jnp.sqrt(coefficients.betas[k] * coefficients.delta)
        shift = guidance_scale * std * here.grad
        noise = jax.random.normal(noise_key, z.shape, z.dtype)
        z = prior_mean(z, here.score, coefficients.betas[k], coefficients.delta) + std * (shift + noise)
        there = _guidance_at(k - 1, z, condition, y, coefficients, surrogate, observation)
        increment = there.log_h - here.log_h + girsanov_log_ratio(shift, noise)
        log_w = log_w + jnp.where(weighted, increment, 0.0)
        ess = effective_sample_size(log_w) / num_particles
        resample = weighted & (ess < config.ess_threshold)
        ancestors = jnp.where(resample, systematic_resample(resample_key, log_w), jnp.arange(num_particles))
        log_evidence = log_evidence + jnp.where(resample, _log_mean_exp(log_w), 0.0)
        log_w = jnp.where(resample, jnp.zeros_like(log_w), log_w)
        z, condition, there = jax.tree.map(lambda leaf: leaf[ancestors], (z, condition, there))
        carry = (z, condition, there, log_w, log_evidence, jnp.minimum(ess_min, ess),
                 resamples + resample.astype(jnp.int32))
        return carry, z

    steps = jnp.arange(config.num_steps, 0, -1)
    keys = jax.random.split(steps_key, config.num_steps)
    start_ess = effective_sample_size(log_w) / num_particles
    carry = (z, previous, start, log_w, jnp.float32(0.0), start_ess, jnp.int32(0))
    (z, _, final, log_w, log_evidence, ess_min, resamples), states = jax.lax.scan(step, carry, (steps, keys))
    closing = observation.log_likelihood(z, y) - final.log_h  # p(y | z_0) / ĥ_0(z_0), = 1 when r_0 = 0
    log_w = log_w + jnp.where(weighted, closing, 0.0)
    ess_min = jnp.minimum(ess_min, effective_sample_size(log_w) / num_particles)
    # Unweighted paths estimate no evidence.
    log_evidence = jnp.where(weighted, log_evidence + _log_mean_exp(log_w), jnp.nan)
    path = jnp.concatenate([z_start[None], states]) if record_path else None
    return SurgeCycle(z, log_w, log_evidence, ess_min, resamples, path)


# λ is traced (a sweep over guidance scales compiles once): the static config carries a placeholder λ = 0.
@functools.partial(jax.jit, static_argnames=("config", "record_path"))
def _cycle_jit(key, previous, y, surrogate, observation, guidance_scale, weighted, config, record_path):
    return _cycle(key, previous, y, surrogate, observation, guidance_scale, weighted, config, record_path)


def _static(config: SurgeConfig) -> SurgeConfig:
    return dataclasses.replace(config, guidance_scale=0.0)


def _check_inputs(config: SurgeConfig, particles: jax.Array, observations: jax.Array, observation: Any,
                  particles_name: str, observations_layout: tuple[int | None, ...], layout: str) -> None:
    if not isinstance(config, SurgeConfig):
        raise ValueError(f"config must be a SurgeConfig, got {type(config).__name__}")
    check_float_array(particles_name, particles, (config.num_particles, None), "[N, D] with N = num_particles")
    rows = observation.matrix.shape[0]
    check_float_array("observations" if len(observations_layout) == 2 else "y", observations,
                      (*observations_layout[:-1], rows), layout)


def assimilate(key: jax.Array, previous: jax.Array, y: jax.Array, *, surrogate: Any, observation: Any,
               config: SurgeConfig, weighted: bool = True, record_path: bool = False) -> SurgeCycle:
    """One SURGE cycle: forecast each particle x_n through the guided reverse diffusion and weight the paths.

    Args:
      key: a PRNG key.
      previous: x_n [N, D], equally weighted (N = config.num_particles).
      y: the observation y_{n+1} [M].
      surrogate: a pytree with `score(z [N, D], alpha, sigma, condition [N, D]) -> [N, D]`, the score of the
        VP-noised transition p_s(z | x_n) (e.g. `linear_gaussian.GaussianTransition`).
      observation: a pytree with `matrix` [M, D] (its M is checked against y) and `log_likelihood(x [N, D],
        y [M], extra_var) -> [N]` (e.g. `observation.LinearObservation`).
      config: a `SurgeConfig`.
      weighted: False is the negative control, plain guidance: the same guided paths with their weights dropped
        (equal weights, no resampling, NaN evidence, ESS_min = 1); biased for every λ but the exact-ĥ,
        continuous limit.
      record_path: also return the path z_K..z_0 [K + 1, N, D] (a lineage only when nothing was resampled:
        use ess_threshold = 0).

    Returns:
      a `SurgeCycle`: the weighted cloud of x_{n+1}, log-evidence, ESS_min / N, resampling count.
    """
    _check_inputs(config, previous, y, observation, "previous", (None,), "[M]")
    check_bool("weighted", weighted)
    check_bool("record_path", record_path)
    return _cycle_jit(key, previous, y, surrogate, observation, jnp.float32(config.guidance_scale),
                      jnp.bool_(weighted), _static(config), record_path)


@functools.partial(jax.jit, static_argnames=("config",))
def _filter_jit(key, initial, observations, surrogate, observation, guidance_scale, weighted, config):
    def cycle(particles: jax.Array, inputs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, tuple]:
        y, cycle_key = inputs
        forecast_key, resample_key = jax.random.split(cycle_key)
        out = _cycle(forecast_key, particles, y, surrogate, observation, guidance_scale, weighted, config, False)
        mean, cov = weighted_moments(out.particles, out.log_weights)
        # Equal weights for the next cycle (the spec's final resampling); a no-op for unweighted paths.
        survivors = out.particles[systematic_resample(resample_key, out.log_weights)]
        return survivors, (mean, cov, out.ess_min, out.log_evidence, out.resamples)

    keys = jax.random.split(key, observations.shape[0])
    _, (means, covs, ess_min, log_evidences, resamples) = jax.lax.scan(cycle, initial, (observations, keys))
    return FilterTrace(means, covs, ess_min, log_evidences, resamples)


def surge_filter(key: jax.Array, initial: jax.Array, observations: jax.Array, *, surrogate: Any,
                 observation: Any, config: SurgeConfig, weighted: bool = True) -> FilterTrace:
    """T assimilation cycles (`assimilate`, then systematic resampling to equal weights) from the particles
    `initial` [N, D] (samples of x_0) over `observations` [T, M] (y_t observes x_t, t = 1..T).

    Returns a `FilterTrace` of the weighted posterior mean and covariance of every x_t.
    """
    _check_inputs(config, initial, observations, observation, "initial", (None, None), "[T, M]")
    check_bool("weighted", weighted)
    return _filter_jit(key, initial, observations, surrogate, observation, jnp.float32(config.guidance_scale),
                       jnp.bool_(weighted), _static(config))


@functools.partial(jax.jit, static_argnames=("config",))
def whole_path_log_weight(path: jax.Array, previous: jax.Array, y: jax.Array, *, surrogate: Any,
                          observation: Any, config: SurgeConfig) -> jax.Array:
    """log W = log p(y | z_0) + Σ_k [log p_k(z_{k−1} | z_k) − log q_k(z_{k−1} | z_k)] of given paths, from
    the Gaussian densities (no Girsanov form, no telescoping): the reference for both.

    path [K + 1, N, D] (z_K..z_0, as `assimilate(..., record_path=True)` returns), previous [N, D], y [M] -> [N].
    """
    coefficients = _coefficients(config)
    total = observation.log_likelihood(path[-1], y)
    for index in range(config.num_steps):
        k = config.num_steps - index
        here = _guidance_at(k, path[index], previous, y, coefficients, surrogate, observation)
        std = jnp.sqrt(coefficients.betas[k] * coefficients.delta)
        mean_p = prior_mean(path[index], here.score, coefficients.betas[k], coefficients.delta)
        mean_q = mean_p + config.guidance_scale * std**2 * here.grad
        total = total + gaussian_log_ratio(path[index + 1], mean_p, mean_q, std)
    return total
