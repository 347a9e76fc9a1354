"""The PUMA reproduction: bad inputs, the script's one-line errors, a tiny end-to-end run of both methods (rows,
curves, figure, the pool's data consumption) and the reuse of finished cells."""

from __future__ import annotations

import dataclasses

import pytest
from repro_scripts import load_repro_script

from icml26zoo.repro import puma
from icml26zoo.repro.cli import run_main
from icml26zoo.repro.common import Budget

TINY = Budget(steps=4, batch_size=4, seq_len=16, seeds=(0,))
TINY_SETUP = puma.Setup(d_model=16, num_layers=1, num_phases=2, eval_every=2, eval_rows=4, eval_mask_draws=1,
                        sampler_steps=2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"methods": ("random", "adamw")}, "methods: unknown name 'adamw'"),
        ({"methods": ()}, "methods must name at least one"),
        ({"setup": dataclasses.replace(TINY_SETUP, num_phases=0)}, "num_phases must be an integer >= 1"),
        ({"setup": dataclasses.replace(TINY_SETUP, mode="greedy")}, "mode must be one of"),
        ({"setup": dataclasses.replace(TINY_SETUP, sampler_steps=9)}, "setup.sampler_steps must be at most the 8"),
        ({"setup": dataclasses.replace(TINY_SETUP, eval_every=0)}, "setup.eval_every"),
        ({"setup": dataclasses.replace(TINY_SETUP, learning_rate=0.0)}, "setup.learning_rate must be > 0"),
        ({"setup": {"num_phases": 2}}, "setup must be a repro.puma.Setup"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    kwargs = {"setup": TINY_SETUP, **kwargs}
    with pytest.raises(ValueError, match=match):
        puma.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def test_resume_of_a_missing_run_dir_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        puma.run(tmp_path / "missing", budget=TINY, setup=TINY_SETUP, resume=True)


@pytest.mark.parametrize(
    ("argv", "match"),
    [(["--methods", "random,sgd"], "unknown name 'sgd'"), (["--phases", "0"], "num_phases"),
     (["--mode", "fast"], "mode must be one of"), (["--resume"], "does not exist")],
)
def test_script_reports_bad_input_in_one_line_with_status_2(tmp_path, capsys, argv, match):
    status = run_main(load_repro_script("puma").main, ["--quick", "--out", str(tmp_path / "run"), *argv])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1 and error.startswith("error: ") and match in error


def test_steps_to_reach_is_the_first_evaluation_at_or_below_the_target():
    curve = {"step": [10, 20, 30], "bpb": [5.0, 4.0, 3.5]}
    assert puma.steps_to_reach(curve, 4.0) == 20 and puma.steps_to_reach(curve, 3.0) is None


def test_tiny_run_writes_both_methods_and_reuses_finished_cells(tmp_path):
    results = puma.run(tmp_path / "run", budget=TINY, setup=TINY_SETUP)
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
    again = puma.run(tmp_path / "run", budget=TINY, setup=TINY_SETUP, resume=True)
    assert again.rows == results.rows
    with pytest.raises(ValueError, match="ran with other settings"):
        puma.run(tmp_path / "run", budget=TINY, setup=dataclasses.replace(TINY_SETUP, num_phases=4))
