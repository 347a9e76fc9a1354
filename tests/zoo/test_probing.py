"""Layer-wise probes (zoo/probing.py): a target planted as a function of one layer's hidden state is recovered
there by the linear probe, a random target is not; R² and the ridge fit against closed forms; bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo import probing
from icml26zoo.models import ModelConfig, build_model

pytestmark = pytest.mark.usefixtures("fast_compile")

LAYER = 1


@pytest.fixture(scope="module")
def features():
    """[3, 256, 16] hidden states of a random 2-layer model on random tokens (8 rows of 32)."""
    model = build_model(ModelConfig(vocab_size=64, d_model=16, num_layers=2, num_heads=2, num_kv_heads=1,
                                    max_seq_len=32), rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(1), (8, 32), 0, 64, dtype=jnp.int32)
    values = probing.layer_features(model, tokens)
    assert values.shape == (3, 256, 16)
    return values


def test_planted_targets_are_recovered_at_their_layer_and_random_ones_are_not(features):
    rng = np.random.default_rng(0)
    direction = rng.normal(size=(16, 3))
    hidden = features[LAYER]
    projected = (hidden - hidden.mean(axis=0)) / hidden.std(axis=0) @ direction
    # Classes from the side of a hyperplane, keeping the tokens at least half a deviation away from it.
    score = projected[:, 0] - np.median(projected[:, 0])
    margin = np.abs(score) > 0.5 * score.std()
    planted_labels = (score[margin] > 0).astype(np.int64)
    random_labels = rng.integers(0, 2, size=planted_labels.size)
    planted = probing.probe_layers(features[:, margin], planted_labels, task="classification")
    chance = probing.probe_layers(features[:, margin], random_labels, task="classification")
    assert planted[LAYER].linear >= 0.97 and planted[LAYER].mlp >= 0.9
    assert chance[LAYER].linear <= 0.72 and chance[LAYER].mlp <= 0.72
    regression = probing.probe_layers(features, projected, task="regression")
    noise = probing.probe_layers(features, rng.normal(size=projected.shape), task="regression")
    assert regression[LAYER].linear > 0.999 and regression[LAYER].mlp > 0.8
    assert noise[LAYER].linear < 0.2
    assert "| 1 | 1.000 |" in probing.scores_table(regression)


def test_r2_and_ridge_closed_forms():
    truth = np.array([[0.0, 1.0], [1.0, 3.0], [2.0, 5.0]])
    assert probing.r2_score(truth, truth) == 1.0
    # Predicting each column's mean explains nothing.
    assert probing.r2_score(truth, np.broadcast_to(truth.mean(axis=0), truth.shape)) == 0.0
    x = np.random.default_rng(1).normal(size=(40, 3))
    weights = probing.fit_ridge(x, x @ [1.0, -2.0, 0.5] + 3.0, ridge=0.0)
    np.testing.assert_allclose(weights, [1.0, -2.0, 0.5, 3.0], atol=1e-10)


def test_group_split_holds_out_whole_groups(features):
    groups = np.repeat(np.arange(8), 32)  # the 8 rows of 32 tokens
    train, held = probing.split_groups(groups, 0.25, seed=3)
    assert sorted(np.concatenate([train, held]).tolist()) == list(range(256))
    assert not set(groups[train]) & set(groups[held]) and len(set(groups[held])) == 2
    # probe_layers with groups uses that split: a target that is the group's label cannot be learnt across it.
    scores = probing.probe_layers(features, groups.astype(np.int64), task="classification", groups=groups)
    assert max(s.linear for s in scores) == 0.0
    with pytest.raises(ValueError, match="groups must have one label per token \\(256\\)"):
        probing.probe_layers(features, np.zeros(256), task="regression", groups=groups[:10])
    with pytest.raises(ValueError, match="groups must hold at least 2 distinct labels"):
        probing.split_groups(np.zeros(5), 0.25, 0)


def test_bad_input_names_the_argument(features):
    with pytest.raises(ValueError, match="targets must have one row per token \\(256\\)"):
        probing.probe_layers(features, np.zeros(10, np.int64), task="classification")
    with pytest.raises(ValueError, match="task must be 'classification' or 'regression', got 'ranking'"):
        probing.probe_layers(features, np.zeros(256), task="ranking")
    with pytest.raises(ValueError, match="classification targets must be non-negative integer labels"):
        probing.probe_layers(features, np.full(256, 0.5), task="classification")
    with pytest.raises(ValueError, match="holdout must lie in \\(0, 1\\), got 1.5"):
        probing.split_indices(10, 1.5, 0)
    with pytest.raises(ValueError, match="R² is undefined"):
        probing.r2_score(np.ones((4, 1)), np.zeros((4, 1)))
