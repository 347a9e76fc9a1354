"""The PCFG probing reproduction: bad inputs rejected before anything is written, and the probe data (targets
aligned one-to-one with the probed tokens). The SMOKE experiment runs in the experiment contract
(tests/repro/test_experiments.py); the FULL one is reported on docs/papers/pcfg_probing.md."""

from __future__ import annotations

import numpy as np
import pytest

from icml26zoo import probing
from icml26zoo.repro import pcfg_probing
from icml26zoo.repro.common import Budget, Experiment
from icml26zoo.train.runs import build_train_model

TINY = Budget(steps=4, batch_size=2, seq_len=25)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"probe_sentences": 4}, "probe_sentences must be an integer >= 8, got 4"),
    ({"checkpoints": 0}, "checkpoints must be an integer >= 1, got 0"),
    ({"targets": ()}, "targets must name at least one of"),
    ({"budget": Budget(steps=4, batch_size=2, seq_len=16)}, "budget.seq_len must be >= 25"),
])
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        pcfg_probing.run(tmp_path / "run", **({"budget": TINY} | kwargs))
    assert not (tmp_path / "run").exists()


def test_probe_targets_align_with_the_probed_tokens(tmp_path):
    config = pcfg_probing.cell_config(Experiment(tmp_path, budget=TINY), checkpoints=2)
    assert pcfg_probing.checkpoint_steps(config) == [2, 4] and config.keep_checkpoints == 2
    inputs, targets = pcfg_probing.probe_data(config, 8)
    tokens, mask = inputs["tokens"], inputs["mask"]
    assert tokens.shape == (8, 25) and (tokens[:, 0] == 1).all()
    count = int(mask.sum())
    assert {name: len(values) for name, values in targets.items()} == dict.fromkeys(targets, count)
    starts = np.concatenate([[0], np.cumsum(mask.sum(axis=1))[:-1]])
    # Position 0 of each sentence is <bos>: depth 0, no boundary, no completed constituent.
    assert not targets["depth"][starts].any() and not targets["constituents_ending"][starts].any()
    np.testing.assert_allclose(targets["next_token"].sum(axis=1), 1.0, rtol=1e-10)


def test_probes_hold_out_whole_sentences(tmp_path, monkeypatch):
    """No probed sentence has tokens on both sides of the probes' split: probe_rows passes each token's sentence
    (its row of the mask) to probe_layers, which holds out whole sentences."""
    config = pcfg_probing.cell_config(Experiment(tmp_path, budget=TINY), checkpoints=1)
    inputs, targets = pcfg_probing.probe_data(config, 12)
    sentences = pcfg_probing.token_sentences(inputs["mask"])
    assert sentences.shape == (int(inputs["mask"].sum()),)
    np.testing.assert_array_equal(np.bincount(sentences), inputs["mask"].sum(axis=1))
    seen = []
    split_groups = probing.split_groups

    def recording(groups, holdout, seed):
        train, held = split_groups(groups, holdout, seed)
        seen.append((groups[train], groups[held]))
        return train, held

    monkeypatch.setattr(probing, "split_groups", recording)
    model = build_train_model(config)
    pcfg_probing.probe_rows(model, "untrained", inputs, {"depth": targets["depth"]}, seed=0)
    assert seen
    for train, held in seen:
        assert set(train) | set(held) == set(range(12)) and not set(train) & set(held)
        assert len(set(held)) == 3  # 25% of 12 sentences


def test_seeds_are_averaged_with_their_spread():
    """A cell per seed: the table's layer scores are the seeds' means and 'seed spread' the widest layer's
    max - min; the KL curve is averaged step by step."""
    first = [{"model": "trained", "target": "depth", "metric": "accuracy", "probe": "linear",
              "layer 0": 0.4, "layer 1": 0.5}]
    second = [dict(first[0], **{"layer 0": 0.5, "layer 1": 0.8})]
    (row,) = pcfg_probing.mean_rows([first, second])
    assert row["layer 0"] == pytest.approx(0.45) and row["layer 1"] == pytest.approx(0.65)
    assert row["seed spread"] == pytest.approx(0.3)
    assert pcfg_probing.mean_rows([first])[0]["seed spread"] is None
    curve = pcfg_probing.mean_curve([[(0, 1.0, 2.0), (4, 0.2, 2.0)], [(0, 2.0, 2.0), (4, 0.4, 2.0)]])
    assert curve == [(0, 1.5, 2.0), (4, pytest.approx(0.3), 2.0)]
    assert pcfg_probing.cell_name(2) == "pcfg_tiny_seed2"
