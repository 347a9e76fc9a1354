"""Data assimilation with diffusion surrogates: SURGE's particle filter over diffusion paths (a reconstruction,
see `surge`), the linear-Gaussian system whose surrogate is exact, its Kalman filter reference, and Lorenz-63
with model noise and its analytic surrogate."""

from icml26zoo.assimilation.config import DiffusionSchedule, SurgeConfig, vp_schedule
from icml26zoo.assimilation.kalman import KalmanTrace, kalman_filter, kalman_predict, kalman_update
from icml26zoo.assimilation.linear_gaussian import GaussianTransition, gaussian_transition, surrogate_transition
from icml26zoo.assimilation.lorenz63 import Lorenz63Transition, lorenz63_flow, lorenz63_vector_field
from icml26zoo.assimilation.observation import LinearObservation, linear_observation
from icml26zoo.assimilation.surge import (
    FilterTrace,
    Guidance,
    SurgeCycle,
    assimilate,
    gaussian_log_ratio,
    girsanov_log_ratio,
    guidance,
    prior_mean,
    surge_filter,
    tweedie_denoise,
    weighted_moments,
    whole_path_log_weight,
)

__all__ = ["DiffusionSchedule", "FilterTrace", "GaussianTransition", "Guidance", "KalmanTrace", "LinearObservation",
           "Lorenz63Transition", "SurgeConfig", "SurgeCycle", "assimilate", "gaussian_log_ratio",
           "gaussian_transition", "girsanov_log_ratio", "guidance", "kalman_filter", "kalman_predict", "kalman_update",
           "linear_observation", "lorenz63_flow", "lorenz63_vector_field", "prior_mean", "surge_filter",
           "surrogate_transition", "tweedie_denoise", "vp_schedule", "weighted_moments", "whole_path_log_weight"]
