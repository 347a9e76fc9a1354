"""Every notebook starts with the Colab badge and install cell rendered from pyproject.toml, and runs top to
bottom against the installed package from a directory outside the repository, drawing its plot."""

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
# Every notebook sets its budget on one line, `BUDGET = "quick"` (what Colab users run, under 3 minutes). The
# suite runs every cell at "smoke" (a few steps of the same code path, seconds); `make notebooks` sets
# ZOO_NOTEBOOK_BUDGET=quick to run them as a user would.
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


def _code_cells(path: pathlib.Path) -> list[dict]:
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _is_install_cell(cell: dict) -> bool:
    return notebook_cells.INSTALL_TAG in _tags(cell) or _source(cell).lstrip().startswith(("%pip", "!pip"))


def _python_source(cell: dict, name: str) -> str:
    """The cell's code without `%matplotlib inline`; any other IPython magic or shell line is an error, so a
    notebook stays plain Python apart from its install cell."""
    lines = []
    for line in _source(cell).splitlines():
        if line.strip() == INLINE_MAGIC:
            continue
        if line.lstrip().startswith(("%", "!")):
            raise AssertionError(f"{name}: only {INLINE_MAGIC!r} may use IPython syntax, got {line!r}")
        lines.append(line)
    return "\n".join(lines)


def _run_cell(source: str, name: str, namespace: dict) -> Any:
    """Executes the cell like IPython: returns the value of a final bare expression (what it displays)."""
    tree = ast.parse(source, name)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, name, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), name, "eval"), namespace)


def test_there_is_a_notebook():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_starts_with_the_rendered_badge_and_install_cell(path: pathlib.Path):
    cells = json.loads(path.read_text())["cells"]
    expected = notebook_cells.header_cells(path.stem, extras=notebook_cells.notebook_extras(path))
    assert [notebook_cells.comparable(c) for c in cells[:2]] == [notebook_cells.comparable(c) for c in expected], (
        f"{path.name}: header cells differ from pyproject.toml; run python scripts/notebook_cells.py"
    )
    assert sum(_is_install_cell(cell) for cell in _code_cells(path)) == 1, "exactly one install cell"


def test_header_cells_follow_the_pyproject_url(tmp_path: pathlib.Path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "pkg"\n[project.urls]\nRepository = "https://github.com/me/fork"\n')
    badge, install = notebook_cells.header_cells("demo", pyproject)
    assert "https://colab.research.google.com/github/me/fork/blob/main/notebooks/demo.ipynb" in _source(badge)
    assert '%pip install "pkg[train] @ git+https://github.com/me/fork"' in _source(install)
    _, rl_install = notebook_cells.header_cells("demo", pyproject, extras=("train", "rl"))
    assert '%pip install "pkg[train,rl] @ git+https://github.com/me/fork"' in _source(rl_install)
    pyproject.write_text('[project]\nname = "pkg"\n[project.urls]\nRepository = "https://gitlab.com/me/fork"\n')
    with pytest.raises(ValueError, match=r"Repository .* must be https://github.com/<owner>/<repo>"):
        notebook_cells.header_cells("demo", pyproject)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_outside_the_repository(path: pathlib.Path, tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch):
    cells = _with_budget(path, _code_cells(path), RUN_BUDGET)
    plot_cells = [index for index, cell in enumerate(cells) if "plot" in _tags(cell)]
    assert plot_cells, f"{path.name} has no code cell tagged 'plot'"
    matplotlib.use("Agg")
    # The notebook's temporary files go under tmp_path, so the test can check they went to a temp dir.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)
    # XLA's cheap pipeline: a QUICK run's tiny models spend most of their time compiling (about 3x less
    # with optimizations off); the notebooks' numbers are not compared with separately compiled code.
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    try:
        _run_cells(path, cells, plot_cells)
    finally:
        jax.config.update("jax_disable_most_optimizations", previous)
    assert any(scratch.iterdir()), f"{path.name} wrote nothing into its temporary directory"
    assert not any(run_dir.iterdir()), f"{path.name} wrote into the working directory: {list(run_dir.iterdir())}"


def _with_budget(path: pathlib.Path, cells: list[dict], budget: str) -> list[dict]:
    """`cells` with the notebook's one `BUDGET = "quick"` line set to `budget`."""
    matches = [index for index, cell in enumerate(cells) if BUDGET_LINE.search(_source(cell))]
    assert len(matches) == 1, f'{path.name} must set BUDGET = "quick" on exactly one line of one code cell'
    assert budget in ("smoke", "quick"), f"ZOO_NOTEBOOK_BUDGET must be smoke or quick, got {budget!r}"
    cells = [dict(cell) for cell in cells]
    cell = cells[matches[0]]
    cell["source"] = BUDGET_LINE.sub(f'BUDGET = "{budget}"', _source(cell), count=1)
    return cells


def _run_cells(path: pathlib.Path, cells: list[dict], plot_cells: list[int]) -> None:
    """Runs every code cell but the install cell in one namespace; a plot cell must show a drawn Figure."""
    namespace: dict = {}
    for index, cell in enumerate(cells):
        if _is_install_cell(cell):
            continue
        name = f"{path.name}[code cell {index}]"
        source = _python_source(cell, name)
        try:
            shown = _run_cell(source, name, namespace)
        except Exception as error:
            raise AssertionError(f"{name} failed: {error!r}\n{source}") from error
        if index in plot_cells:
            assert isinstance(shown, Figure), f"{name}: a plot cell must end with a matplotlib Figure, got {shown!r}"
            assert any(axes.has_data() for axes in shown.axes), f"{name}: the figure has nothing drawn"
