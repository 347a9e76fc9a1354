"""Fault injection on real training processes (the CLI, 1 layer, d_model 32, MQAR):

* a run killed with SIGKILL while an asynchronous checkpoint save is in flight resumes to the same final
  state, bit for bit, as a run that was never interrupted, and takes over the dead run's workdir lock;
* a second run on a workdir that a live run holds is refused at once with a WorkdirError;
* a flipped byte in the newest checkpoint's array data makes restore fall back to the previous step with
  one warning naming the step (test_checkpoint.py pins the checksum path on bytes zstd stores verbatim).
"""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from icml26zoo.configs import load_preset
from icml26zoo.train.checkpoint import Checkpointer
from icml26zoo.train.config import apply_overrides
from icml26zoo.train.errors import WorkdirError
from icml26zoo.train.loop import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "llama_tiny.py"
NUM_STEPS = 12
# Saving every step keeps an asynchronous save in flight almost all the time, so the kill lands in one.
RUN = ("model.num_layers=1", "model.d_model=32", "model.vocab_size=64", "model.max_seq_len=32", "seq_len=32",
       "batch_size=8", f"num_steps={NUM_STEPS}", "log_every=1", "checkpoint_every=1", "keep_checkpoints=2",
       "eval_batches=1", "sample_length=0", "tensorboard=false", "progress_bar=false", "data.name=mqar",
       "data.mqar_num_keys=16", "data.mqar_num_values=16", "data.mqar_num_pairs=4",
       "data.mqar_train_examples=500", "data.mqar_eval_examples=16")
TIMEOUT_S = 300
ELEMENTAL_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def cli(workdir: pathlib.Path, data_dir: pathlib.Path) -> list[str]:
    return [sys.executable, "-m", "icml26zoo.train", "--config", str(PRESET), "--workdir", str(workdir),
            *RUN, f"data.data_dir={data_dir}"]


def run_env() -> dict[str, str]:
    # XLA's cheap pipeline: each run's tiny step spends most of its time compiling; the runs are compared
    # with each other only (all three compile under the same setting).
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", JAX_DISABLE_MOST_OPTIMIZATIONS="1")
    # The test session simulates 8 CPU devices; the runs under test use one, like a plain CLI run. Of the session's
    # XLA_FLAGS only XLA:CPU's elemental emitters (tests/conftest.py) are kept: 2-3x cheaper compiles, the same in
    # all three runs.
    env.pop("XLA_FLAGS", None)
    if ELEMENTAL_EMITTERS in os.environ.get("XLA_FLAGS", ""):
        env["XLA_FLAGS"] = ELEMENTAL_EMITTERS
    return env


def run_to_end(workdir: pathlib.Path, data_dir: pathlib.Path) -> subprocess.CompletedProcess:
    done = subprocess.run(cli(workdir, data_dir), env=run_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def saves_in_flight(checkpoints: pathlib.Path) -> list[str]:
    """Temporary step directories: saves that Orbax has started and not yet committed."""
    return glob.glob(str(checkpoints / "*.orbax-checkpoint-tmp*"))


def kill_during_a_save(workdir: pathlib.Path, data_dir: pathlib.Path, config) -> list[str]:
    """Starts a run, checks that a second run on its workdir is refused, SIGKILLs it mid-save."""
    process = subprocess.Popen(cli(workdir, data_dir), env=run_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    checkpoints = workdir / "checkpoints"
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not (workdir / ".lock").exists() or not (workdir / ".lock").read_text():
            assert process.poll() is None and time.monotonic() < deadline, "the run never took its lock"
            time.sleep(0.01)
        with pytest.raises(WorkdirError, match=rf"in use by another run \(pid {process.pid} on host"):
            train(config, workdir)
        in_flight: list[str] = []
        while not in_flight:
            assert process.poll() is None, f"the run ended before a save after step 3: {process.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "no asynchronous save seen in flight"
            committed = [p for p in os.listdir(checkpoints) if p.isdigit()] if checkpoints.is_dir() else []
            in_flight = saves_in_flight(checkpoints) if len(committed) >= 2 else []
            if not committed:  # the run is still starting (imports, compiles): poll it without spinning a core
                time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    return in_flight


def restore(workdir: pathlib.Path, abstract=None):
    """(step, state) of the newest good checkpoint; the structure comes from the saved metadata."""
    checkpointer = Checkpointer(workdir / "checkpoints")
    try:
        if abstract is None:
            abstract = checkpointer.saved_structure()
        step, state, _ = checkpointer.restore_latest(abstract)
    finally:
        checkpointer.close()
    return step, state


def flip_a_byte_in_the_largest_array_file(step_dir: pathlib.Path) -> None:
    files = glob.glob(str(step_dir / "state" / "**" / "d" / "*"), recursive=True)
    target = pathlib.Path(max(files, key=os.path.getsize))
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x40
    target.write_bytes(bytes(data))


def test_sigkill_mid_save_resumes_bit_identically_and_a_flipped_byte_falls_back(tmp_path):
    data_dir = tmp_path / "tfds"
    config = apply_overrides(load_preset(PRESET), [*RUN, f"data.data_dir={data_dir}"])
    straight = tmp_path / "straight"
    run_to_end(straight, data_dir)

    interrupted = tmp_path / "interrupted"
    in_flight = kill_during_a_save(interrupted, data_dir, config)
    assert in_flight, "the kill did not land during a save"
    resumed = run_to_end(interrupted, data_dir)
    assert "taking over the stale lock" in resumed.stderr

    step, expected = restore(straight)
    resumed_step, actual = restore(interrupted, expected)
    assert step == resumed_step == NUM_STEPS
    leaves = jax.tree_util.tree_leaves_with_path(expected)
    for (path, a), b in zip(leaves, jax.tree.leaves(actual), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path))
    assert Checkpointer(interrupted / "checkpoints").all_steps() == [NUM_STEPS - 1, NUM_STEPS]

    damaged = tmp_path / "damaged"
    shutil.copytree(straight / "checkpoints", damaged / "checkpoints")
    flip_a_byte_in_the_largest_array_file(damaged / "checkpoints" / str(NUM_STEPS))
    # A checksum mismatch when the byte decodes to a different array, a decode error when it hits zstd's
    # entropy-coded data: either way one warning and the previous step.
    with pytest.warns(RuntimeWarning, match=rf"checkpoint step {NUM_STEPS} in .* is unreadable, skipping it"):
        fallback_step, _ = restore(damaged, expected)
    assert fallback_step == NUM_STEPS - 1
