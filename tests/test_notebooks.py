"""Every notebook's code cells run top to bottom against the installed package."""

import json
import pathlib

import pytest

NOTEBOOKS = sorted(pathlib.Path(__file__).resolve().parents[1].joinpath("notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.chdir(path.parent)
    cells = json.loads(path.read_text())["cells"]
    namespace: dict = {}
    for index, cell in enumerate(c for c in cells if c["cell_type"] == "code"):
        source = "".join(cell["source"])
        try:
            exec(compile(source, f"{path.name}[cell {index}]", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"{path.name}, code cell {index} failed: {error!r}\n{source}") from error


def test_there_is_a_notebook():
    assert NOTEBOOKS
