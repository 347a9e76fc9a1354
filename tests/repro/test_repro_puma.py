"""The PUMA reproduction: bad inputs, a tiny end-to-end run of both methods (rows, curves, figure, the pool's data
consumption) and the reuse of finished cells (refused with other settings). The SMOKE run's outputs, command line
and resume are checked by the experiment contract (tests/repro/test_experiments.py)."""

from __future__ import annotations

import pytest

from icml26zoo.repro import puma
from icml26zoo.repro.common import Budget

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

TINY = Budget(steps=4, batch_size=4, seq_len=16, seeds=(0,))
TINY_SETUP = {"d_model": 16, "num_layers": 1, "num_phases": 2, "eval_every": 2, "eval_rows": 4, "eval_mask_draws": 1,
              "sampler_steps": 2}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"methods": ("random", "adamw")}, "methods: unknown name 'adamw'"),
        ({"methods": ()}, "methods must name at least one"),
        ({"num_phases": 0}, "num_phases must be an integer >= 1"),
        ({"mode": "greedy"}, "mode must be one of"),
        ({"sampler_steps": 9}, "sampler_steps must be at most the 8"),
        ({"eval_every": 0}, "eval_every must be an integer >= 1"),
        ({"d_model": 0}, "d_model must be an integer >= 1"),
        ({"learning_rate": 0.0}, "learning_rate must be a finite positive number, got 0.0"),
        ({"learning_rate": float("inf")}, "learning_rate must be a finite positive number, got inf"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        puma.run(tmp_path / "run", budget=TINY, **(TINY_SETUP | kwargs))
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def test_steps_to_reach_is_the_first_evaluation_at_or_below_the_target():
    curve = {"step": [10, 20, 30], "bpb": [5.0, 4.0, 3.5]}
    assert puma.steps_to_reach(curve, 4.0) == 20 and puma.steps_to_reach(curve, 3.0) is None


def test_tiny_run_writes_both_methods_and_reuses_finished_cells(tmp_path):
    results = puma.run(tmp_path / "run", budget=TINY, **TINY_SETUP)
    rows = {row["method"]: row for row in results.rows}
    random, progressive = rows[puma.LABELS["random"]], rows[puma.LABELS["puma"]]
    assert random["fresh_rows"] == TINY.steps * TINY.batch_size
    # PUMA draws B rows for the pool, then one per row finishing its K = 2 phases: B + steps * B / 2.
    assert progressive["fresh_rows"] == TINY.batch_size + TINY.steps * TINY.batch_size // 2
    assert random["steps_to_match"] == TINY.steps and random["speedup"] == 1.0
    for row in rows.values():
        assert 0 < row["bpb_final"] < 12 and 0 <= row["infill_acc_final"] <= 1
    assert results.extra["curves"]["puma"]["step"] == [2, 4]
    assert results.paths["curves"].is_file() and "| step |" in results.markdown
    again = puma.run(tmp_path / "run", budget=TINY, resume=True, **TINY_SETUP)
    assert again.rows == results.rows
    with pytest.raises(ValueError, match="ran with other settings"):
        puma.run(tmp_path / "run", budget=TINY, **(TINY_SETUP | {"num_phases": 4}))
