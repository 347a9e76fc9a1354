"""SURGE (zoo/assimilation): the spec's invariants on a 2-D linear-Gaussian system whose diffusion surrogate is
exact, so the Kalman filter of the chain's own transition is the exact answer.

- the discrete Girsanov form of log p_k/q_k equals the ratio of the two Gaussian densities;
- the telescoped twisted weights of a run without resampling equal the whole-path weight computed from densities;
- a flat likelihood with λ = 0 gives equal weights (ESS = N) and the prior chain's law;
- the weighted cloud matches the Kalman posterior mean and variances and the log-evidence, for λ ∈ {0, 0.5, 1, 2},
  within Monte-Carlo error, while plain guidance (weights dropped) is biased, differently for each λ;
- systematic resampling keeps the weighted mean in expectation; the Kalman update is Gaussian conditioning;
- the Lorenz-63 surrogate's score is the gradient of its Gaussian log-density, its flow keeps an equilibrium;
- bad input is a ValueError naming the argument.

Every SURGE run with N = 4096 shares one compiled cycle (λ and the observation are traced)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo import assimilation as da
from icml26zoo.decode.resampling import effective_sample_size, systematic_resample

pytestmark = pytest.mark.usefixtures("fast_compile")

A = np.array([[0.9, 0.2], [-0.1, 0.8]])
Q = np.array([[0.5, 0.1], [0.1, 0.3]])
H = np.array([[1.0, 0.0]])
SYSTEM = da.gaussian_transition(A, Q)
OBSERVATION = da.linear_observation(H, np.array([0.25]))
PRIOR_MEAN, PRIOR_COV = np.array([1.0, -0.5]), np.diag([0.4, 0.2])
Y = np.array([2.0])  # about 1.4 prior standard deviations from the forecast mean: the weights must work
CONFIG = da.SurgeConfig(num_particles=4096, num_steps=20)
MC_SIGMAS = 4.0  # tolerances are this many Monte-Carlo standard errors


@pytest.fixture(scope="module")
def previous():
    """x_n: exact samples of the prior N(PRIOR_MEAN, PRIOR_COV), [N, 2]."""
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.multivariate_normal(PRIOR_MEAN, PRIOR_COV, CONFIG.num_particles), jnp.float32)


@pytest.fixture(scope="module")
def kalman():
    """The exact posterior of x_{n+1} under the chain's own transition (F, P), and the log-evidence of Y."""
    transition, noise = da.surrogate_transition(SYSTEM, CONFIG)
    mean, cov = da.kalman_predict(PRIOR_MEAN, PRIOR_COV, transition, noise)
    return da.kalman_update(mean, cov, Y, H, np.diag([0.25]))


def _run(previous, guidance_scale, *, weighted=True, observation=OBSERVATION, seed=1):
    config = dataclasses.replace(CONFIG, guidance_scale=guidance_scale)
    return da.assimilate(jax.random.PRNGKey(seed), previous, jnp.asarray(Y, jnp.float32), surrogate=SYSTEM,
                         observation=observation, config=config, weighted=weighted)


def test_girsanov_closed_form_equals_the_gaussian_density_ratio():
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    shift, noise, mean_p = (jax.random.normal(k, (16, 3)) for k in keys)
    std = jnp.float32(0.3)
    point = mean_p + std * (shift + noise)  # a draw of q = N(mean_p + std·u, std² I)
    from_densities = da.gaussian_log_ratio(point, mean_p, mean_p + std * shift, std)
    np.testing.assert_allclose(da.girsanov_log_ratio(shift, noise), from_densities, atol=1e-5)
    assert float(jnp.std(from_densities)) > 0.5  # not a trivially constant ratio


def test_telescoped_weights_equal_the_whole_path_weight():
    config = da.SurgeConfig(num_particles=32, num_steps=8, guidance_scale=1.5, ess_threshold=0.0)
    previous = jax.random.normal(jax.random.PRNGKey(2), (32, 2))
    y = jnp.asarray(Y, jnp.float32)
    out = da.assimilate(jax.random.PRNGKey(3), previous, y, surrogate=SYSTEM, observation=OBSERVATION,
                        config=config, record_path=True)
    assert out.path.shape == (9, 32, 2) and int(out.resamples) == 0
    np.testing.assert_allclose(out.path[-1], out.particles)
    direct = da.whole_path_log_weight(out.path, previous, y, surrogate=SYSTEM, observation=OBSERVATION,
                                      config=config)
    np.testing.assert_allclose(out.log_weights, direct, atol=1e-5 * (1 + float(jnp.max(jnp.abs(direct)))))
    assert float(jnp.std(direct)) > 0.1  # the weights differ between paths: the comparison can fail


