"""`load_run` reopens a CLI run: config.json read back exactly, parameters bit-identical to the run's final
state, a model whose logits match, a named step, one-line errors for workdirs without a run, and a workdir
that a run holds read without a change (test_live_readers.py reads a live run)."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.train import load_run, loop
from icml26zoo.train.__main__ import main
from icml26zoo.train.checkpoint import Checkpointer
from icml26zoo.train.config import apply_overrides
from icml26zoo.train.errors import CheckpointError
from icml26zoo.train.workdir import WorkdirLock

# XLA's cheap pipeline: the restored model is compared with the run's own state and logits, both computed here.
pytestmark = pytest.mark.usefixtures("fast_compile")


def tiny_overrides(data_dir) -> list[str]:
    """A 1-layer llama_tiny on a small MQAR for 4 steps with checkpoints at steps 2 and 4."""
    return [
        "model.num_layers=1", "data.name=mqar", f"data.data_dir={data_dir}", "data.mqar_num_keys=16",
        "data.mqar_num_values=16", "data.mqar_num_pairs=4", "data.mqar_train_examples=256",
        "data.mqar_eval_examples=16", "model.vocab_size=64", "seq_len=32", "batch_size=8", "num_steps=4",
        "log_every=2", "eval_batches=1", "checkpoint_every=2", "tensorboard=false", "progress_bar=false",
        "sample_length=0",
    ]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """(workdir, the final TrainState that train() returned) of one in-process CLI run."""
    root = tmp_path_factory.mktemp("load_run")
    summaries = []
    train = loop.train

    def recording_train(*args, **kwargs):
        summaries.append(train(*args, **kwargs))
        return summaries[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "train", recording_train)
        assert main(["--config", "llama_tiny", "--workdir", str(root / "run"), *tiny_overrides(root / "data")]) == 0
    return root / "run", summaries[0]["state"]


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(jax.device_get(tree))]


def test_load_run_restores_the_final_state_bit_for_bit(finished_run):
    workdir, final = finished_run
    config, model, state = load_run(workdir)
    assert config == apply_overrides(load_preset("llama_tiny"), tiny_overrides(workdir.parent / "data"))
    assert int(state.step) == 4
    for name in ("params", "opt_state", "rng"):
        restored, expected = leaves(getattr(state, name)), leaves(getattr(final, name))
        assert len(restored) == len(expected) > 0
        for got, want in zip(restored, expected, strict=True):
            np.testing.assert_array_equal(got, want)
    tokens = jax.random.randint(jax.random.key(1), (2, 32), 0, config.model.vocab_size, jnp.int32)
    reference = nnx.merge(nnx.graphdef(model), jax.device_get(final.params))
    np.testing.assert_array_equal(np.asarray(model(tokens)), np.asarray(reference(tokens)))


def test_load_run_at_a_named_step_onto_one_device(finished_run):
    workdir, final = finished_run
    _, model, state = load_run(workdir, step=2, devices=jax.devices()[:1])
    assert int(state.step) == 2
    assert model(jnp.zeros((1, 8), jnp.int32)).shape == (1, 8, 64)
    changed = [not np.array_equal(a, b) for a, b in zip(leaves(state.params), leaves(final.params), strict=True)]
    assert any(changed)
    with pytest.raises(CheckpointError, match=r"no checkpoint at step 3; it has steps \[2, 4\]"):
        load_run(workdir, step=3)


def test_load_run_names_what_the_workdir_lacks(finished_run, tmp_path):
    with pytest.raises(CheckpointError, match=r"workdir '.*missing' does not exist"):
        load_run(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="has no config.json"):
        load_run(tmp_path)
    (tmp_path / "config.json").write_text((finished_run[0] / "config.json").read_text())
    with pytest.raises(CheckpointError, match="has no checkpoints/ folder"):
        load_run(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(CheckpointError, match="has no checkpoint in"):
        load_run(tmp_path)
    with WorkdirLock(tmp_path), pytest.raises(CheckpointError, match=rf"no committed checkpoint yet \(the run "
                                                                  rf"training there, pid {os.getpid()} on host"):
        load_run(tmp_path)


def listing(root: pathlib.Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its (size, mtime in ns): any change a reader makes shows."""
    return {str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns) for path in root.rglob("*")}


def test_load_run_reads_a_held_workdir_without_changing_it(finished_run, tmp_path, caplog):
    workdir = tmp_path / "run"
    shutil.copytree(finished_run[0], workdir)
    # Step 6's save in flight: Orbax writes a step into `<step>.orbax-checkpoint-tmp*` and renames it on commit.
    in_flight = workdir / "checkpoints" / "6.orbax-checkpoint-tmp"
    shutil.copytree(workdir / "checkpoints" / "4", in_flight)
    with WorkdirLock(workdir):  # this process stands in for the run that holds the workdir
        holder = json.loads((workdir / ".lock").read_text())
        before = listing(workdir)
        with caplog.at_level(logging.WARNING, logger="icml26zoo.train.runs"):
            _, _, state = load_run(workdir, devices=jax.devices()[:1])
        assert listing(workdir) == before
    del before[".lock"]  # emptied when the lock is released
    assert int(state.step) == 4
    assert [r.getMessage() for r in caplog.records] == [
        f"workdir {workdir}: loaded step 4, the newest committed one; step 6 is still being written by the run "
        f"training there (pid {os.getpid()} on host {holder['host']}, started {holder['started']})"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="icml26zoo.train.runs"):
        load_run(workdir, devices=jax.devices()[:1])
    assert [r.getMessage() for r in caplog.records] == [
        f"workdir {workdir}: loaded step 4; the save of step 6 was cut short (no run holds the workdir; its next "
        "start removes the leftover)"]
    assert in_flight.is_dir()
    with Checkpointer(workdir / "checkpoints", read_only=True) as checkpointer:
        for action in (lambda: checkpointer.prune(1), lambda: checkpointer.save(5, {"x": np.zeros(2)})):
            with pytest.raises(CheckpointError, match="opened read-only"):
                action()
    after = listing(workdir)
    assert after.pop(".lock")[0] == 0
    assert after == before
