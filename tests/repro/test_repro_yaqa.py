"""The YAQA reproduction: bad inputs are rejected before anything is written, and the table rows. The quantizers
themselves are tested in tests/zoo/test_quant.py; the experiment's SMOKE run is checked by the experiment contract
(tests/repro/test_experiments.py)."""

from __future__ import annotations

import math

import pytest

from icml26zoo.repro import yaqa
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


def test_rows_average_seeds_and_report_the_spread():
    row = yaqa._row("yaqa_b", 2, [0.1, 0.3], [2.0, 2.2])
    assert row["kl"] == pytest.approx(0.2) and row["kl_spread"] == pytest.approx(0.1)
    assert row["eval_loss"] == pytest.approx(2.1)
    assert yaqa._row("rtn", 3, [0.5], [2.0])["kl_spread"] is None
    assert math.isnan(yaqa._row("rtn", 2, [0.5], [math.nan])["eval_loss"])