def test_flat_likelihood_without_guidance_gives_equal_weights_and_the_prior_law(previous):
    flat = da.linear_observation(H, np.array([1e12]))
    out = _run(previous, 0.0, observation=flat)
    spread = jnp.max(out.log_weights) - jnp.min(out.log_weights)
    assert float(spread) < 1e-4 and float(out.ess_min) > 0.9999 and int(out.resamples) == 0
    transition, noise = da.surrogate_transition(SYSTEM, CONFIG)
    mean, cov = da.kalman_predict(PRIOR_MEAN, PRIOR_COV, transition, noise)  # the forecast law of x_{n+1}
    particles = np.asarray(out.particles, np.float64)
    standard_error = np.sqrt(np.diag(cov) / CONFIG.num_particles)
    np.testing.assert_array_less(np.abs(particles.mean(0) - mean), MC_SIGMAS * standard_error)
    np.testing.assert_allclose(np.diag(np.cov(particles.T)), np.diag(cov), rtol=MC_SIGMAS * np.sqrt(2 / 4096))


@pytest.mark.parametrize("guidance_scale", [0.0, 0.5, 1.0, 2.0])
def test_weighted_cloud_matches_the_kalman_filter(previous, kalman, guidance_scale):
    kalman_mean, kalman_cov, kalman_log_evidence = kalman
    out = _run(previous, guidance_scale)
    mean, cov = (np.asarray(v, np.float64) for v in da.weighted_moments(out.particles, out.log_weights))
    # Monte-Carlo error: the weighted cloud's (at most ESS_min·N effective particles) and x_n's sampling error.
    effective = float(out.ess_min) * CONFIG.num_particles
    variances = np.diag(kalman_cov)
    tolerance = MC_SIGMAS * np.sqrt(variances * (1 / effective + 1 / CONFIG.num_particles))
    np.testing.assert_array_less(np.abs(mean - kalman_mean), tolerance)
    np.testing.assert_allclose(np.diag(cov), variances, rtol=MC_SIGMAS * np.sqrt(2 / effective))
    assert abs(float(out.log_evidence) - kalman_log_evidence) < 0.1
    if guidance_scale == 0.0:  # the prior proposal degenerates: this case exercises in-path resampling
        assert int(out.resamples) > 0


def test_plain_guidance_without_weights_is_biased_depending_on_lambda(previous, kalman):
    kalman_mean, kalman_cov, _ = kalman
    standard_error = np.sqrt(kalman_cov[0, 0] / CONFIG.num_particles)
    runs = {lam: _run(previous, lam, weighted=False) for lam in (0.5, 2.0)}
    for out in runs.values():  # the weights are dropped, not just ignored
        assert not bool(jnp.any(out.log_weights)) and int(out.resamples) == 0 and bool(jnp.isnan(out.log_evidence))
    bias = {lam: float(jnp.mean(out.particles[:, 0])) - kalman_mean[0] for lam, out in runs.items()}
    # Under-guided paths stop short of the observation, over-guided ones overshoot it.
    assert bias[0.5] < -10 * standard_error and bias[2.0] > 10 * standard_error, bias


def test_systematic_resampling_keeps_the_weighted_mean_in_expectation():
    values = jnp.linspace(-2.0, 3.0, 16)
    log_weights = jax.random.normal(jax.random.PRNGKey(4), (16,))
    keys = jax.random.split(jax.random.PRNGKey(5), 4000)
    resampled_means = jax.vmap(lambda key: values[systematic_resample(key, log_weights)].mean())(keys)
    exact = float(jax.nn.softmax(log_weights) @ values)
    spread = float(jnp.std(resampled_means))
    assert spread > 0  # systematic resampling is random here: the test averages over seeds
    assert abs(float(resampled_means.mean()) - exact) < MC_SIGMAS * spread / np.sqrt(4000)
    assert float(effective_sample_size(log_weights)) < 16


def test_kalman_update_is_gaussian_conditioning():
    rng = np.random.default_rng(6)
    root = rng.normal(size=(3, 3))
    mean, cov = rng.normal(size=3), root @ root.T + np.eye(3)
    observe, noise = rng.normal(size=(2, 3)), np.diag([0.3, 0.7])
    y = rng.normal(size=2)
    posterior_mean, posterior_cov, log_evidence = da.kalman_update(mean, cov, y, observe, noise)
    precision = np.linalg.inv(cov) + observe.T @ np.linalg.solve(noise, observe)  # information form
    expected_cov = np.linalg.inv(precision)
    expected_mean = expected_cov @ (np.linalg.solve(cov, mean) + observe.T @ np.linalg.solve(noise, y))
    np.testing.assert_allclose(posterior_cov, expected_cov, atol=1e-12)
    np.testing.assert_allclose(posterior_mean, expected_mean, atol=1e-12)
    marginal = observe @ cov @ observe.T + noise
    residual = y - observe @ mean
    log_det = np.linalg.slogdet(2 * np.pi * marginal)[1]
    expected_evidence = -0.5 * (log_det + residual @ np.linalg.solve(marginal, residual))
    assert log_evidence == pytest.approx(expected_evidence, abs=1e-12)


