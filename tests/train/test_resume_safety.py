"""A start never rewrites a workdir's history (`train.resume`): a resume that changes the model or the learning
rate is refused before anything is built, naming the field old → new (the flag lets the learning rate through and
records it), num_steps may grow and is recorded, config.json keeps the first config, checkpoint_every=0 on a run is
refused, a finished run started again is a no-op, and a start prunes checkpoints to keep_checkpoints.

One tiny run (a 16-wide, 1-layer llama on 8-token MQAR rows) is trained once per module, stopped at step 2
(`partial`) and then finished at step 4 (`finished`); each test works on its own copy.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import jax
import jax.numpy as jnp
import pytest

from icml26zoo.configs import load_preset
from icml26zoo.train import loop
from icml26zoo.train.__main__ import main
from icml26zoo.train.checkpoint import Checkpointer, saved_steps
from icml26zoo.train.config import apply_overrides
from icml26zoo.train.errors import ConfigChangeError, WorkdirError
from icml26zoo.train.resume import SAFE_ON_RESUME, config_changes, read_history

# XLA's cheap pipeline: nothing here compares numbers with separately compiled code.
pytestmark = pytest.mark.usefixtures("fast_compile")


def overrides(data_dir: pathlib.Path) -> list[str]:
    """llama_tiny shrunk to a 16-wide, 1-layer model on a 64-example MQAR: 4 steps, checkpoints at 2 and 4."""
    return [
        "model.d_model=16", "model.num_layers=1", "model.num_heads=2", "model.num_kv_heads=1", "model.vocab_size=64",
        "data.name=mqar", f"data.data_dir={data_dir}", "data.mqar_num_keys=16", "data.mqar_num_values=16",
        "data.mqar_num_pairs=2", "data.mqar_train_examples=64", "data.mqar_eval_examples=16", "seq_len=8",
        "batch_size=8", "num_steps=4", "log_every=1", "eval_batches=1", "checkpoint_every=2", "keep_checkpoints=2",
        "tensorboard=false", "progress_bar=false", "sample_length=0",
    ]


def tiny(root: pathlib.Path, *changes: str):
    return apply_overrides(load_preset("llama_tiny"), [*overrides(root / "data"), *changes])


def run(config, workdir: pathlib.Path, **kwargs):
    return loop.train(config, workdir, devices=jax.devices()[:1], **kwargs)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("resume_safety")


@pytest.fixture(scope="module")
def partial(root) -> pathlib.Path:
    """A run stopped after step 2 (its checkpoint and metrics rows 1-2, no summary)."""
    run(tiny(root), root / "partial", stop_after=2)
    return root / "partial"


@pytest.fixture(scope="module")
def finished(root, partial) -> pathlib.Path:
    """`partial` resumed with the same config to the end: checkpoints 2 and 4, a final eval row, summary.json."""
    shutil.copytree(partial, root / "finished")
    run(tiny(root), root / "finished")
    return root / "finished"


def copy(source: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(shutil.copytree(source, tmp_path / "run"))


def listing(workdir: pathlib.Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file; the lock file is left out, since every start takes the lock and rewrites it."""
    return {str(p.relative_to(workdir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(workdir.rglob("*")) if p.is_file() and p.name != ".lock"}


def metric_steps(workdir: pathlib.Path) -> list[int]:
    return [json.loads(line)["step"] for line in (workdir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def nothing_built(monkeypatch):
    """A refused start must stop before the data or the model is built: either now fails the test."""

    def built(*args, **kwargs):
        raise AssertionError("a refused start built data or a model")

    monkeypatch.setattr(loop.data_lib, "prepare", built)
    monkeypatch.setattr(loop, "build_run", built)


def test_a_different_model_is_refused_naming_the_field_and_nothing_changes(root, partial, tmp_path, nothing_built):
    workdir = copy(partial, tmp_path)
    before = listing(workdir)
    with pytest.raises(ConfigChangeError, match=r'model\.mixer "attention" → "fox"; resuming would continue') as info:
        run(tiny(root, "model.mixer=fox"), workdir)
    assert "--allow-config-change" in str(info.value)
    assert listing(workdir) == before


def test_a_learning_rate_change_needs_the_flag_and_is_recorded(root, partial, tmp_path, nothing_built,
                                                                monkeypatch):
    workdir = copy(partial, tmp_path)
    before, original = listing(workdir), (workdir / "config.json").read_bytes()
    changed = tiny(root, "optim.learning_rate=1e-2")
    with pytest.raises(ConfigChangeError, match=r"optim\.learning_rate 0\.003 → 0\.01;"):
        run(changed, workdir)
    assert listing(workdir) == before
    monkeypatch.undo()  # this start trains
    run(changed, workdir, stop_after=3, allow_config_change=True)
    assert (workdir / "config.json").read_bytes() == original
    first, last = read_history(workdir)
    assert (first["step"], first["changed"], first["allowed_by_flag"]) == (0, {}, [])
    assert (last["step"], last["changed"]) == (2, {"optim.learning_rate": [0.003, 0.01]})
    assert last["allowed_by_flag"] == ["optim.learning_rate"]
    assert metric_steps(workdir) == [1, 2, 3]


def test_a_longer_run_is_allowed_and_recorded(root, finished, tmp_path):
    workdir = copy(finished, tmp_path)
    original, rows = (workdir / "config.json").read_bytes(), metric_steps(workdir)
    run(tiny(root, "num_steps=6"), workdir, stop_after=5)
    assert (workdir / "config.json").read_bytes() == original
    last = read_history(workdir)[-1]
    assert (last["step"], last["changed"], last["allowed_by_flag"]) == (4, {"num_steps": [4, 6]}, [])
    # Every row of the finished run (the final eval row at step 4 included) stays; step 5 is appended.
    assert metric_steps(workdir) == [*rows, 5]


@pytest.mark.parametrize(("source", "override", "message"), [
    ("partial", "checkpoint_every=0", r"already holds a run .* checkpoint_every=0 .* choose a new --workdir"),
    ("finished", "num_steps=2", r"trained to step 4, past this config.s last step 2 \(num_steps=2\)"),
], ids=["checkpointing-off-on-a-run", "shorter-than-its-checkpoints"])
def test_a_start_that_would_rewrite_history_is_refused(root, request, tmp_path, nothing_built, source, override,
                                                        message):
    workdir = copy(request.getfixturevalue(source), tmp_path)
    before = listing(workdir)
    with pytest.raises(WorkdirError, match=message):
        run(tiny(root, override), workdir)
    assert listing(workdir) == before


def test_a_finished_run_started_again_is_a_no_op(root, finished, tmp_path, nothing_built):
    workdir = copy(finished, tmp_path)
    before = listing(workdir)
    summary = run(tiny(root), workdir)
    assert "already finished at step 4" in summary["already_finished"] and "state" not in summary
    assert summary["eval/loss"] == json.loads((workdir / "summary.json").read_text())["eval/loss"]
    assert listing(workdir) == before


def test_a_start_prunes_checkpoints_to_keep_checkpoints(root, finished, tmp_path, nothing_built):
    workdir = copy(finished, tmp_path)
    history = read_history(workdir)
    # keep_checkpoints may change on resume; the no-op start of the finished run still applies it.
    run(tiny(root, "keep_checkpoints=1"), workdir)
    assert saved_steps(workdir / "checkpoints") == [4]
    assert read_history(workdir) == history


def test_prune_keeps_the_newest_and_the_restored_step(tmp_path):
    state = {"w": jnp.zeros((2,), jnp.float32)}
    with Checkpointer(tmp_path, keep=5, async_save=False) as checkpointer:
        for step in (1, 2, 3):
            checkpointer.save(step, state)
        # A run that fell back to step 1 past corrupt steps 2 and 3 keeps it.
        assert checkpointer.prune(1, protect=1) == [2]
        assert checkpointer.prune(1) == [1]
        assert checkpointer.all_steps() == [3]


def test_the_cli_refuses_in_one_line_and_says_a_finished_run_is_done(root, finished, tmp_path, capsys, caplog,
                                                                     nothing_built):
    workdir = copy(finished, tmp_path)
    command = ["--config", "llama_tiny", "--workdir", str(workdir), *overrides(root / "data")]
    assert main([*command, "model.num_layers=2", "seed=3"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()]
    assert err.startswith(f"error: workdir {str(workdir)!r} holds a run trained with another config (config.json): "
                          "model.num_layers 1 → 2, seed 0 → 3; ")
    before = listing(workdir)
    assert main(command) == 0
    assert capsys.readouterr().out == ""
    assert any("already finished at step 4" in message for message in caplog.messages)
    assert listing(workdir) == before


def test_safe_fields_are_config_fields_and_changes_are_dotted_paths(root):
    names = {field for field in tiny(root).to_dict()}
    assert SAFE_ON_RESUME <= names
    assert config_changes(tiny(root), tiny(root, "num_steps=8", "optim.b1=0.8")) == {
        "num_steps": (4, 8), "optim.b1": (0.9, 0.8)}
