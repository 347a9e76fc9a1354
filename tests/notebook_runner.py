"""Runs a notebook's code cells as Colab would, headless, at the budget the suite chooses.

Every notebook sets its budget on one line, `BUDGET = "quick"` (what a Colab user runs: under 3 minutes on a
CPU). The suite rewrites that line to "smoke" (a few steps of the same code path, every cell, every plot drawn);
`make notebooks` sets ZOO_NOTEBOOK_BUDGET=quick to run them as a user would. A notebook named after a registered
experiment is run by that experiment's contract test (tests/repro/test_experiments.py), which then checks the
run directory the notebook wrote; tests/test_notebooks.py runs the others.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import pathlib
import re
import tempfile
from types import ModuleType
from typing import Any

import jax
import matplotlib
import pytest
from matplotlib.figure import Figure

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
BUDGET_LINE = re.compile(r'^BUDGET = "quick"(?=\s|$)', re.MULTILINE)
RUN_BUDGET = os.environ.get("ZOO_NOTEBOOK_BUDGET", "smoke")
# Selects the display backend in Jupyter and Colab; outside IPython the Agg backend is already in use.
INLINE_MAGIC = "%matplotlib inline"


def _load_notebook_cells() -> ModuleType:
    spec = importlib.util.spec_from_file_location("notebook_cells", REPO / "scripts" / "notebook_cells.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


notebook_cells = _load_notebook_cells()


def code_cells(path: pathlib.Path) -> list[dict]:
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def is_install_cell(cell: dict) -> bool:
    return notebook_cells.INSTALL_TAG in tags(cell) or source(cell).lstrip().startswith(("%pip", "!pip"))


def python_source(cell: dict, name: str) -> str:
    """The cell's code without `%matplotlib inline`; any other IPython magic or shell line is an error, so a
    notebook stays plain Python apart from its install cell."""
    lines = []
    for line in source(cell).splitlines():
        if line.strip() == INLINE_MAGIC:
            continue
        if line.lstrip().startswith(("%", "!")):
            raise AssertionError(f"{name}: only {INLINE_MAGIC!r} may use IPython syntax, got {line!r}")
        lines.append(line)
    return "\n".join(lines)


def run_cell(code: str, name: str, namespace: dict) -> Any:
    """Executes the cell like IPython: returns the value of a final bare expression (what it displays)."""
    tree = ast.parse(code, name)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, name, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), name, "eval"), namespace)


def with_budget(path: pathlib.Path, cells: list[dict], budget: str) -> list[dict]:
    """`cells` with the notebook's one `BUDGET = "quick"` line set to `budget`."""
    matches = [index for index, cell in enumerate(cells) if BUDGET_LINE.search(source(cell))]
    assert len(matches) == 1, f'{path.name} must set BUDGET = "quick" on exactly one line of one code cell'
    assert budget in ("smoke", "quick"), f"ZOO_NOTEBOOK_BUDGET must be smoke or quick, got {budget!r}"
    cells = [dict(cell) for cell in cells]
    cell = cells[matches[0]]
    cell["source"] = BUDGET_LINE.sub(f'BUDGET = "{budget}"', source(cell), count=1)
    return cells


def run_notebook(path: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                 budget: str = RUN_BUDGET) -> pathlib.Path:
    """Runs every code cell of `path` but the install cell, in one namespace, from an empty working directory
    with temporary files under `tmp_path / "tmp"`, under XLA's cheap pipeline. Each plot cell must show a drawn
    Figure; the notebook must write only into its temporary directory. Returns that directory."""
    cells = with_budget(path, code_cells(path), budget)
    plot_cells = [index for index, cell in enumerate(cells) if "plot" in tags(cell)]
    assert plot_cells, f"{path.name} has no code cell tagged 'plot'"
    matplotlib.use("Agg")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    # XLA's cheap pipeline: the notebooks' tiny models spend most of their time compiling (about 3x less with
    # optimizations off); the notebooks' numbers are not compared with separately compiled code.
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    try:
        namespace: dict = {}
        for index, cell in enumerate(cells):
            if is_install_cell(cell):
                continue
            name = f"{path.name}[code cell {index}]"
            code = python_source(cell, name)
            try:
                shown = run_cell(code, name, namespace)
            except Exception as error:
                raise AssertionError(f"{name} failed: {error!r}\n{code}") from error
            if index in plot_cells:
                assert isinstance(shown, Figure), f"{name}: a plot cell must end with a Figure, got {shown!r}"
                assert any(axes.has_data() for axes in shown.axes), f"{name}: the figure has nothing drawn"
    finally:
        jax.config.update("jax_disable_most_optimizations", previous)
    assert any(scratch.iterdir()), f"{path.name} wrote nothing into its temporary directory"
    assert not any(cwd.iterdir()), f"{path.name} wrote into the working directory: {list(cwd.iterdir())}"
    return scratch