def test_the_chain_transition_approaches_the_system_as_steps_shrink():
    coarse = da.surrogate_transition(SYSTEM, da.SurgeConfig(num_steps=20))
    fine = da.surrogate_transition(SYSTEM, da.SurgeConfig(num_steps=400))
    for (transition, noise), tolerance in ((coarse, 0.1), (fine, 0.01)):
        np.testing.assert_allclose(transition, A, atol=tolerance)
        np.testing.assert_allclose(noise, Q, atol=tolerance)


def test_lorenz63_surrogate_score_and_flow():
    transition = da.Lorenz63Transition(jnp.array([0.25, 0.5, 1.0]))
    keys = jax.random.split(jax.random.PRNGKey(7), 2)
    z, x = jax.random.normal(keys[0], (4, 3)), 8.0 * jax.random.normal(keys[1], (4, 3))
    alpha, sigma = jnp.float32(0.6), jnp.float32(0.8)
    mean, var = alpha * transition.mean(x), alpha**2 * transition.noise_var + sigma**2
    expected = jax.grad(lambda points: jnp.sum(-0.5 * (points - mean) ** 2 / var))(z)
    np.testing.assert_allclose(transition.score(z, alpha, sigma, x), expected, rtol=1e-5, atol=1e-5)
    # An equilibrium (√(β(ρ−1)), √(β(ρ−1)), ρ−1): the field vanishes there and the RK4 flow stays put.
    root = np.sqrt(8 / 3 * 27)
    equilibrium = jnp.array([[root, root, 27.0]])
    np.testing.assert_allclose(da.lorenz63_vector_field(equilibrium), 0.0, atol=1e-4)
    np.testing.assert_allclose(transition.mean(equilibrium), equilibrium, atol=1e-3)
    assert float(jnp.max(jnp.abs(transition.mean(equilibrium + 1.0) - (equilibrium + 1.0)))) > 0.1  # it does move


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_particles": 0}, r"^num_particles must be an integer >= 1, got 0$"),
    ({"num_particles": 2.5}, r"^num_particles must be an integer >= 1, got 2.5$"),
    ({"num_steps": 0}, r"^num_steps must be an integer >= 1, got 0$"),
    ({"guidance_scale": -1.0}, r"^guidance_scale must be a finite non-negative number, got -1.0$"),
    ({"ess_threshold": 1.5}, r"^ess_threshold must be a number in \[0, 1\], got 1.5$"),
    ({"beta_min": 5.0, "beta_max": 1.0}, r"^beta_max must be greater than beta_min \(5.0\), got 1.0$"),
    ({"prior_std": 0.0}, r"^prior_std must be a finite positive number, got 0.0$"),
])
def test_bad_config_names_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        da.SurgeConfig(**kwargs)


def test_bad_arrays_name_the_argument():
    config = da.SurgeConfig(num_particles=8, num_steps=2)
    y = jnp.zeros(1)
    run = dict(surrogate=SYSTEM, observation=OBSERVATION, config=config)
    with pytest.raises(ValueError, match=r"^previous must be .*\[N, D\] with N = num_particles.*\(5, 2\)"):
        da.assimilate(jax.random.PRNGKey(0), jnp.zeros((5, 2)), y, **run)
    with pytest.raises(ValueError, match=r"^y must be .*\(3,\)"):
        da.assimilate(jax.random.PRNGKey(0), jnp.zeros((8, 2)), jnp.zeros(3), **run)
    with pytest.raises(ValueError, match=r"^observations must be .*\[T, M\]"):
        da.surge_filter(jax.random.PRNGKey(0), jnp.zeros((8, 2)), jnp.zeros((4, 2)), **run)
    with pytest.raises(ValueError, match=r"^noise_var must be positive everywhere"):
        da.linear_observation(H, np.array([-1.0]))
    with pytest.raises(ValueError, match=r"^noise_cov must be symmetric positive definite"):
        da.gaussian_transition(A, np.array([[1.0, 2.0], [2.0, 1.0]]))
