"""Diag-CFM and standard CFM (icml26zoo.flows): the pairs and losses against readable references, the exact
fields of the linear-Gaussian toy (zero-anchoring, permutation equivariance, the closed-form flow through
diffrax, the posterior), the metrics, the benchmarks' known answers, and bad input."""

from __future__ import annotations

import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo import flows
from icml26zoo.flows.benchmarks import smooth_label_std
from icml26zoo.flows.velocity import time_features

pytestmark = pytest.mark.usefixtures("fast_compile")

X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], np.float32)
Y = np.array([[4.0, 5.0], [6.0, 7.0]], np.float32)
EPS = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], np.float32)
TOY = flows.LinearGaussian(np.array([[0.8, -0.5, 0.3]]), sigma=0.4)


def test_diag_pairs_anchor_labels_at_zero_and_designs_at_noise():
    z0, z1 = flows.make_pairs(X, Y, EPS, "diag")
    np.testing.assert_array_equal(z0, np.float32([[0.1, 0.2, 0.3, 4, 5], [0.4, 0.5, 0.6, 6, 7]]))
    np.testing.assert_array_equal(z1, [[1, 2, 3, 0, 0], [-1, 0.5, 0, 0, 0]])
    np.testing.assert_array_equal((z1 - z0)[:, 3:], -Y)  # u = (x - eps, -y)
    np.testing.assert_allclose((z1 - z0)[:, :3], X - EPS)


def test_standard_pairs_put_labels_in_the_first_coordinates():
    z0, z1 = flows.make_pairs(X, Y, EPS, "standard")
    np.testing.assert_array_equal(z0, np.float32([[4, 5, 0.1], [6, 7, 0.4]]))
    np.testing.assert_array_equal(z1, X)


def _linear_velocity(z, t):
    w = jnp.arange(z.shape[1] ** 2, dtype=z.dtype).reshape(z.shape[1], z.shape[1]) / 10
    return z @ w + t[:, None]


@pytest.mark.parametrize("pairing", ["diag", "standard"])
def test_loss_matches_a_loop_over_rows(pairing):
    z0, z1 = (np.asarray(a, np.float64) for a in flows.make_pairs(X, Y, EPS, pairing))
    t = np.array([0.25, 0.9], np.float32)
    want = 0.0
    for i in range(2):
        zt = (1 - t[i]) * z0[i] + t[i] * z1[i]
        d = zt.shape[0]
        v = zt @ (np.arange(d * d).reshape(d, d) / 10) + t[i]
        want += np.sum((v - (z1[i] - z0[i])) ** 2) / 2
    got = flows.flow_matching_loss(_linear_velocity, *flows.make_pairs(X, Y, EPS, pairing), jnp.asarray(t))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_pairing_loss_draws_noise_and_times_from_the_key():
    key = jax.random.key(3)
    noise_key, time_key = jax.random.split(key)
    eps = jax.random.normal(noise_key, X.shape)
    t = jax.random.uniform(time_key, (2,))
    want = flows.flow_matching_loss(_linear_velocity, *flows.make_pairs(X, Y, eps, "diag"), t)
    np.testing.assert_allclose(flows.pairing_loss(_linear_velocity, X, Y, key, "diag"), want, rtol=1e-6)


def _toy_states(pairing, rows=5, seed=0):
    dim = 4 if pairing == "diag" else 3
    z = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)
    return jnp.asarray(z), jnp.linspace(0.05, 0.9, rows)


def test_exact_label_velocity_shrinks_the_label_block_to_zero():
    z, t = _toy_states("diag")
    v = TOY.oracle_velocity("diag")(z, t)
    np.testing.assert_allclose(v[:, 3:], -z[:, 3:] / (1 - t[:, None]), rtol=2e-3, atol=1e-4)


def test_exact_diag_field_is_permutation_equivariant_and_standard_is_not():
    perm = np.array([2, 0, 1])
    permuted = flows.LinearGaussian(TOY.a[:, perm], TOY.sigma)  # x' = x[perm], y = A' x' unchanged
    z, t = _toy_states("diag")
    z_perm = jnp.concatenate([z[:, perm], z[:, 3:]], axis=1)
    v, v_perm = TOY.oracle_velocity("diag")(z, t), permuted.oracle_velocity("diag")(z_perm, t)
    np.testing.assert_allclose(v_perm, jnp.concatenate([v[:, perm], v[:, 3:]], axis=1), rtol=1e-4, atol=1e-4)
    z, t = _toy_states("standard")
    v, v_perm = TOY.oracle_velocity("standard")(z, t), permuted.oracle_velocity("standard")(z[:, perm], t)
    assert float(jnp.max(jnp.abs(v_perm - v[:, perm]))) > 0.1


