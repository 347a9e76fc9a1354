"""The analytic Gaussian and mixture-of-Gaussians mechanisms: closed forms, the accountant, Monte Carlo,
sampler moments and bad input (zoo/privacy/gaussian.py, zoo/privacy/mog.py)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from dp_accounting import gaussian_mechanism
from scipy import integrate, stats

from icml26zoo.privacy import accounting, gaussian, mog

pytestmark = pytest.mark.usefixtures("fast_compile")

MIXTURE = mog.geometric_weights(1.0, 3)


def _hockey_stick_by_quad(eps, sigma, sens):
    """∫ (φ_σ(z) − e^ε φ_σ(z − Δ))_+ dz by adaptive quadrature: a reference independent of the closed form."""
    crossing = sens / 2 - eps * sigma**2 / sens  # where the two densities' ratio equals e^ε
    integrand = lambda z: stats.norm.pdf(z, 0, sigma) - math.exp(eps) * stats.norm.pdf(z, sens, sigma)  # noqa: E731
    value, _ = integrate.quad(integrand, -np.inf, crossing, epsabs=1e-14, epsrel=1e-12)
    return value


@pytest.mark.parametrize(("eps", "sigma", "sens"), [(0.5, 4.0, 1.0), (1.0, 3.0, 1.0), (4.0, 0.9, 2.0), (8.0, 0.4, 1.0)])
def test_analytic_gaussian_delta_is_the_hockey_stick_integral(eps, sigma, sens):
    assert gaussian.analytic_gaussian_delta(eps, sigma, sens) == pytest.approx(
        _hockey_stick_by_quad(eps, sigma, sens), rel=1e-8, abs=1e-15)


@pytest.mark.parametrize(("eps", "delta"), [(0.5, 1e-5), (1.0, 1e-6), (4.0, 1e-5), (8.0, 1e-6)])
def test_analytic_gaussian_sigma_matches_dp_accounting_and_is_tight(eps, delta):
    sigma = gaussian.analytic_gaussian_sigma(eps, delta)
    assert sigma == pytest.approx(gaussian_mechanism.get_sigma_gaussian(eps, delta), rel=1e-7)
    assert gaussian.analytic_gaussian_delta(eps, sigma) <= delta < gaussian.analytic_gaussian_delta(
        eps, sigma * (1 - 1e-6))
    # The accountant's (pessimistic) PLD of N(0, σ²) gives the same δ up to its discretisation.
    assert accounting.gaussian_pld(sigma).get_delta_for_epsilon(eps) == pytest.approx(delta, rel=2e-3)


def test_gaussian_delta_decreases_as_sigma_grows():
    deltas = [gaussian.analytic_gaussian_delta(1.0, s) for s in (0.5, 1.0, 2.0, 4.0, 8.0)]
    assert all(a > b for a, b in zip(deltas, deltas[1:], strict=False))


@pytest.mark.parametrize(("eps", "s_grid"), [(0.5, [1.0]), (1.0, None), (2.0, [0.3, 1.0]), (8.0, None)])
def test_mog_with_all_weight_at_zero_is_the_analytic_gaussian(eps, s_grid):
    # None: the default 32 shifts, whose maximum must be the full shift's δ (the Gaussian's δ grows with s).
    sigma = 3.0 / eps
    expected = gaussian.analytic_gaussian_delta(eps, sigma)
    assert mog.mog_delta(eps, sigma, [1.0], s_grid=s_grid) == pytest.approx(expected, abs=1e-9)
    padded = [0.0, 0.0, 1.0, 0.0, 0.0]
    assert mog.mog_delta(eps, sigma, padded, spacing=2.0, s_grid=[1.0]) == pytest.approx(expected, abs=1e-9)


def test_mog_sigma_with_all_weight_at_zero_is_the_analytic_sigma():
    sigma = mog.mog_sigma(1.0, 1e-5, [1.0], s_grid=[0.5, 1.0])
    assert sigma == pytest.approx(gaussian.analytic_gaussian_sigma(1.0, 1e-5), rel=1e-4)


@pytest.mark.parametrize("shift", [1.0, 0.55])
def test_mog_delta_matches_the_accountants_binned_pld(shift):
    # dp-accounting builds the PLD from the two laws binned at σ/200 (a post-processing, so never above the
    # continuous δ up to its own rounding) — an independent computation of the same hockey-stick divergence.
    eps, sigma = 2.0, 0.9
    ours = mog.mog_delta(eps, sigma, MIXTURE, s_grid=[shift])
    theirs = accounting.mog_pld(sigma, MIXTURE, shift=shift).get_delta_for_epsilon(eps)
    assert ours > 1e-7 and theirs == pytest.approx(ours, rel=2e-3)


def test_mog_delta_matches_monte_carlo():
    eps, sigma, shift = 1.0, 1.2, 1.0
    rng = np.random.default_rng(0)
    samples = rng.choice(np.arange(-3, 4), size=400_000, p=MIXTURE) + sigma * rng.standard_normal(400_000)
    log_p = lambda z: np.log(np.sum(MIXTURE * stats.norm.pdf(z[:, None], np.arange(-3, 4), sigma), axis=1))  # noqa: E731
    terms = np.maximum(0.0, 1 - np.exp(eps - (log_p(samples) - log_p(samples - shift))))
    error = terms.std() / math.sqrt(terms.size)
    assert abs(mog.mog_delta(eps, sigma, MIXTURE, s_grid=[shift]) - terms.mean()) < 4 * error


def test_mog_worst_shift_can_be_interior():
    # Components spaced by Δ with π_k/π_{k±1} = e^{-4}: the full shift Δ lines the components up, a shorter
    # one does not, so checking only s = Δ would understate δ.
    weights, eps, sigma = mog.geometric_weights(4.0, 3), 4.0, 0.2
    at_sens = mog.mog_delta(eps, sigma, weights, s_grid=[1.0])
    worst = mog.mog_delta(eps, sigma, weights)
    assert worst > 10 * at_sens


def test_mog_sampler_moments_match_the_closed_forms():
    sigma, spacing = 0.8, 1.5
    draws = np.asarray(mog.mog_sample(jax.random.key(0), sigma, MIXTURE, spacing, 1.0, (200_000,)), np.float64)
    l1, l2 = mog.mog_expected_l1(sigma, MIXTURE, spacing), mog.mog_expected_l2(sigma, MIXTURE, spacing)
    assert np.mean(np.abs(draws)) == pytest.approx(l1, abs=4 * np.std(np.abs(draws)) / math.sqrt(draws.size))
    assert np.mean(draws**2) == pytest.approx(l2, abs=4 * np.std(draws**2) / math.sqrt(draws.size))
    assert mog.mog_expected_l1(sigma, [1.0]) == pytest.approx(gaussian.gaussian_expected_l1(sigma), rel=1e-12)
    assert mog.mog_expected_l2(sigma, [1.0]) == pytest.approx(gaussian.gaussian_expected_l2(sigma), rel=1e-12)


def test_a_calibration_that_cannot_meet_eps_delta_says_so():
    with pytest.raises(ValueError, match=r"Gaussian mechanism cannot meet the requested \(eps, delta\)"):
        gaussian.analytic_gaussian_sigma(1e-4, 1e-12)
    with pytest.raises(ValueError, match="mixture-of-Gaussians mechanism cannot meet"):
        mog.mog_sigma(1.0, 1e-5, MIXTURE, s_grid=[1.0], max_sigma=0.5)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: gaussian.analytic_gaussian_delta(0.0, 1.0), "eps must be a finite positive number, got 0.0"),
        (lambda: gaussian.analytic_gaussian_delta(-1.0, 1.0), "eps"),
        (lambda: gaussian.analytic_gaussian_sigma(1.0, 0.0), r"delta must be a number in \(0, 1\), got 0.0"),
        (lambda: gaussian.analytic_gaussian_sigma(1.0, 1.0), "delta"),
        (lambda: gaussian.analytic_gaussian_sigma(1.0, 1e-5, sens=0.0),
         "sens must be a finite positive number, got 0.0"),
        (lambda: gaussian.analytic_gaussian_delta(1.0, -2.0), "sigma"),
        (lambda: mog.mog_delta(1.0, 1.0, [0.2, 0.5, 0.3]), "weights must be symmetric"),
        (lambda: mog.mog_delta(1.0, 1.0, [0.5, 0.5]), "odd length"),
        (lambda: mog.mog_delta(1.0, 1.0, [0.6, -0.2, 0.6]), "weights must be finite, >= 0 and sum to 1"),
        (lambda: mog.mog_delta(1.0, 1.0, [1.0], s_grid=[1.5]), r"s_grid must hold shifts in \(0, sens=1\]"),
        (lambda: mog.mog_delta(1.0, 1.0, [1.0], spacing=0.0), "spacing"),
        (lambda: mog.mog_sigma(1.0, 2.0, [1.0]), "delta"),
        (lambda: mog.geometric_weights(1.0, -1), "radius must be an integer >= 0, got -1"),
        (lambda: mog.mog_sample(jax.random.key(0), 0.0, [1.0]), "sigma"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
