"""The ATL-FGD experiment's cells (no training; the SMOKE run is in tests/repro/test_experiments.py): the leak
check's role differs from "fgd" only in the teacher (plain embeddings), and bad roles are refused by name."""

from __future__ import annotations

import dataclasses

import pytest

from icml26zoo.repro import atl_fgd
from icml26zoo.repro.atl_fgd_parts import DEFAULT_ROLES, ROLES, cell_base
from icml26zoo.repro.common import Experiment


def test_leak_check_role_changes_only_the_teacher(tmp_path):
    experiment = Experiment(tmp_path, budget=atl_fgd.SMOKE)
    fgd, plain = (cell_base(role, experiment, tiny=True) for role in ("fgd", "fgd_plain"))
    data, plain_data = dict(fgd.data.task_options), dict(plain.data.task_options)
    assert data.get("teacher_plain", 0) == 0 and plain_data.pop("teacher_plain") == 1
    assert {k: v for k, v in data.items() if k != "teacher_plain"} == plain_data
    options, plain_options = dict(fgd.model.model_options), dict(plain.model.model_options)
    assert plain_options.pop("teacher_mode") == "plain" and options.get("teacher_mode", "context") == "context"
    assert {k: v for k, v in options.items() if k != "teacher_mode"} == plain_options
    assert dataclasses.replace(plain, data=fgd.data, model=fgd.model) == fgd
    assert "fgd_plain" in ROLES and "fgd_plain" not in DEFAULT_ROLES


def test_unknown_role_is_refused(tmp_path):
    with pytest.raises(ValueError, match="roles: unknown name 'teacher'"):
        atl_fgd.run(tmp_path / "run", budget=atl_fgd.SMOKE, roles=("teacher",))
    assert not (tmp_path / "run").exists()