def test_diffrax_flow_of_the_exact_field_is_the_closed_form_path_and_samples_the_posterior():
    # One diffrax solve from (eps, y*) under the exact field: every path follows x_t = t mu + C_t^(1/2) eps, the
    # label block shrinks to (1 - t) y*, and the samples have the analytic posterior's mean and covariance.
    rows, y_star, t_end = 4000, 1.2, 0.999
    eps = np.random.default_rng(1).normal(size=(rows, 3)).astype(np.float32)
    y_target = np.full((rows, 1), y_star, np.float32)
    x_hat, residual = flows.sample_designs(TOY.oracle_velocity("diag"), jnp.asarray(y_target), jnp.asarray(eps),
                                           "diag", steps=100, solver="heun", t_end=t_end)
    np.testing.assert_allclose(x_hat, TOY.exact_design_path(y_target, eps, t_end), atol=2e-3)
    np.testing.assert_allclose(residual, (1 - t_end) * y_target, atol=1e-4)
    np.testing.assert_allclose(flows.zero_deviation(residual), np.full(rows, (1 - t_end) * y_star), atol=1e-4)
    mean, cov = TOY.posterior(np.array([[y_star]]))
    x_hat = np.asarray(x_hat, np.float64)
    # Monte-Carlo error: 5 standard errors of the mean and of each covariance entry.
    np.testing.assert_allclose(x_hat.mean(0), mean[0], atol=5 * math.sqrt(np.max(np.diag(cov)) / rows))
    np.testing.assert_allclose(np.cov(x_hat.T), cov, atol=5 * math.sqrt(2 / rows))


def test_backward_prediction_equals_the_one_evaluation_surrogate_for_a_constant_label_velocity():
    # v = (0, -g(x)): the design block stays put, the label block moves at -g(x), so integrating back from (x, 0)
    # at t = 1 to t = 0 gives g(x), which is also -v((x, 0), 1)_label.
    def velocity(z, t):
        g = jnp.stack([jnp.sin(z[:, 0]) * z[:, 1], z[:, 2] ** 2], axis=1) * (1 + 0 * t[:, None])
        return jnp.concatenate([jnp.zeros_like(z[:, :3]), -g], axis=1)

    x = jnp.asarray(X)
    want = np.stack([np.sin(X[:, 0]) * X[:, 1], X[:, 2] ** 2], axis=1)
    np.testing.assert_allclose(flows.predict_labels(velocity, x, 2, "diag", steps=10), want, rtol=1e-5)
    np.testing.assert_allclose(flows.surrogate_labels(velocity, x, 2), want, rtol=1e-6)


def test_integration_is_reversible_for_a_network_field():
    model = flows.VelocityMLP(4, width=16, depth=2, rngs=nnx.Rngs(0))
    z = jax.random.normal(jax.random.key(1), (4, model.dim))

    @jax.jit
    def round_trip(z):
        there = flows.integrate(model, z, t0=0.0, t1=1.0, steps=100)
        return there, flows.integrate(model, there, t0=1.0, t1=0.0, steps=100)

    there, back = round_trip(z)
    assert float(jnp.max(jnp.abs(there - z))) > 0.1
    np.testing.assert_allclose(back, z, atol=1e-4)


def test_scores_match_numpy():
    a, b = np.array([[1.0, 2.0], [0.0, 0.0]], np.float32), np.array([[1.0, 0.0], [3.0, 4.0]], np.float32)
    np.testing.assert_allclose(flows.rms_distance(a, b), [math.sqrt(2), math.sqrt(12.5)], rtol=1e-6)
    np.testing.assert_allclose(flows.zero_deviation(b), [math.sqrt(0.5), math.sqrt(12.5)], rtol=1e-6)


def test_linear_gaussian_posterior_known_answer():
    sigma = 0.5
    mean, cov = flows.LinearGaussian(np.array([[1.0, 0.0]]), sigma).posterior(np.array([[2.0]]))
    np.testing.assert_allclose(mean, [[2 / (1 + sigma**2), 0.0]])
    np.testing.assert_allclose(cov, np.diag([sigma**2 / (1 + sigma**2), 1.0]))


def test_smooth_benchmark_known_values_moments_and_reordering():
    bench = flows.SmoothBenchmark(4, 2)
    x = np.array([[0.5, -1.0, 2.0, 0.0]], np.float32)
    raw = [0.5 + np.sin(1.0) / 2 + 0.5 * 2.0 / 2, -1.0 + np.sin(-2.0) / 2 + 0.0]
    np.testing.assert_allclose(bench.simulate(jnp.asarray(x)), [np.array(raw) / smooth_label_std()], rtol=1e-5)
    _, y = bench.sample(jax.random.key(0), 200_000)
    np.testing.assert_allclose(np.mean(y, 0), 0.0, atol=0.015)
    np.testing.assert_allclose(np.std(y, 0), 1.0, atol=0.015)
    perm = (3, 1, 0, 2)
    shuffled = flows.SmoothBenchmark(4, 2, perm)
    np.testing.assert_allclose(shuffled.simulate(jnp.asarray(x[:, perm])), bench.simulate(jnp.asarray(x)))


