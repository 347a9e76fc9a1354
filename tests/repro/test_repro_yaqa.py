"""The YAQA reproduction: bad inputs are rejected before anything is written, the script's one-line errors, and
the table rows. The quantizers themselves are tested in tests/zoo/test_quant.py; the experiment's QUICK run
(`scripts/repro/yaqa.py --quick`) trains a model and is not part of the suite."""

from __future__ import annotations

import math

import pytest
from repro_scripts import load_repro_script

from icml26zoo.repro import yaqa
from icml26zoo.repro.cli import run_main
from icml26zoo.repro.common import Budget

TINY = Budget(steps=2, batch_size=2, seq_len=8, seeds=(0,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"methods": ("rtn", "awq")}, "methods: unknown name 'awq'"),
        ({"methods": ()}, "methods must name at least one"),
        ({"bits": (2, 8)}, "bits must be one of"),
        ({"bits": (1,)}, "bits must be one of"),
        ({"bits": ()}, "bits must be distinct"),
        ({"bits": (2, 2)}, "bits must be distinct"),
        ({"calibration_batches": 0}, "calibration_batches"),
        ({"eval_batches": 0}, "eval_batches"),
        ({"d_model": 4}, "d_model"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        yaqa.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()


def test_resume_of_a_missing_run_dir_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        yaqa.run(tmp_path / "missing", budget=TINY, resume=True)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--methods", "rtn,sq"], "unknown name 'sq'"),
        (["--bits", "2,x"], "--bits must be comma-separated integers"),
        (["--bits", "5"], "bits must be one of"),
        (["--calibration-batches", "0"], "calibration_batches"),
        (["--resume"], "does not exist"),
    ],
)
def test_script_reports_bad_input_in_one_line_with_status_2(tmp_path, capsys, argv, match):
    status = run_main(load_repro_script("yaqa").main, ["--quick", "--out", str(tmp_path / "run"), *argv])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1 and error.startswith("error: ") and match in error


def test_rows_average_seeds_and_report_the_spread():
    row = yaqa._row("yaqa_b", 2, [0.1, 0.3], [2.0, 2.2])
    assert row["kl"] == pytest.approx(0.2) and row["kl_spread"] == pytest.approx(0.1)
    assert row["eval_loss"] == pytest.approx(2.1)
    assert yaqa._row("rtn", 3, [0.5], [2.0])["kl_spread"] is None
    assert math.isnan(yaqa._row("rtn", 2, [0.5], [math.nan])["eval_loss"])
