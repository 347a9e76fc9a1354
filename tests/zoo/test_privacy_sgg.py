"""The Spherical Generalized Gamma family: its Gaussian and ℓ2 members, Monte Carlo, the accountant's PLDs and
composition, sampler laws, calibration and bad input (zoo/privacy/sgg.py, zoo/privacy/accounting.py)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from icml26zoo.privacy import accounting, gaussian, sgg

pytestmark = pytest.mark.usefixtures("fast_compile")

SMALL_GRID = (600, 600)


@pytest.mark.parametrize("dim", [1, 2, 5, 20])
def test_a_equal_dim_p_two_is_the_gaussian_with_sigma_over_root_two(dim):
    for eps, sigma in ((1.0, 3.0), (4.0, 0.8)):
        expected = gaussian.analytic_gaussian_delta(eps, sigma / math.sqrt(2))
        assert sgg.sgg_delta(eps, sigma, dim, 2.0, dim) == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("dim", [1, 3])
def test_l2_member_is_pure_dp_at_sens_over_sigma(dim):
    sigma = 0.5  # pure ε = Δ/σ = 2
    # At ε = Δ/σ exactly the largest loss equals ε up to rounding.
    assert sgg.sgg_delta(2.0, sigma, dim, 1.0, dim) < 1e-15 and sgg.sgg_delta(2.5, sigma, dim, 1.0, dim) == 0.0
    assert sgg.sgg_delta(1.9, sigma, dim, 1.0, dim) > 0.0
    if dim == 1:  # the Laplace mechanism: δ(ε) = 1 − exp((ε − Δ/b)/2)
        assert sgg.sgg_delta(1.0, sigma, 1, 1.0, 1) == pytest.approx(-math.expm1((1.0 - 2.0) / 2), rel=1e-4)


def _loss(x, sigma, a, p, sens):
    """L(x) = log f(x) − log f(x − Δ e₁) for samples x [N, T] (float64)."""
    dim = x.shape[1]
    shifted = x.copy()
    shifted[:, 0] -= sens
    r, r_shift = np.linalg.norm(x, axis=1), np.linalg.norm(shifted, axis=1)
    return (a - dim) * (np.log(r) - np.log(r_shift)) - (r / sigma) ** p + (r_shift / sigma) ** p


@pytest.mark.parametrize(("a", "p", "dim"), [(1.5, 1.5, 3), (4.0, 0.7, 2)])
def test_quadrature_delta_matches_monte_carlo(a, p, dim):
    eps, sigma = 0.5, 1.2
    # Drawn with numpy (radius from Gamma(a/p), uniform direction): this checks the quadrature, not the sampler.
    rng = np.random.default_rng(1)
    directions = rng.standard_normal((200_000, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    draws = sigma * rng.gamma(a / p, size=(200_000, 1)) ** (1 / p) * directions
    terms = np.maximum(0.0, -np.expm1(eps - _loss(draws, sigma, a, p, 1.0)))
    error = terms.std() / math.sqrt(terms.size)
    assert abs(sgg.sgg_delta(eps, sigma, a, p, dim, grid=SMALL_GRID) - terms.mean()) < 4 * error + 1e-4 * terms.mean()


def test_sgg_pld_matches_the_accountants_gaussian_and_laplace_and_composes_like_them():
    sigma_gauss = 2.5
    ours = accounting.sgg_pld(sigma_gauss * math.sqrt(2), 3, 2.0, 3, grid=SMALL_GRID)
    theirs = accounting.gaussian_pld(sigma_gauss, discretization=1e-3)
    assert ours.get_delta_for_epsilon(0.5) == pytest.approx(theirs.get_delta_for_epsilon(0.5), rel=1e-2)
    assert accounting.composed_epsilon(ours, 10, 1e-5) == pytest.approx(
        accounting.composed_epsilon(theirs, 10, 1e-5), rel=5e-3)
    laplace = accounting.sgg_pld(0.5, 1, 1.0, 1, grid=SMALL_GRID)
    reference = pld_lib.from_laplace_mechanism(0.5, value_discretization_interval=1e-3)
    assert laplace.get_delta_for_epsilon(1.0) == pytest.approx(reference.get_delta_for_epsilon(1.0), rel=5e-3)
    assert accounting.composed_delta(laplace, 5, 3.0) == pytest.approx(
        reference.self_compose(5).get_delta_for_epsilon(3.0), rel=1e-2)


def test_delta_decreases_as_sigma_grows_for_the_gaussian_members():
    for dim in (1, 4):
        deltas = [sgg.sgg_delta(1.0, s, dim, 2.0, dim, grid=SMALL_GRID) for s in (1.0, 2.0, 4.0, 8.0)]
        assert all(x > y for x, y in zip(deltas, deltas[1:], strict=False))


def test_sgg_sigma_of_the_gaussian_member_is_root_two_times_the_analytic_sigma():
    sigma = sgg.sgg_sigma(1.0, 1e-5, 2, 2.0, 2, grid=SMALL_GRID)
    assert sigma == pytest.approx(math.sqrt(2) * gaussian.analytic_gaussian_sigma(1.0, 1e-5), rel=2e-3)
    with pytest.raises(ValueError, match=r"SGG mechanism \(a=2, p=2, dim=2\) cannot meet"):
        sgg.sgg_sigma(1.0, 1e-5, 2, 2.0, 2, grid=SMALL_GRID, max_sigma=1.0)


@pytest.mark.parametrize(("a", "p", "dim"), [(4.0, 1.0, 4), (6.0, 0.8, 4), (2.0, 2.5, 4)])
def test_sampler_radius_moments_and_uniform_directions(a, p, dim):
    sigma, count = 0.7, 100_000
    draws = np.asarray(sgg.sgg_sample(jax.random.key(2), sigma, a, p, dim, (count,)), np.float64)
    assert draws.shape == (count, dim)
    squared = np.sum(draws**2, axis=1)
    assert squared.mean() == pytest.approx(sgg.sgg_expected_l2(sigma, a, p), abs=4 * squared.std() / math.sqrt(count))
    l1 = np.sum(np.abs(draws), axis=1)
    assert l1.mean() == pytest.approx(sgg.sgg_expected_l1(sigma, a, p, dim), abs=4 * l1.std() / math.sqrt(count))
    directions = draws / np.sqrt(squared)[:, None]
    np.testing.assert_allclose(directions.mean(axis=0), 0.0, atol=4 / math.sqrt(count))
    np.testing.assert_allclose(directions.T @ directions / count, np.eye(dim) / dim, atol=5 / math.sqrt(count))


def test_gaussian_member_moments_are_the_gaussians():
    assert sgg.sgg_expected_l2(2.0, 5, 2.0) == pytest.approx(5 * (2.0 / math.sqrt(2)) ** 2, rel=1e-12)
    assert sgg.sgg_expected_l1(2.0, 1, 2.0, 1) == pytest.approx(gaussian.gaussian_expected_l1(2.0 / math.sqrt(2)))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: sgg.sgg_delta(0.0, 1.0, 2, 2.0, 2), "eps must be a finite positive number, got 0.0"),
        (lambda: sgg.sgg_sigma(1.0, 0.0, 2, 2.0, 2), r"delta must be a number in \(0, 1\), got 0.0"),
        (lambda: sgg.sgg_sigma(1.0, 1.5, 2, 2.0, 2), "delta"),
        (lambda: sgg.sgg_delta(1.0, 1.0, 0.0, 2.0, 2), "a must be a finite positive number, got 0.0"),
        (lambda: sgg.sgg_delta(1.0, 1.0, 2, -1.0, 2), "p must be a finite positive number, got -1.0"),
        (lambda: sgg.sgg_delta(1.0, 1.0, 2, 2.0, 0), "dim must be an integer >= 1, got 0"),
        (lambda: sgg.sgg_delta(1.0, 1.0, 2, 2.0, 2, sens=0.0), "sens must be a finite positive number, got 0.0"),
        (lambda: sgg.sgg_delta(1.0, 1.0, 2, 2.0, 2, grid=(8, 600)), "grid must be a pair of integers >= 16"),
        (lambda: sgg.sgg_sample(jax.random.key(0), 0.0, 2, 2.0, 2), "sigma"),
        (lambda: accounting.composed_epsilon(None, 0, 1e-5), "count must be an integer >= 1"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
