"""Resampling schemes: unbiased offspring counts (E = N·w), each scheme's variance property, exact cases, the ESS."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.decode.resampling import (
    RESAMPLERS,
    effective_sample_size,
    offspring_counts,
    residual_resample,
    systematic_resample,
)

pytestmark = pytest.mark.usefixtures("fast_compile")

N, DRAWS = 8, 4000
WEIGHTS = np.array([0.31, 0.02, 0.17, 0.0, 0.125, 0.055, 0.2, 0.12], np.float32)
LOG_WEIGHTS = jnp.log(jnp.asarray(WEIGHTS)) + 3.0  # unnormalized on purpose


@functools.cache
def _counts(scheme: str, num_offspring: int = N) -> np.ndarray:
    """[DRAWS, N] offspring counts of DRAWS independent resamplings of WEIGHTS (first num_offspring slots)."""

    @jax.jit
    def draw(keys):
        ancestors = jax.vmap(lambda k: RESAMPLERS[scheme](k, LOG_WEIGHTS, num_offspring))(keys)
        return offspring_counts(ancestors[:, :num_offspring], N)

    return np.asarray(draw(jax.random.split(jax.random.key(0), DRAWS)))


@pytest.mark.parametrize("scheme", sorted(RESAMPLERS))
def test_expected_offspring_is_n_times_the_weight(scheme):
    counts = _counts(scheme)
    assert counts.shape == (DRAWS, N) and (counts.sum(axis=1) == N).all()
    # Multinomial's standard error bounds all three schemes' (the other two have lower variance).
    standard_error = np.sqrt(N * WEIGHTS * (1 - WEIGHTS) / DRAWS)
    np.testing.assert_array_less(np.abs(counts.mean(axis=0) - N * WEIGHTS), 4 * standard_error + 1e-6)
    assert (counts[:, 3] == 0).all(), "a zero-weight particle was drawn"


def test_systematic_gives_floor_or_ceil_and_residual_keeps_the_floor_copies():
    expected = N * WEIGHTS
    systematic, residual = _counts("systematic"), _counts("residual")
    assert ((systematic == np.floor(expected)) | (systematic == np.ceil(expected))).all()
    assert (residual >= np.floor(expected)).all()
    # Both have a smaller variance of the counts than multinomial's N w (1 - w).
    multinomial_var = _counts("multinomial").var(axis=0).sum()
    assert systematic.var(axis=0).sum() < residual.var(axis=0).sum() < 0.7 * multinomial_var


def test_fewer_offspring_than_particles_have_expectation_m_times_the_weight():
    m = 5
    systematic = _counts("systematic", m)
    assert (systematic.sum(axis=1) == m).all()
    expected = m * WEIGHTS
    assert ((systematic == np.floor(expected)) | (systematic == np.ceil(expected))).all()
    np.testing.assert_allclose(_counts("residual", m).mean(axis=0), expected, atol=0.05)


@pytest.mark.parametrize("scheme", sorted(RESAMPLERS))
def test_one_hot_weight_copies_that_particle(scheme):
    log_w = jnp.full((N,), -jnp.inf).at[5].set(0.0)
    np.testing.assert_array_equal(RESAMPLERS[scheme](jax.random.key(3), log_w), np.full(N, 5))


@pytest.mark.parametrize("resample", [systematic_resample, residual_resample])
def test_uniform_weights_keep_every_particle_once(resample):
    for seed in range(3):
        np.testing.assert_array_equal(resample(jax.random.key(seed), jnp.zeros(N)), np.arange(N))


def test_effective_sample_size_formula_bounds_and_shift_invariance():
    log_w = jnp.asarray([0.3, -1.2, 2.0, 0.0, -5.0])
    w = np.exp(np.asarray(log_w, np.float64))
    w /= w.sum()
    ess = effective_sample_size(log_w)
    np.testing.assert_allclose(ess, 1.0 / np.sum(w**2), rtol=1e-5)
    np.testing.assert_allclose(effective_sample_size(log_w + 300.0), ess, rtol=1e-5)
    np.testing.assert_allclose(effective_sample_size(jnp.zeros(6)), 6.0, rtol=1e-6)
    np.testing.assert_allclose(effective_sample_size(jnp.asarray([0.0, -jnp.inf, -jnp.inf])), 1.0, rtol=1e-6)
    assert 1.0 <= float(ess) <= 5.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: systematic_resample(jax.random.key(0), jnp.zeros((2, 3))), r"log_weights must be .*shape \[N\]"),
        (lambda: residual_resample(jax.random.key(0), jnp.zeros(3, jnp.int32)), "log_weights must be a float"),
        (lambda: RESAMPLERS["multinomial"](jax.random.key(0), jnp.zeros(0)), "N >= 1"),
        (lambda: systematic_resample(jax.random.key(0), jnp.zeros(4), 0),
         r"num_offspring must be an integer >= 1, got 0"),
        (lambda: systematic_resample(jax.random.key(0), jnp.zeros(4), 5),
         r"num_offspring must be at most 4 \(the number of particles\), got 5"),
        (lambda: effective_sample_size(jnp.zeros((2, 2))), "log_weights"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
