"""Differential-privacy noise mechanisms, their calibration and accounting, and DP-SGD.

- `gaussian`: the analytic Gaussian mechanism (Balle & Wang 2018): `analytic_gaussian_delta`/`_sigma`.
- `mog`: mixture-of-Gaussians noise for scalar queries (arXiv 2605.28078): `mog_delta`, `mog_sigma`,
  `mog_sample`, `mog_expected_l1`/`_l2`, `geometric_weights`.
- `sgg`: Spherical Generalized Gamma noise (arXiv 2606.08681): `sgg_delta`, `sgg_sigma`, `sgg_sample`,
  `sgg_expected_l1`/`_l2`, `privacy_loss_pmf`.
- `accounting`: dp-accounting PLDs (the `privacy` extra, imported lazily) and tight composition.
- `mechanisms`: noise samplers by name for DP-SGD (`noise_sampler`, `register_noise`).
- `dpsgd`: `private_aggregate`, `dp_sgd`, `per_example_grads`, and the trainer's `optim.name="dp_sgd"`.

Bad input raises ValueError naming the argument: eps ≤ 0, delta outside (0, 1), sensitivities, clip norms or
noise scales ≤ 0; a calibration that cannot meet (eps, delta) says so (`check_epsilon` and `check_delta` are
those checks, for callers that validate a privacy target before computing anything). JAX's PRNG is for
simulation only.
"""

from icml26zoo.privacy import accounting, dpsgd, gaussian, mechanisms, mog, sgg
from icml26zoo.privacy._checks import check_delta, check_epsilon
from icml26zoo.privacy.dpsgd import dp_sgd, per_example_grads, private_aggregate
from icml26zoo.privacy.gaussian import analytic_gaussian_delta, analytic_gaussian_sigma
from icml26zoo.privacy.mechanisms import noise_sampler, register_noise
from icml26zoo.privacy.mog import geometric_weights, mog_delta, mog_expected_l1, mog_expected_l2, mog_sample, mog_sigma
from icml26zoo.privacy.sgg import (
    privacy_loss_pmf,
    sgg_delta,
    sgg_expected_l1,
    sgg_expected_l2,
    sgg_sample,
    sgg_sigma,
)

__all__ = [
    "accounting", "analytic_gaussian_delta", "analytic_gaussian_sigma", "check_delta", "check_epsilon", "dp_sgd",
    "dpsgd", "gaussian", "geometric_weights", "mechanisms", "mog", "mog_delta", "mog_expected_l1", "mog_expected_l2",
    "mog_sample", "mog_sigma", "noise_sampler", "per_example_grads", "private_aggregate", "privacy_loss_pmf",
    "register_noise", "sgg", "sgg_delta", "sgg_expected_l1", "sgg_expected_l2", "sgg_sample", "sgg_sigma",
]
