"""SURGE's options (a frozen, validated dataclass) and the variance-preserving diffusion schedule they define.

The schedule is the forward SDE dz = −½β(s) z ds + √β(s) dW on s ∈ [0, 1] with a linear β(s) = β_min +
(β_max − β_min) s, so z_s | z_0 ~ N(α_s z_0, σ_s² I), α_s = exp(−½∫₀ˢβ), σ_s² = 1 − α_s². The reverse chain runs
on the grid s_k = k/K, k = K..0, with step Δ = 1/K.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from icml26zoo.validation import check_int, check_interval, check_non_negative, check_positive

__all__ = ["DiffusionSchedule", "SurgeConfig", "vp_schedule"]


@dataclasses.dataclass(frozen=True)
class SurgeConfig:
    """Options of one SURGE assimilation cycle. Every field is checked on construction (ValueError naming it).

    Attributes:
      num_particles: N, particles per cycle (>= 1).
      num_steps: K, reverse-diffusion steps per cycle (>= 1).
      guidance_scale: λ >= 0, the weight of the guidance drift g²∇log ĥ_k in the proposal (0: the prior
        diffusion; the importance weights keep every λ unbiased, λ only changes the variance).
      ess_threshold: resample (systematic) after a step whose ESS < ess_threshold · N; 0 never resamples
        inside the path, 1 resamples whenever the weights are not all equal.
      inflation: c >= 0 in the DPS-style ĥ_k's variance inflation r_k² = c · σ_k² / (α_k² + σ_k²), the
        posterior variance of x_0 given z_k for unit-variance data (a tempering: larger c, flatter ĥ_k).
      beta_min, beta_max: the linear VP schedule β(s) on s ∈ [0, 1] (0 < beta_min < beta_max).
      prior_std: σ_S, the reverse chain starts at z_K ~ N(0, σ_S² I).
    """

    num_particles: int = 256
    num_steps: int = 25
    guidance_scale: float = 1.0
    ess_threshold: float = 0.5
    inflation: float = 1.0
    beta_min: float = 0.1
    beta_max: float = 10.0
    prior_std: float = 1.0

    def __post_init__(self) -> None:
        check_int("num_particles", self.num_particles)
        check_int("num_steps", self.num_steps)
        check_non_negative("guidance_scale", self.guidance_scale, finite=True)
        check_interval("ess_threshold", self.ess_threshold, 0.0, 1.0)
        check_non_negative("inflation", self.inflation, finite=True)
        check_positive("beta_min", self.beta_min, finite=True)
        check_positive("beta_max", self.beta_max, finite=True)
        if not self.beta_max > self.beta_min:
            raise ValueError(f"beta_max must be greater than beta_min ({self.beta_min}), got {self.beta_max}")
        check_positive("prior_std", self.prior_std, finite=True)


class DiffusionSchedule(NamedTuple):
    """The VP schedule on the grid s_k = k/K, k = 0..K (arrays [K + 1], float64), and the step Δ = 1/K."""

    times: np.ndarray
    betas: np.ndarray
    alphas: np.ndarray
    sigmas: np.ndarray
    delta: float


def vp_schedule(config: SurgeConfig) -> DiffusionSchedule:
    """The schedule of `config` (α_s = exp(−½(β_min s + ½(β_max − β_min) s²)), σ_s = √(1 − α_s²))."""
    times = np.linspace(0.0, 1.0, config.num_steps + 1)
    betas = config.beta_min + (config.beta_max - config.beta_min) * times
    integral = config.beta_min * times + 0.5 * (config.beta_max - config.beta_min) * times**2
    alphas = np.exp(-0.5 * integral)
    sigmas = np.sqrt(1.0 - alphas**2)
    return DiffusionSchedule(times, betas, alphas, sigmas, 1.0 / config.num_steps)
