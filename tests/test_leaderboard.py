"""scripts/leaderboard.py: rows come from the mixer registry, widths match the parameter budget, and a micro run
of two mixers on one task writes the table and the plot (the --quick leaderboard itself is run by hand)."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import jax
import pytest

from icml26zoo.registry import MIXERS
from icml26zoo.repro.cli import run_main
from icml26zoo.repro.common import Budget, parameter_count

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "leaderboard.py"


@pytest.fixture(scope="module")
def leaderboard():
    spec = importlib.util.spec_from_file_location("leaderboard_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cheap_xla_pipeline():
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)


def test_every_registered_mixer_is_a_row_by_default(leaderboard, monkeypatch):
    seen = {}

    def check_mixers(field, names):
        seen["names"] = list(names)
        raise ValueError("stop")

    monkeypatch.setattr(leaderboard, "check_mixers", check_mixers)
    with pytest.raises(ValueError, match="stop"):
        leaderboard.run("unused", budget=Budget(steps=1, batch_size=1, seq_len=8))
    assert seen["names"] == MIXERS.names()


def test_matched_width_is_the_closest_parameter_count(leaderboard):
    target = parameter_count(leaderboard.model_config("attention", 48, 32))
    assert leaderboard.matched_width("attention", target, 32, 32) == (48, target)
    # Widths 32, 48, 64 are tried: a budget nearer 64's count than 48's picks 64.
    above = parameter_count(leaderboard.model_config("attention", 64, 32))
    assert leaderboard.matched_width("attention", (target + 3 * above) // 4, 32, 32) == (64, above)


def test_bad_names_exit_with_one_line_errors(leaderboard, tmp_path, capsys):
    assert run_main(leaderboard.main, ["--mixers", "attention,nope", "--out", str(tmp_path)]) == 2
    assert "mixers: unknown name 'nope'" in capsys.readouterr().err
    assert run_main(leaderboard.main, ["--tasks", "imagenet", "--out", str(tmp_path)]) == 2
    assert "tasks: unknown name 'imagenet'" in capsys.readouterr().err


def test_micro_run_writes_the_table_and_plot(leaderboard, tmp_path, cheap_xla_pipeline):
    out = tmp_path / "board"
    argv = ["--mixers", "attention,deltanet", "--tasks", "mqar", "--steps", "2", "--batch-size", "8",
            "--seq-len", "32", "--width", "32", "--out", str(out)]
    assert run_main(leaderboard.main, argv) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert sorted(row["mixer"] for row in rows) == ["attention", "deltanet"]
    for row in rows:
        assert 0 <= row["MQAR accuracy"] <= 1 and row["tokens/s"] > 0 and row["peak MiB"] > 0
    assert "| mixer | d_model | params | MQAR accuracy | tokens/s | peak MiB |" in (out / "results.md").read_text()
    assert (out / "leaderboard.png").stat().st_size > 0
