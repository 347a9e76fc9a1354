"""The MoE routing reproduction: bad inputs (before anything is written), each cell's config (the router and
balancing weight it names, the budget's steps/batch/tokens, points per row), the classification scores, and the
aggregation of cells into rows. The SMOKE experiment itself runs in the experiment contract
(tests/repro/test_experiments.py) and the notebook test (tests/test_notebooks.py)."""

from __future__ import annotations

import numpy as np
import pytest

from icml26zoo.repro import moe_routing
from icml26zoo.repro.common import Budget, Experiment

TINY = Budget(steps=5, batch_size=4, seq_len=4, seeds=(0,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"routers": ("confidence", "softmax")}, "routers: unknown name 'softmax'"),
        ({"routers": ()}, "routers must name at least one"),
        ({"routers": ("confidence", "confidence")}, "must not repeat"),
        ({"experts": 1}, "experts"),
        ({"dim": 18}, "dim must be a multiple of 4"),
        ({"dim": 20}, "dim must be a multiple of 4 .* i.e. a multiple of 8; got 20"),
        ({"train_size": 0}, "train_size"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        moe_routing.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("router", list(moe_routing.ROUTERS))
def test_cell_configs_name_the_router_balance_and_budget(router, tmp_path):
    experiment = Experiment(tmp_path / "run", budget=TINY)
    config = moe_routing.cell_config(experiment, router, 3, experts=6, dim=16, train_size=32, test_size=8)
    model, task = config.model, dict(config.data.task_options)
    name, balance = moe_routing.ROUTERS[router]
    assert (model.moe.router, model.moe.load_balance_weight, model.moe.z_loss_weight) == (name, balance, 0.0)
    assert (model.name, model.moe.num_experts, model.moe.top_k, model.d_model) == ("confsmoe", 6, 2, 16)
    assert (config.num_steps, config.batch_size, config.seed, task["seed"], task["tokens"]) == (5, 4, 3, 3, 4)
    assert (task["setting"], len(task["feature_dims"]), task["train_examples"], task["eval_examples"]) == (
        "II", 3, 32, 8)
    assert dict(model.model_options)["tokens"] == 4 and config.seq_len == 3 * 4  # M·S points per row
    assert config.objective == "multimodal_moe" and config.data.name == "zoo_multimodal"
    assert balance == (0.01 if router == "topk_softmax_lb" else 0.0)


def test_classification_scores():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    scores = moe_routing.classification_scores(probs, np.array([0, 1, 2, 1]))
    assert scores["accuracy"] == 0.75
    # Per class: F1 of class 0 = 2/3, class 1 = 2/3, class 2 = 1.
    np.testing.assert_allclose(scores["f1"], (2 / 3 + 2 / 3 + 1) / 3)
    # Class 1: positives 0.8 and 0.3 against negatives 0.2 and 0.3: three pairs ordered, one tie (1/2): 0.875.
    np.testing.assert_allclose(scores["auc"], (1.0 + 0.875 + 1.0) / 3)


def test_rows_average_the_seeds():
    def cell(accuracy, load):
        metrics = {name: accuracy for name in moe_routing.AVERAGED}
        metrics.update(collapse=accuracy / 2, max_load_ratio=1.0 + accuracy, coselection=0.1, load=np.asarray(load))
        return metrics

    uneven = [0.1, 0.2, 0.3, 0.4]
    row = moe_routing._row("mahalanobis", [cell(0.5, [0.25] * 4), cell(0.7, uneven)])
    matched = round((1 / 3 + moe_routing.coselection_reference(uneven)) / 2, 4)
    assert row == {"router": "mahalanobis", "balance_loss": 0.0, "accuracy": 0.6, "f1": 0.6, "auc": 0.6,
                   "accuracy_no_impute": 0.6, "auc_no_impute": 0.6, "collapse": 0.3, "max_load_ratio": 1.6,
                   "coselection": 0.1, "coselection_matched": matched, "coselection_floor": 0.3333,
                   "load": [0.175, 0.225, 0.275, 0.325]}
    figure = moe_routing._load_figure([row, {**row, "router": "confidence"}])
    assert len(figure.axes[0].patches) == 8
    assert len(moe_routing._diversity_figure([row, {**row, "router": "confidence"}]).axes[1].patches) == 2


@pytest.mark.parametrize("experts", [3, 5, 8])
def test_the_load_matched_reference_is_the_floor_at_balanced_load(experts):
    """Uniformly random 2-of-E routing: phi = −1/(E − 1) for every pair of experts."""
    assert moe_routing.coselection_reference([1 / experts] * experts) == pytest.approx(1 / (experts - 1), rel=1e-5)


def test_the_load_matched_reference_matches_the_load_and_counts_pairs():
    """Expert i is chosen by a share 2·load_i of tokens, always with exactly one other expert; the pair shares
    are those of P({i, j}) ∝ w_i w_j; an uneven load alone brings co-selection below the floor 1/(E − 1)."""
    load = np.random.default_rng(0).dirichlet(np.full(8, 3.0))
    cooccurrence = moe_routing.matched_cooccurrence(load)
    np.testing.assert_allclose(np.diag(cooccurrence), 2 * load, atol=1e-9)
    np.testing.assert_allclose(cooccurrence.sum(axis=1), 2 * np.diag(cooccurrence), atol=1e-9)
    np.testing.assert_allclose(cooccurrence, cooccurrence.T, atol=1e-12)
    pair = cooccurrence - np.diag(np.diag(cooccurrence))
    weights = pair[0, 1:] / pair[0, 1]  # w_j / w_1 for j ≥ 1, the same from every row
    np.testing.assert_allclose(pair[2, 3:] / pair[2, 1], weights[2:] / weights[0], rtol=1e-6)
    assert moe_routing.coselection_reference(load) < 1 / 7
