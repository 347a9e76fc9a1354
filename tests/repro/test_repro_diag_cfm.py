"""The Diag-CFM reproduction: bad inputs, the score summaries (best-of-N, abstention, AUROC) against hand-worked
cases, the fixed design orderings, and one tiny cell end to end (trained, scored, stored, reused, refused under
other settings). The command line, its one-line errors and resume are the experiment contract's
(tests/repro/test_experiments.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from icml26zoo.repro import diag_cfm
from icml26zoo.repro import diag_cfm_parts as parts
from icml26zoo.repro.common import Budget

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

TINY = Budget(steps=20, batch_size=16, seq_len=1, seeds=(0,))
TINY_ARGS = {"pairings": ("diag",), "dims": (2,), "orders": ("aligned",), "n_labels": 1, "train_pairs": 64,
             "targets": 4, "candidates": 3, "ode_steps": 4, "width": 8, "depth": 1}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pairings": ("diag", "joint")}, "pairings: unknown name 'joint'"),
        ({"orders": ()}, "orders must name at least one"),
        ({"dims": (4, 3)}, r"dims\[i\] \(at least 2 n_labels\) must be an integer >= 4, got 3"),
        ({"dims": (4, 4)}, "without repeats"),
        ({"n_labels": 0}, "n_labels must be an integer >= 1"),
        ({"candidates": 0}, "candidates must be an integer >= 1"),
        ({"ode_steps": -1}, "ode_steps"),
        ({"budget": Budget(steps=20, batch_size=16, seq_len=8)}, "budget.seq_len must be 1"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    kwargs = {"budget": TINY, **kwargs}
    with pytest.raises(ValueError, match=match):
        diag_cfm.run(tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()


def test_best_of_n_and_abstention_pick_by_the_score():
    scores = {"rt": np.array([[0.5, 0.1, 0.9], [0.3, 0.2, 0.4]]), "sc": np.array([[0.2, 0.3, 0.1], [0.9, 0.1, 0.5]])}
    # lowest SC: candidate 2 (RT 0.9) for target 0, candidate 1 (RT 0.2) for target 1.
    assert parts.best_of(scores, "sc") == pytest.approx(0.55)
    assert parts.best_of(scores, "rt") == pytest.approx(0.15)
    # chosen SC: 0.1 and 0.1 (a tie, kept in target order): 50% coverage keeps target 0 only.
    assert parts.abstention_curve(scores, "sc", (0.5, 1.0)) == pytest.approx([0.9, 0.55])


def test_auroc_is_the_mann_whitney_probability():
    assert parts.auroc(np.array([0.1, 0.2]), np.array([0.3, 0.4])) == 1.0
    assert parts.auroc(np.array([0.3, 0.4]), np.array([0.1, 0.2])) == 0.0
    # pairs (in, out): (1,0.5) no, (1,2) yes, (3,0.5) no, (3,2) no, ties none -> 1/4; plus a tie counts 1/2.
    assert parts.auroc(np.array([1.0, 3.0]), np.array([0.5, 2.0])) == 0.25
    assert parts.auroc(np.array([1.0]), np.array([1.0])) == 0.5


def test_orderings_are_fixed_permutations_and_aligned_is_the_identity():
    assert parts.ordering(8, "aligned") is None
    shuffled = parts.ordering(8, "shuffled")
    assert sorted(shuffled) == list(range(8)) and shuffled != tuple(range(8))
    assert parts.ordering(8, "shuffled") == shuffled
    with pytest.raises(ValueError, match="order must be 'aligned' or 'shuffled'"):
        parts.ordering(8, "reversed")


def test_a_tiny_cell_runs_end_to_end_and_is_reused(tmp_path):
    results = diag_cfm.run(tmp_path / "run", budget=TINY, **TINY_ARGS)
    (row,) = results.rows
    assert row["pairing"] == "Diag-CFM" and row["P"] == 2 and row["order"] == "aligned"
    for column in ("rt_single", "rt_best_sc", "rt_best_zd", "sc_in", "zd_in", "sc_ood", "zd_ood"):
        assert np.isfinite(row[column]) and row[column] >= 0
    assert row["rt_best_oracle"] <= min(row["rt_single"], row["rt_best_sc"], row["rt_best_zd"])
    assert set(results.paths) == {"markdown", "json", "round_trip", "abstention"}
    cell = tmp_path / "run" / "cells" / "diag_P2_aligned_seed0.json"
    record = json.loads(cell.read_text())
    assert np.shape(record["in"]["rt"]) == (4, 3) and np.shape(record["ood"]["zd"]) == (4, 3)
    again = diag_cfm.run(tmp_path / "run", budget=TINY, resume=True, **TINY_ARGS)
    assert again.rows == results.rows
    with pytest.raises(ValueError, match="was run with other settings"):
        diag_cfm.run(tmp_path / "run", budget=TINY, **{**TINY_ARGS, "candidates": 2})
