"""The NC-losses reproduction: bad inputs and the evaluation pieces (which classifier each method is scored with,
the class-mean prototype classifier). The SMOKE experiment runs in the experiment contract
(tests/repro/test_experiments.py) and the notebook test (tests/test_notebooks.py)."""

from __future__ import annotations

import numpy as np
import pytest

from icml26zoo.losses.neural_collapse import simplex_etf
from icml26zoo.repro import nc_losses
from icml26zoo.repro import nc_losses_parts as parts
from icml26zoo.repro.common import Budget

TINY = Budget(steps=2, batch_size=8, seq_len=64, seeds=(0,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"methods": ("ce", "arcface")}, "methods: unknown name 'arcface'"),
        ({"methods": ()}, "methods must name at least one"),
        ({"eval_points": 0}, "eval_points"),
        ({"budget": Budget(steps=2, batch_size=8, seq_len=32)}, "budget.seq_len must be 64"),
        ({"d_model": 20}, "d_model must be a multiple of 8"),
        ({"num_layers": 0}, "num_layers must be an integer >= 1"),
        ({"learning_rate": 0.0}, "learning_rate must be a finite positive number, got 0.0"),
        ({"weight_decay": -1.0}, "weight_decay must be a finite non-negative number, got -1.0"),
        ({"readout_rows": 8}, "readout_rows must be an integer >= 32"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        nc_losses.run(tmp_path / "run", **{"budget": TINY, **kwargs})
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def test_every_method_names_a_registered_objective():
    from icml26zoo.registry import OBJECTIVES

    for method in parts.METHODS:
        assert parts.objective_for(method) in OBJECTIVES
    assert parts.objective_for("ce") == "classification" and parts.objective_for("nonl_etf") == "nc_nonl_etf_k10"


def test_methods_are_scored_with_their_own_classifier():
    rng = np.random.default_rng(0)
    labels = np.arange(200) % 10
    readout = parts.Readout(rng.normal(size=(200, 12)), labels)
    head = rng.normal(size=(10, 12)) * rng.uniform(0.1, 5.0, size=(10, 1))
    raw = np.mean(np.argmax(readout.features @ head.T, 1) == labels)
    unit_head = head / np.linalg.norm(head, axis=1, keepdims=True)
    cosine = np.mean(np.argmax(readout.features @ unit_head.T, 1) == labels)
    assert raw != cosine  # CE is scored by its raw head logits, the normalised losses by cosine
    assert parts.accuracy("ce", head, readout) == pytest.approx(raw)
    assert parts.accuracy("nonl", head, readout) == pytest.approx(cosine)


def test_fixed_and_class_mean_classifiers():
    etf = simplex_etf(10, 12).astype(np.float64)
    labels = np.arange(40) % 10
    features = (etf[labels] + 0.01) * np.linspace(0.5, 2.0, 40)[:, None]
    readout = parts.Readout(features, labels)
    assert parts.classifier_weights("nonl_etf", None, readout) == pytest.approx(etf)
    np.testing.assert_allclose(parts.classifier_weights("scl", None, readout), etf, atol=0.05)
    assert parts.class_mean_accuracy(readout, readout) == 1.0