def test_velocity_mlp_shapes_and_time_features():
    features = time_features(jnp.array([0.25]), 4)
    np.testing.assert_allclose(features, [[1.0, 0.0, 0.0, -1.0]], atol=1e-6)  # sin(π/2), sin(π), cos(π/2), cos(π)
    model = flows.VelocityMLP(5, width=8, depth=2, rngs=nnx.Rngs(0))
    assert model(jnp.zeros((3, 5)), jnp.zeros((3,))).shape == (3, 5)


def test_fit_lowers_the_loss_and_the_trained_scores_flag_far_targets():
    x, y = TOY.sample(jax.random.key(0), 2000)
    fitted = flows.fit_velocity(x, y, "diag", flows.FitConfig(width=64, depth=2, steps=600, batch_size=128,
                                                              learning_rate=3e-3, log_every=100))
    # The exact field's loss is the least any network can reach (~3.7 here): training starts well above it and
    # ends close to it.
    oracle = float(flows.pairing_loss(TOY.oracle_velocity("diag"), x, y, jax.random.key(5), "diag"))
    assert fitted.curve[0][1] > 1.3 * oracle and fitted.curve[-1][1] < 1.15 * oracle
    targets = jnp.array([[0.0], [0.5], [8.0], [-8.0]])  # the label std is ~1.07: the last two are ~7.5 std out
    eps = jax.random.normal(jax.random.key(1), (4, 3))
    x_hat, residual = flows.sample_designs(fitted.velocity, targets, eps, "diag", steps=20)
    y_hat = flows.predict_labels(fitted.velocity, x_hat, 1, "diag", steps=20)
    zd, sc = flows.zero_deviation(residual), flows.rms_distance(y_hat, targets)
    assert float(jnp.max(zd[:2])) < float(jnp.min(zd[2:]))
    assert float(jnp.max(sc[:2])) < float(jnp.min(sc[2:]))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: flows.make_pairs(X[0], Y, EPS, "diag"), r"x must be designs of shape \[B, P\]"),
        (lambda: flows.make_pairs(X, Y[:1], EPS, "diag"), r"y must be labels of shape \[B, L\]"),
        (lambda: flows.make_pairs(X, Y, EPS[:, :2], "diag"), "eps must be noise of the designs' shape"),
        (lambda: flows.make_pairs(X[:, :1], Y, EPS[:, :1], "standard"), "needs L <= P"),
        (lambda: flows.make_pairs(X, Y, EPS, "joint"), "pairing must be one of"),
        (lambda: flows.flow_matching_loss(_linear_velocity, X, X, jnp.zeros(3)), "t must hold one time per row"),
        (lambda: flows.integrate(_linear_velocity, X, t0=0.5, t1=0.5), "t0 and t1 must differ"),
        (lambda: flows.integrate(_linear_velocity, X, t0=0.0, t1=1.5), r"t1 must be a number in \[0, 1\], got 1.5"),
        (lambda: flows.integrate(_linear_velocity, X, t0=0.0, t1=1.0, steps=0), "steps must be an integer"),
        (lambda: flows.integrate(_linear_velocity, X, t0=0.0, t1=1.0, solver="rk45"), "solver must be one of"),
        (lambda: flows.integrate(_linear_velocity, X[0], t0=0.0, t1=1.0), r"z must be a batch of states"),
        (lambda: flows.predict_labels(_linear_velocity, X, 4, "standard"), "num_labels = 4 exceeds"),
        (lambda: flows.rms_distance(X, Y), "a and b must be labels of one shape"),
        (lambda: flows.VelocityMLP(3, width=4, depth=1, rngs=nnx.Rngs(0))(jnp.zeros((2, 4)), jnp.zeros(2)),
         r"z must have shape"),
        (lambda: time_features(jnp.zeros(2), 3), "count must be even"),
        (lambda: flows.SmoothBenchmark(3, 2), "p must be >= 2 n_labels"),
        (lambda: flows.SmoothBenchmark(4, 1, (0, 1, 1, 2)), "permutation must be a tuple"),
        (lambda: flows.LinearGaussian(np.ones((1, 2)), 0.0), "sigma must be a positive number, got 0.0"),
        (lambda: flows.LinearGaussian(np.ones(2), 0.1), r"a must be a matrix \[L, P\]"),
        (lambda: flows.FitConfig(steps=150, log_every=100), "steps must be a multiple of log_every"),
        (lambda: flows.FitConfig(learning_rate=0.0), "learning_rate must be a positive number"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_missing_diffrax_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffrax", None)
    with pytest.raises(ImportError, match=r"icml26-zoo\[flows\]"):
        flows.integrate(_linear_velocity, X, t0=0.0, t1=1.0)
