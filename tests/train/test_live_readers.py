"""Readers never disturb the writer: `load_run` in a loop against a live CLI run (1 layer, d_model 32, MQAR,
a checkpoint every step so a save is almost always in flight) leaves the run to finish with exit code 0;
every load returns a committed step or says, in one line, that there is none yet; every checkpoint left
restores with its checksums verified."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

import jax
import pytest

from icml26zoo.train import load_run
from icml26zoo.train.checkpoint import Checkpointer, steps_in_flight
from icml26zoo.train.errors import CheckpointError

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "llama_tiny.py"
NUM_STEPS = 30
KEEP = 3
RUN = ("model.num_layers=1", "model.d_model=32", "model.vocab_size=64", "model.max_seq_len=32", "seq_len=32",
       "batch_size=8", f"num_steps={NUM_STEPS}", "log_every=10", "checkpoint_every=1", f"keep_checkpoints={KEEP}",
       "eval_batches=1", "sample_length=0", "tensorboard=false", "progress_bar=false", "data.name=mqar",
       "data.mqar_num_keys=16", "data.mqar_num_values=16", "data.mqar_num_pairs=4",
       "data.mqar_train_examples=500", "data.mqar_eval_examples=16")
TIMEOUT_S = 300
ELEMENTAL_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
# What a reader may say before the run's first save is committed (or before it has written config.json).
NOT_YET = r"no committed checkpoint yet|no config\.json yet"

# XLA's cheap pipeline for the loads: each load_run builds the run's init program again.
pytestmark = pytest.mark.usefixtures("fast_compile")


def start_training(workdir: pathlib.Path, data_dir: pathlib.Path) -> subprocess.Popen:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", JAX_DISABLE_MOST_OPTIMIZATIONS="1")
    env.pop("XLA_FLAGS", None)  # one CPU device, like a plain CLI run (the test session simulates 8)
    if ELEMENTAL_EMITTERS in os.environ.get("XLA_FLAGS", ""):  # but XLA:CPU's cheaper emitters (tests/conftest.py)
        env["XLA_FLAGS"] = ELEMENTAL_EMITTERS
    command = [sys.executable, "-m", "icml26zoo.train", "--config", str(PRESET), "--workdir", str(workdir), *RUN,
               f"data.data_dir={data_dir}"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def read_while_training(workdir: pathlib.Path, process: subprocess.Popen) -> tuple[list[int], list[str]]:
    """Calls load_run until the run exits: (steps loaded, 'not yet' messages). Any other error fails the test."""
    loaded, not_yet = [], []
    deadline = time.monotonic() + TIMEOUT_S
    lock = workdir / ".lock"
    while not lock.exists() or not lock.read_text():  # reading starts once the run holds its workdir
        assert process.poll() is None and time.monotonic() < deadline, "the run never took its lock"
        time.sleep(0.01)
    while process.poll() is None:
        assert time.monotonic() < deadline, "the run did not finish"
        try:
            _, _, state = load_run(workdir, devices=jax.devices()[:1])
        except CheckpointError as error:
            assert "\n" not in str(error)
            assert re.search(NOT_YET, str(error)), str(error)
            not_yet.append(str(error))
            time.sleep(0.05)
            continue
        loaded.append(int(state.step))
        time.sleep(0.5)  # a few loads are enough; back to back they would take the run's CPU on a small machine
    return loaded, not_yet


def test_load_run_in_a_loop_never_disturbs_a_live_run(tmp_path):
    workdir = tmp_path / "run"
    process = start_training(workdir, tmp_path / "tfds")
    try:
        loaded, not_yet = read_while_training(workdir, process)
        _, stderr = process.communicate(timeout=TIMEOUT_S)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    # The reader saw the run from the outside: at least one committed step while it trained.
    assert loaded and all(1 <= step <= NUM_STEPS for step in loaded), (loaded, not_yet)
    assert loaded == sorted(loaded)
    checkpoints = workdir / "checkpoints"
    assert steps_in_flight(checkpoints) == []
    with Checkpointer(checkpoints, read_only=True) as checkpointer:
        steps = checkpointer.all_steps()
        assert steps == list(range(NUM_STEPS - KEEP + 1, NUM_STEPS + 1))
        abstract = checkpointer.saved_structure()
        for step in steps:
            state, data_state = checkpointer.restore(step, abstract)  # raises unless every checksum matches
            assert int(state["step"]) == step and data_state is not None
