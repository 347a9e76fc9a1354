"""Flow matching for inverse design: Diag-CFM's zero-anchored pairing and standard CFM (arXiv 2603.15925).

- `pairs`: the two pairings' endpoints and the conditional flow-matching loss.
- `velocity`: the velocity network (a Flax NNX MLP with a sinusoidal time embedding).
- `ode`: fixed-step ODE integration through diffrax (the `flows` extra, imported only when called).
- `inverse`: sampling designs, the model's own forward prediction, Zero-Deviation and Self-Consistency.
- `benchmarks`: the linear-Gaussian toy (closed-form posterior and exact fields) and a smooth nonlinear one.
- `training`: an optax loop fitting the network to (design, label) pairs.
"""

from icml26zoo.flows.benchmarks import LinearGaussian, SmoothBenchmark
from icml26zoo.flows.inverse import predict_labels, rms_distance, sample_designs, surrogate_labels, zero_deviation
from icml26zoo.flows.ode import integrate
from icml26zoo.flows.pairs import PAIRINGS, flow_matching_loss, interpolate, make_pairs, pairing_loss
from icml26zoo.flows.training import FitConfig, Fitted, fit_velocity
from icml26zoo.flows.velocity import VelocityMLP

__all__ = ["PAIRINGS", "FitConfig", "Fitted", "LinearGaussian", "SmoothBenchmark", "VelocityMLP", "fit_velocity",
           "flow_matching_loss", "integrate", "interpolate", "make_pairs", "pairing_loss", "predict_labels",
           "rms_distance", "sample_designs", "surrogate_labels", "zero_deviation"]
