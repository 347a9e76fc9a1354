"""Workdir checks and the exclusive lock: empty and unusable paths, a live holder, a stale lock, metrics
rows past a restored step."""

import json
import logging
import os
import subprocess
import sys

import pytest

from icml26zoo.train.errors import RunError, WorkdirError
from icml26zoo.train.metrics import JsonlWriter, drop_records_after, read_metrics
from icml26zoo.train.workdir import WorkdirLock, check_workdir, claim_workdir, lock_file_name

# Holds the lock of argv[1] in a separate process until stdin closes.
HOLDER = """
import sys
from icml26zoo.train.workdir import claim_workdir
_, lock = claim_workdir(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("path", ["", "   "])
def test_empty_workdir_is_refused(path):
    with pytest.raises(WorkdirError, match="workdir must be a non-empty path"):
        check_workdir(path)


def test_workdir_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkdirError, match="cannot be created"):
        check_workdir(tmp_path / "file" / "run")
    with pytest.raises(WorkdirError, match="is not a directory"):
        check_workdir(tmp_path / "file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_workdir_is_refused(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(WorkdirError, match="not writable"):
            claim_workdir(tmp_path)
    finally:
        tmp_path.chmod(0o700)


def test_workdir_error_is_a_run_error():
    assert issubclass(WorkdirError, RunError) and issubclass(WorkdirError, ValueError)


def test_second_claim_is_refused_naming_the_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(WorkdirError, match=rf"in use by another run \(pid {holder.pid} on host \S+, started"):
            claim_workdir(tmp_path)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    # Once the holder exits cleanly, the workdir is free again and the lock file names no one.
    _, lock = claim_workdir(tmp_path)
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
    lock.release()
    assert (tmp_path / ".lock").read_text() == ""


def test_same_process_second_claim_is_refused(tmp_path):
    with WorkdirLock(tmp_path):
        with pytest.raises(WorkdirError, match=f"pid {os.getpid()}"):
            claim_workdir(tmp_path)


def test_stale_lock_of_a_killed_run_is_taken_over(tmp_path, caplog):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait(timeout=60)
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == holder.pid
    with caplog.at_level(logging.WARNING, logger="icml26zoo.train.workdir"):
        _, lock = claim_workdir(tmp_path)
    lock.release()
    assert f"taking over the stale lock {tmp_path / '.lock'}" in caplog.text
    assert f"pid {holder.pid}" in caplog.text


def test_each_process_of_a_multi_process_run_has_its_own_lock_file(tmp_path):
    assert [lock_file_name(i) for i in range(3)] == [".lock", ".lock.1", ".lock.2"]
    _, first = claim_workdir(tmp_path, 0)
    _, second = claim_workdir(tmp_path, 1)
    first.release()
    second.release()


def test_train_refuses_an_empty_or_locked_workdir_before_building(tmp_path, monkeypatch):
    from icml26zoo.configs import llama_tiny
    from icml26zoo.train import loop

    def must_not_build(*args, **kwargs):
        raise AssertionError("the run was built before the workdir was checked")

    monkeypatch.setattr(loop, "build_run", must_not_build)
    monkeypatch.setattr(loop.data_lib, "prepare", must_not_build)
    config = llama_tiny.get_config()
    with pytest.raises(WorkdirError, match="non-empty"):
        loop.train(config, "")
    with WorkdirLock(tmp_path), pytest.raises(WorkdirError, match="in use by another run"):
        loop.train(config, tmp_path)


def test_drop_records_after_keeps_earlier_rows_byte_for_byte(tmp_path):
    path = tmp_path / "metrics.jsonl"
    writer = JsonlWriter(path)
    for step in (1, 2, 3, 4):
        writer.write(step, {"train/loss": 1.0 / step})
    writer.write(2, {"eval/loss": 0.5})
    writer.close()
    with open(path, "a") as f:
        f.write('{"step": 5, "train/lo')
    before = path.read_text().splitlines()
    assert drop_records_after(path, 2) == 3
    assert path.read_text().splitlines() == [before[0], before[1], before[4]]
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 2]
    assert drop_records_after(path, 2) == 0
    assert drop_records_after(tmp_path / "missing.jsonl", 0) == 0
    with pytest.raises(ValueError, match="step"):
        drop_records_after(path, -1)
