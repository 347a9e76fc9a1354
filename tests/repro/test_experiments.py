"""The experiment contract, over every registered experiment: a new experiment is tested by registering it.

Each experiment at its SMOKE budget: rejects bad input (an unknown name in a name-list option, a run directory of
another experiment) with one line and exit status 2 before writing anything; runs and writes its three outputs
(results.md, results.json, at least one PNG) stamped with its name; resumes through the command line
(`python -m icml26zoo.repro <name> --smoke --resume`) to the same rows. The run is the experiment's notebook
(notebooks/<name>.ipynb, every cell at SMOKE, plots drawn) when it has one, so one smoke run serves both the
notebook and the contract; otherwise the command line's.
"""

from __future__ import annotations

import ast
import json
import pathlib

import pytest
from notebook_runner import RUN_BUDGET, run_notebook
from smoke_checks import SMOKE_CHECKS

from icml26zoo import extras
from icml26zoo.repro import cli, registry

REPO = pathlib.Path(__file__).resolve().parents[2]
REPRO = REPO / "repro"
NAMES = registry.names()
# XLA's cheap pipeline for every run here, the command line's as well as a notebook's (tests/notebook_runner.py turns it
# on for its cells): a SMOKE run compiles far longer than it computes, and the contract compares runs with each other
# (a resume with the run it resumes) and checks ranges, never numbers against separately compiled code.
pytestmark = pytest.mark.usefixtures("fast_compile")


def _registered_in_source() -> dict[str, str]:
    """name -> module for every `register_experiment("name", ...)` call in repro/ (read, not imported)."""
    found = {}
    for path in sorted(REPRO.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_experiment"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                module = ".".join(("icml26zoo", *path.relative_to(REPRO.parent).with_suffix("").parts))
                found[node.args[0].value] = module
    return found


def test_the_index_lists_exactly_the_registered_experiments():
    assert _registered_in_source() == registry.INDEX


def test_list_names_every_experiment_with_its_summary(capsys):
    assert cli.main(["--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == NAMES
    assert all(len(line.split()) > 2 for line in lines)


@pytest.mark.parametrize(("argv", "message"), [
    (["fox_fixx"], r"^error: unknown experiment 'fox_fixx' \(did you mean 'fox_fix'\?\); experiments: .*ssd"),
    (["--quick"], r"^error: the first argument must be an experiment name or --list"),
    (["ssd", "--out", "{file}/sub"], r"^error: --out .* is not writable"),
    (["ssd", "--out", "{file}"], r"^error: --out .* exists and is not a directory"),
    (["ssd", "--out", "{tmp}/missing", "--resume"], r"^error: --out .* does not exist: there is nothing to resume"),
    (["ssd", "--out", "{tmp}/x", "--steps", "0"], r"^error: --steps must be an integer >= 1, got 0"),
    (["ssd", "--out", "{tmp}/x", "--seeds", "a"], r"^error: --seeds must be an integer, got 'a'"),
    (["ssd", "--out", "{tmp}/x", "state_sise=4"], r"^error: ssd has no option 'state_sise' \(did you mean 'state_s"),
    (["ssd", "--out", "{tmp}/x", "state_size=four"], r"^error: option state_size expects int, got 'four'"),
    (["ssd", "--out", "{tmp}/x", "--fast"], r"^error: unknown flag '--fast'"),
])
def test_bad_command_lines_are_one_line_errors(argv, message, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    argv = [a.format(file=tmp_path / "file", tmp=tmp_path) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert pytest.importorskip("re").search(message, err), err
    assert not (tmp_path / "x").exists()


def test_python_api_runs_by_budget_name_and_rejects_unknown_options(tmp_path):
    with pytest.raises(ValueError, match=r"ssd: unknown option\(s\) \['chunks'\]; options: \['state_size'"):
        registry.run("ssd", tmp_path / "a", budget="smoke", chunks=3)
    with pytest.raises(ValueError, match=r"budget must be one of \['smoke', 'quick', 'full'\], got 'tiny'"):
        registry.run("ssd", tmp_path / "a", budget="tiny")
    assert not (tmp_path / "a").exists()


def _name_list_options(spec: registry.ExperimentSpec) -> list[str]:
    """Options whose default is a non-empty tuple of names: each must reject an unknown name up front."""
    return [name for name, p in spec.options().items()
            if isinstance(p.default, tuple) and p.default and all(isinstance(v, str) for v in p.default)]


def _comparable(rows: list[dict], volatile: tuple[str, ...]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in volatile} for row in rows]


def _notebook_run(name: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path | None:
    """Runs notebooks/<name>.ipynb at SMOKE and returns the run directory it wrote (None without a notebook)."""
    notebook = REPO / "notebooks" / f"{name}.ipynb"
    if not notebook.is_file() or RUN_BUDGET != "smoke":
        return None
    scratch = run_notebook(notebook, tmp_path, monkeypatch)
    runs = [marker.parent for marker in scratch.rglob("experiment.json")
            if json.loads(marker.read_text()).get("experiment") == name]
    assert len(runs) == 1, f"notebooks/{name}.ipynb must run experiment {name!r} once, found runs {runs}"
    return runs[0]


@pytest.mark.parametrize("name", NAMES)
def test_experiment_contract(name, tmp_path, capsys, monkeypatch):
    spec = registry.get(name)
    refused = tmp_path / "refused"
    for option in _name_list_options(spec):
        assert cli.main([name, "--smoke", "--out", str(refused), f"{option}=no_such_name"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and option in err, (option, err)
        assert not refused.exists(), f"{name}: a bad {option} wrote {refused} before failing"

    (tmp_path / "notebook").mkdir()
    out = _notebook_run(name, tmp_path / "notebook", monkeypatch)
    if out is None:
        out = tmp_path / "run"
        assert cli.main([name, "--smoke", "--out", str(out)]) == 0, capsys.readouterr().err
    written = {p.name for p in out.iterdir()}
    assert {"results.md", "results.json", "experiment.json"} <= written, written
    assert any(p.endswith(".png") for p in written), written
    record = json.loads((out / "results.json").read_text())
    assert record["experiment"] == name and record["rows"], record
    assert (out / "results.md").read_text().startswith("# ")
    if name in SMOKE_CHECKS:
        SMOKE_CHECKS[name](out, record)

    capsys.readouterr()
    assert cli.main([name, "--smoke", "--out", str(out), "--resume"]) == 0, capsys.readouterr().err
    resumed = json.loads((out / "results.json").read_text())
    assert _comparable(resumed["rows"], spec.volatile) == _comparable(record["rows"], spec.volatile)

    other = next(n for n in NAMES if n != name)
    capsys.readouterr()
    assert cli.main([other, "--smoke", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: run_dir '{out}' holds a run of experiment '{name}', not '{other}'"), err


def test_the_python_api_checks_an_experiments_extras_before_writing(tmp_path, monkeypatch):
    # As if gymnax (the [rl] extra) were not installed: find_spec is what zoo.extras asks.
    real_find_spec = extras.importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec",
                        lambda name, *a: None if name == "gymnax" else real_find_spec(name, *a))
    with pytest.raises(extras.MissingExtraError, match=r"^experiment 'target_update' needs the \[rl\] extra "
                                                      r"\(missing: gymnax\); install it with: pip install "):
        registry.run("target_update", tmp_path / "run", budget="smoke")
    assert not (tmp_path / "run").exists()
