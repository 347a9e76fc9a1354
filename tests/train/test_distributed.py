"""A 2-process jax.distributed run on localhost CPU (2 devices each) completes a few steps."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from icml26zoo.train import data as data_lib
from icml26zoo.train.config import DataConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_process_run_completes(tmp_path):
    data_dir = tmp_path / "tfds"
    overrides = [
        "data.name=mqar", f"data.data_dir={data_dir}", "data.mqar_num_keys=16", "data.mqar_num_values=16",
        "data.mqar_num_pairs=4", "data.mqar_train_examples=512", "data.mqar_eval_examples=32",
        "model.vocab_size=64", "seq_len=32", "batch_size=8", "num_steps=4", "log_every=1", "eval_batches=1",
        "checkpoint_every=2", "mesh_fsdp=2", "tensorboard=false", "progress_bar=false", "sample_length=0",
    ]
    data_lib.prepare(DataConfig(name="mqar", data_dir=str(data_dir), mqar_num_keys=16, mqar_num_values=16,
                                mqar_num_pairs=4, mqar_train_examples=512, mqar_eval_examples=32))
    port = free_port()
    # XLA's cheap pipeline: the processes compile a tiny step; nothing is compared with other compiled code.
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "2", "PYTHONPATH": str(ROOT),
           "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}
    workdir = tmp_path / "run"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "train", "--config", "configs/llama_tiny.py", "--workdir", str(workdir),
             "--coordinator", f"localhost:{port}", "--num-processes", "2", "--process-id", str(rank), *overrides],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for rank in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        # A hung collective must not leave processes behind that hold the CPU for the rest of the suite.
        for proc in procs:
            proc.kill()
    for rank, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"process {rank} failed:\n{out[-3000:]}"
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "train/loss" in r]
    assert steps == [1, 2, 3, 4]
    assert any("eval/loss" in r for r in records)
    assert "eval/loss" in outputs[0]
