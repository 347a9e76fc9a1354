"""icml26zoo.graphs: edge-list GCN propagation, GNNmim inputs, the missingness mechanisms (rates, no empty
column, the FDMNAR and CDMNAR ratios, GCN equivariance) and permutation feature importance (an ignored feature
scores 0, determinism)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo import graphs

# Small programs compiled once each: XLA's cheap pipeline keeps that fast (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fast_compile")

# Both directions of a 5-node path plus a chord; node 5 isolated.
SENDERS = np.array([0, 1, 1, 2, 2, 3, 3, 4, 0, 3], np.int32)
RECEIVERS = np.array([1, 0, 2, 1, 3, 2, 4, 3, 3, 0], np.int32)


@pytest.fixture(scope="module")
def data():
    """A 400-node CSBM with correlated non-informative columns (n·d = 12,800 cells)."""
    return graphs.csbm(num_nodes=400, dims=32, informative=8, mean_degree=6.0, correlated=True, seed=3)


def test_propagation_equals_the_dense_normalised_adjacency_product():
    x = jax.random.normal(jax.random.key(0), (6, 3))
    dense = graphs.normalised_adjacency(SENDERS, RECEIVERS, 6) @ np.asarray(x)
    np.testing.assert_allclose(graphs.propagate(x, jnp.asarray(SENDERS), jnp.asarray(RECEIVERS)), dense, atol=1e-6)
    # The isolated node keeps its own features (self-loop weight 1).
    np.testing.assert_allclose(dense[5], np.asarray(x)[5], atol=1e-6)


def test_gcn_is_permutation_equivariant_and_gnnmim_at_p0_is_the_gcn_on_constant_columns():
    x = jax.random.normal(jax.random.key(1), (6, 4))
    model = graphs.GCN(8, 16, 3, rngs=nnx.Rngs(0))
    z = graphs.gnnmim_inputs(x, np.zeros((6, 4), bool))
    np.testing.assert_array_equal(z, jnp.concatenate([x, jnp.ones((6, 4))], axis=1))
    logits = model(z, jnp.asarray(SENDERS), jnp.asarray(RECEIVERS))
    perm = np.array([3, 0, 5, 1, 4, 2])
    relabel = np.argsort(perm)  # old node i is new node relabel[i]
    permuted = model(z[perm], jnp.asarray(relabel[SENDERS]), jnp.asarray(relabel[RECEIVERS]))
    np.testing.assert_allclose(permuted, logits[perm], atol=1e-5)


def test_bad_graphs_and_rates_raise_value_errors_naming_the_argument():
    x = jnp.ones((6, 2))
    with pytest.raises(ValueError, match=r"senders must hold node indices in \[0, 6\)"):
        graphs.propagate(x, jnp.array([0, 6]), jnp.array([1, 0]))
    with pytest.raises(ValueError, match=r"receivers must hold node indices"):
        graphs.graph_from_edges(x, [0, 1], [1, -1])
    with pytest.raises(ValueError, match="receivers must be an integer array of shape"):
        graphs.propagate(x, jnp.array([0, 1]), jnp.array([1, 0, 2]))
    with pytest.raises(ValueError, match="senders must be an integer array"):
        graphs.propagate(x, jnp.array([0.0, 1.0]), jnp.array([1, 0]))
    with pytest.raises(ValueError, match="self-loops"):
        graphs.propagate(x, jnp.array([0, 1]), jnp.array([0, 0]))
    graph = graphs.graph_from_edges(x, [0, 1], [1, 0])
    with pytest.raises(ValueError, match="graph.n_node must sum to 6"):
        graphs.check_graph(graph._replace(n_node=jnp.array([5])))
    with pytest.raises(ValueError, match=r"graph.nodes must be an array of shape \[N, D\]"):
        graphs.check_graph(graph._replace(nodes=jnp.ones(6)))
    for p in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"p must be a number in \[0, 1\)"):
            graphs.umcar(np.ones((4, 2)), p)
    with pytest.raises(ValueError, match="mask must have shape"):
        graphs.gnnmim_inputs(np.ones((4, 2)), np.zeros((4, 3), bool))
    with pytest.raises(ValueError, match="mechanism must be one of"):
        graphs.make_missing("mnar", np.ones((4, 2)), np.zeros(4), 0.1)


@pytest.mark.parametrize("mechanism", graphs.MECHANISMS)
def test_each_mechanism_hits_its_rate_and_leaves_no_column_fully_missing(mechanism, data):
    if mechanism == "cdmnar":
        pytest.importorskip("sklearn")
    x = np.asarray(data.graph.nodes)
    if mechanism == "smcar":  # whole rows go: the rate's spread is set by N, so N·D >= 10^4 needs more rows
        x = np.random.default_rng(0).normal(size=(4000, 3))
    for p in (0.3, 0.9):
        mask = graphs.make_missing(mechanism, x, data.labels, p, seed=1)
        assert mask.shape == x.shape and abs(mask.mean() - p) <= 0.02, (p, mask.mean())
        assert not mask.all(axis=0).any()


def test_fdmnar_signal_cells_go_missing_r_times_as_often(data):
    x = np.asarray(data.graph.nodes)
    signal = graphs.fdmnar_signal_rows(x)
    assert abs(signal.mean() - 0.1) < 0.01
    mask = graphs.fdmnar(x, 0.3, seed=2)
    ratio = mask[signal].mean() / mask[~signal].mean()
    assert abs(ratio / (0.95 / 0.65) - 1) <= 0.1, ratio


def test_cdmnar_important_cells_go_missing_r_times_as_often(data):
    pytest.importorskip("sklearn")
    x = np.asarray(data.graph.nodes)
    important = graphs.cdmnar_important_cells(x, data.labels)
    assert 0 < important.mean() < 0.2 and important.sum(axis=1).max() <= 2  # at most two tests on a depth-2 path
    mask = graphs.cdmnar(x, data.labels, 0.3, seed=4)
    ratio = mask[important].mean() / mask[~important].mean()
    assert abs(ratio / 2.0 - 1) <= 0.1, ratio


def test_mean_imputation_and_macro_f1():
    x = np.array([[1.0, np.nan], [3.0, 4.0], [np.nan, 8.0]])
    mask = np.isnan(x)
    np.testing.assert_allclose(graphs.mean_impute(x, mask), [[1, 6], [3, 4], [2, 8]])
    np.testing.assert_allclose(graphs.gnnmim_inputs(x, mask), [[1, 0, 1, 0], [3, 4, 1, 1], [0, 8, 0, 1]])
    labels, guesses = jnp.array([0, 0, 1, 1, 2]), jnp.array([0, 1, 1, 1, 0])
    # per class F1: 2·1/(2+1+1) = 0.5, 2·2/(4+1) = 0.8, 0 -> mean 0.4333 (scikit-learn's value)
    assert float(graphs.macro_f1(labels, guesses, 4)) == pytest.approx(1.3 / 3)
    assert float(graphs.accuracy(labels, guesses, where=labels < 2)) == pytest.approx(0.75)


def test_permutation_importance_is_zero_for_an_ignored_feature_and_deterministic():
    model = graphs.GCN(3, 8, 2, dropout=0.5, rngs=nnx.Rngs(0))
    model.hidden_layer.kernel[...] = model.hidden_layer.kernel[...].at[1].set(0.0)
    x = jax.random.normal(jax.random.key(2), (6, 3))
    labels = jnp.array([0, 1, 0, 1, 1, 0])
    senders, receivers = jnp.asarray(SENDERS), jnp.asarray(RECEIVERS)

    def score(inputs):  # negative cross-entropy in evaluation mode (no dropout key)
        logits = model(inputs, senders, receivers)
        return -jnp.mean(jax.nn.logsumexp(logits, axis=1) - jnp.take_along_axis(logits, labels[:, None], 1)[:, 0])

    importance = jax.jit(lambda key: graphs.permutation_importance(score, x, key, repeats=3))
    scores = importance(jax.random.key(5))
    assert scores[1] == 0.0 and scores[0] != 0.0 and scores[2] != 0.0
    np.testing.assert_array_equal(scores, importance(jax.random.key(5)))


def test_prune_features_drops_the_lowest_non_positive_scores_down_to_the_minimum():
    scores = np.array([0.5, -0.2, 0.0, -0.1, 0.3, -0.3])
    active = np.array([True, True, True, True, True, False])
    kept = graphs.prune_features(scores, active, fraction=0.4, min_features=2)
    np.testing.assert_array_equal(kept, [True, False, True, False, True, False])
    assert graphs.prune_features(scores, active, fraction=1.0, min_features=4).sum() == 4
    with pytest.raises(ValueError, match="active must have shape"):
        graphs.prune_features(scores, active[:3])
