"""Every notebook starts with the Colab badge and install cell rendered from pyproject.toml, sets its budget on
one `BUDGET = "quick"` line, and runs top to bottom against the installed package from a directory outside the
repository, drawing its plots (at the SMOKE budget in the suite; `make notebooks` runs QUICK).

A notebook named after a registered experiment runs inside that experiment's contract test
(tests/repro/test_experiments.py), which checks the run directory it wrote: one smoke run serves both checks.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from notebook_runner import (
    NOTEBOOKS,
    RUN_BUDGET,
    code_cells,
    is_install_cell,
    notebook_cells,
    run_notebook,
    source,
    with_budget,
)

from icml26zoo.repro import registry

# At smoke, an experiment's notebook is run by its contract test; `make notebooks` (quick) runs them all here.
RUN_HERE = [path for path in NOTEBOOKS if RUN_BUDGET != "smoke" or path.stem not in registry.INDEX]


def test_there_is_a_notebook():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_starts_with_the_rendered_badge_and_install_cell(path: pathlib.Path):
    cells = json.loads(path.read_text())["cells"]
    expected = notebook_cells.header_cells(path.stem, extras=notebook_cells.notebook_extras(path))
    assert [notebook_cells.comparable(c) for c in cells[:2]] == [notebook_cells.comparable(c) for c in expected], (
        f"{path.name}: header cells differ from pyproject.toml; run python scripts/notebook_cells.py"
    )
    assert sum(is_install_cell(cell) for cell in code_cells(path)) == 1, "exactly one install cell"


def test_header_cells_follow_the_pyproject_url(tmp_path: pathlib.Path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "pkg"\n[project.urls]\nRepository = "https://github.com/me/fork"\n')
    badge, install = notebook_cells.header_cells("demo", pyproject)
    assert "https://colab.research.google.com/github/me/fork/blob/main/notebooks/demo.ipynb" in source(badge)
    assert '%pip install "pkg[train] @ git+https://github.com/me/fork"' in source(install)
    _, rl_install = notebook_cells.header_cells("demo", pyproject, extras=("train", "rl"))
    assert '%pip install "pkg[train,rl] @ git+https://github.com/me/fork"' in source(rl_install)
    pyproject.write_text('[project]\nname = "pkg"\n[project.urls]\nRepository = "https://gitlab.com/me/fork"\n')
    with pytest.raises(ValueError, match=r"Repository .* must be https://github.com/<owner>/<repo>"):
        notebook_cells.header_cells("demo", pyproject)


def test_every_notebook_sets_its_budget_on_one_line():
    for path in NOTEBOOKS:
        with_budget(path, code_cells(path), "smoke")


@pytest.mark.slow
@pytest.mark.parametrize("path", RUN_HERE, ids=lambda p: p.stem)
def test_notebook_runs_outside_the_repository(path: pathlib.Path, tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch):
    run_notebook(path, tmp_path, monkeypatch)
