"""NOTIME with the adaptive group lasso (icml26zoo.causal; docs/papers/notime.md): the invariants of the
acyclicity function, dHSIC, the group prox and the constant edge, graph extraction and scores, and bad input."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo import causal

# Compile time dominates the small programs here on CPU: every test but the fit runs under XLA's cheap pipeline
# (tests/conftest.py), a module-scoped switch, so the fit (about 1,800 optimiser steps, slow unoptimised) is
# the first test of the module and does not request it.
FAST = pytest.mark.usefixtures("fast_compile")


def test_the_adaptive_group_lasso_prunes_a_zero_effect_input_exactly():
    # x0 → x1 (nonlinear); x2 is independent of both: as an input of x1 (edge 2 → 1) it has zero effect.
    dag = np.array([[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    sample = causal.sample_anm(0, 3, 200, dag=dag, noises=("uniform", "laplace"))
    config = causal.FitConfig(inner_steps=300, max_outer=3, batch_size=200)
    first, second, weights = causal.fit_two_stage(sample.data, config, lam=0.1, seed=0)
    # Stage 1 (λ = 0) keeps the zero-effect columns: small (below τ = 0.3 here, so the threshold already drops
    # them from the graph) but not zero; stage 2's prox sets them exactly to zero.
    assert 0 < first.strengths[2, 1] < 0.3 and 0 < first.strengths[2, 0] < 0.3
    assert second.strengths[2, 1] == 0.0 and second.strengths[2, 0] == 0.0
    assert weights[2, 1] > 10 * weights[1, 0]  # weak first-stage edges are the ones penalised hard
    assert np.all(causal.extract_dag(second.strengths)[2] == 0)
    # Not asserted: the direction of 0 → 1 and the absence of 0, 1 → 2. At n = 200 with this short schedule
    # stage 1 prefers 1 → 0 and builds x2's MLP on x0 and x1 (docs/papers/notime.md).


def _random_dag(rng: np.random.Generator, d: int) -> np.ndarray:
    upper = np.triu(rng.uniform(0.3, 1.5, (d, d)) * (rng.random((d, d)) < 0.6), 1)
    order = rng.permutation(d)
    return upper[np.ix_(order, order)]


@FAST
def test_acyclicity_is_zero_on_dags_positive_with_a_cycle_and_its_gradient_is_exact():
    rng = np.random.default_rng(0)
    dag = _random_dag(rng, 6)
    assert causal.is_dag(dag)
    assert abs(float(causal.acyclicity(jnp.asarray(dag, jnp.float32)))) < 1e-5
    k, j = np.argwhere(dag)[0]
    cyclic = dag.copy()
    cyclic[j, k] = 0.5  # the reverse of an existing edge: a 2-cycle
    assert not causal.is_dag(cyclic)
    assert float(causal.acyclicity(jnp.asarray(cyclic, jnp.float32))) > 1e-2
    dense = jnp.asarray(rng.normal(size=(6, 6)) * 0.4, jnp.float32)
    np.testing.assert_allclose(causal.acyclicity_grad(dense), jax.grad(causal.acyclicity)(dense), rtol=1e-4,
                               atol=1e-5)


@FAST
def test_dhsic_tests_independence_and_is_invariant_to_affine_rescaling():
    rng = np.random.default_rng(1)
    independent = jnp.asarray(np.stack([rng.laplace(size=150), rng.uniform(size=150), rng.normal(size=150)], 1),
                              jnp.float32)
    stat_ind, p_ind = causal.dhsic_permutation_test(independent, jax.random.key(0), num_permutations=99)
    x = rng.normal(size=150)
    dependent = jnp.asarray(np.stack([x, x**2 + 0.3 * rng.normal(size=150), rng.normal(size=150)], 1), jnp.float32)
    stat_dep, p_dep = causal.dhsic_permutation_test(dependent, jax.random.key(0), num_permutations=99)
    assert float(p_ind) > 0.05 and float(p_dep) <= 0.01  # x² is uncorrelated with x: a nonlinear dependence
    assert float(stat_dep) > 5 * float(stat_ind) > 0
    rescaled = dependent * jnp.array([10.0, -0.1, 3.0]) + jnp.array([5.0, 1.0, -2.0])
    np.testing.assert_allclose(causal.dhsic(rescaled), causal.dhsic(dependent), rtol=1e-3)


@FAST
def test_group_prox_zeros_small_columns_and_is_the_closed_form_argmin():
    w1 = jnp.asarray(np.random.default_rng(2).normal(size=(3, 4, 3)), jnp.float32) * causal.self_mask(3)
    norms = np.asarray(causal.edge_strengths(w1))  # [k, j]
    thresholds = jnp.asarray(np.where(np.eye(3), 0.0, np.median(norms[norms > 0])), jnp.float32)
    out = causal.group_soft_threshold(w1, thresholds)
    out_norms = np.asarray(causal.edge_strengths(out))
    small = (norms <= np.asarray(thresholds)) & ~np.eye(3, dtype=bool)
    assert small.any() and (~small & ~np.eye(3, dtype=bool)).any()
    assert np.all(out_norms[small] == 0.0)  # exact zeros, not merely small
    np.testing.assert_allclose(out_norms[~small], (norms - np.asarray(thresholds))[~small], rtol=1e-5, atol=1e-6)
    # argmin_v ½‖v − w‖² + t‖v‖ per column: no random perturbation of the prox output lowers the objective.
    rng = np.random.default_rng(3)
    for j, k in [(0, 1), (1, 2), (2, 0)]:
        w, v, t = np.asarray(w1[j, :, k]), np.asarray(out[j, :, k]), float(thresholds[k, j])
        objective = lambda u, w=w, t=t: 0.5 * np.sum((u - w) ** 2) + t * np.linalg.norm(u)  # noqa: E731
        for _ in range(50):
            assert objective(v) <= objective(v + 1e-2 * rng.normal(size=v.shape)) + 1e-9


@FAST
def test_extraction_breaks_cycles_at_the_weakest_edge_and_scores_count_a_reversal_once():
    strengths = np.array([[0.0, 0.9, 0.0], [0.0, 0.0, 0.8], [0.5, 0.0, 0.0]])  # 0 → 1 → 2 → 0, weakest 2 → 0
    dag = causal.extract_dag(strengths, threshold=0.3)
    np.testing.assert_array_equal(dag, [[0, 1, 0], [0, 0, 1], [0, 0, 0]])
    assert causal.is_dag(dag) and causal.extract_dag(strengths, threshold=0.85).sum() == 1
    truth = np.array([[0, 1, 0], [0, 0, 0], [0, 1, 0]])  # 0 → 1 ← 2
    scores = causal.structure_scores(dag, truth)  # one hit, 1 → 2 reversed, no missing pair
    assert scores == {"shd": 1.0, "tpr": 0.5, "fdr": 0.5, "f1": 0.5, "edges": 2.0}


@FAST
def test_synthetic_anm_is_a_seeded_dag_sample():
    a, b = causal.sample_anm(4, 6, 50), causal.sample_anm(4, 6, 50)
    np.testing.assert_array_equal(a.data, b.data)
    assert a.data.shape == (50, 6) and causal.is_dag(a.dag) and np.all(np.diagonal(a.dag) == 0)
    assert set(a.noises) <= set(causal.NOISES) and np.all((a.scales >= 0.5) & (a.scales <= 2.0))


@pytest.mark.parametrize(("call", "message"), [
    (lambda: causal.extract_dag(np.zeros((2, 3))), r"strengths must be a square .* got shape \(2, 3\)"),
    (lambda: causal.structure_scores(np.eye(3), np.zeros((3, 3))), r"estimate must have no self-loops .* \[0, 1, 2\]"),
    (lambda: causal.check_adjacency("truth", np.zeros((1, 1))), r"truth must be a square .* d >= 2, got shape"),
    (lambda: causal.fit(np.zeros((1, 3)), causal.FitConfig(), seed=0), r"x must be a data .* n >= 2 .* \(1, 3\)"),
    (lambda: causal.fit(np.zeros((5, 1)), causal.FitConfig(), seed=0), r"x must be .* d >= 2 variables, got shape"),
    (lambda: causal.fit(np.full((5, 3), np.nan), causal.FitConfig(), seed=0), r"x must be finite, got 15 NaN"),
    (lambda: causal.FitConfig(loss="l2"), r"loss must be one of \['independence', 'mse'\], got 'l2'"),
    (lambda: causal.sample_anm(0, 1, 10), r"num_nodes must be an integer >= 2, got 1"),
])
@FAST
def test_bad_input_is_a_value_error_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@FAST
def test_fit_rejects_weights_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"weights must have shape \(3, 3\), got \(2, 2\)"):
        causal.fit(np.ones((4, 3)) * np.arange(4)[:, None], dataclasses.replace(causal.FitConfig(), inner_steps=1),
                   seed=0, weights=np.ones((2, 2)))
