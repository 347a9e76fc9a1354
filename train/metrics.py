"""Metric writers: one small interface with JSONL and TensorBoard backends, written by process 0 only.

JSONL format (``metrics.jsonl``): one JSON object per `write` call, ``{"step": <int>, "<name>": value}``.
Integer metrics stay ints, everything else becomes a float. JSON has no NaN/inf, and the project's
point of logging is to see divergence, so non-finite values are written as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"`` (the file stays strict JSON, e.g. for ``jq``), and `read_metrics`
turns them back into floats. Files are opened for appending, so a resumed run continues the same file;
before it does, the train loop calls `drop_records_after(path, restored_step)`, so the rows a crashed run
logged after its last checkpoint are not repeated. TensorBoard event files cannot be rewritten;
TensorBoard itself discards events past a step that is logged again.

An objective's train diagnostics (e.g. an MoE's routing diagnostics) reach the writer through the train
loop like its other train metrics (`train.step`, `train.loop`).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

import jax
import numpy as np

from icml26zoo.validation import check_int

__all__ = [
    "JsonlWriter",
    "MetricWriter",
    "MultiWriter",
    "NullWriter",
    "TensorBoardWriter",
    "create_writer",
    "drop_records_after",
    "json_safe",
    "read_metrics",
]

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@runtime_checkable
class MetricWriter(Protocol):
    """Anything the train loop can log scalars to."""

    def write(self, step: int, metrics: Mapping[str, float | int]) -> None:
        """Records scalar `metrics` at `step`."""

    def flush(self) -> None:
        """Pushes buffered records to storage."""

    def close(self) -> None:
        """Flushes and releases the backend; the writer is unusable afterwards."""


def _scalar(name: str, value: object) -> float | int:
    """Converts Python/NumPy/JAX scalars (0-d arrays included) to a Python int or float."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):  # np.float64 is a float subclass; return the plain type
        return int(value) if isinstance(value, int) else float(value)
    arr = np.asarray(jax.device_get(value)) if isinstance(value, jax.Array) else np.asarray(value)
    if arr.ndim != 0 or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise ValueError(f"metrics[{name!r}] must be a real scalar, got {type(value).__name__} {arr.shape}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"metrics[{name!r}] must be real, got dtype {arr.dtype}")
    return int(arr) if np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_ else float(arr)


def _normalize(step: object, metrics: Mapping[str, object]) -> tuple[int, dict[str, float | int]]:
    """Validates a `write` call once, so every backend sees the same clean values."""
    step = check_int("step", step, minimum=0)
    if not isinstance(metrics, Mapping):
        raise ValueError(f"metrics must be a mapping of name to scalar, got {type(metrics).__name__}")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name or name == "step":
            raise ValueError(f"metrics keys must be non-empty strings other than 'step', got {name!r}")
        out[name] = _scalar(name, value)
    return step, out


def _ends_without_newline(path: str) -> bool:
    """True when `path` exists, is non-empty and its last byte is not a newline."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return False
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def _json_value(value: float | int) -> float | int | str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def json_safe(value: object) -> object:
    """`value` (nested dicts, lists and tuples of plain values) with each non-finite float as the string
    metrics.jsonl uses (``"NaN"``, ``"Infinity"``, ``"-Infinity"``), so `json.dumps(..., allow_nan=False)` writes
    strict JSON; e.g. a run's summary.json."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return _json_value(value) if isinstance(value, float) else value


def _lines(path: str | os.PathLike) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of each line of `path`; text None for a line that is not UTF-8 (a corrupted or
    foreign line), which the readers skip rather than end a resume on."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError:
                yield lineno, None


class JsonlWriter:
    """Appends one JSON object per `write` to `path`, flushing each line (a crash loses nothing)."""

    def __init__(self, path: str | os.PathLike):
        if not isinstance(path, str | os.PathLike) or not os.fspath(path):
            raise ValueError(f"path must be a non-empty path, got {path!r}")
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        needs_newline = _ends_without_newline(self.path)
        # Kept open for the run (closed in close()); appending is what lets a resumed run continue it.
        self._file = open(self.path, "a", encoding="utf-8")
        if needs_newline:
            # A run killed mid-write leaves a torn last line; isolate it so the next record parses.
            self._file.write("\n")

    def write(self, step: int, metrics: Mapping[str, float | int]) -> None:
        step, values = _normalize(step, metrics)
        record = {"step": step, **{k: _json_value(v) for k, v in values.items()}}
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class TensorBoardWriter:
    """Writes each metric as a TensorBoard scalar (tag = metric name) via tensorboardX."""

    def __init__(self, logdir: str | os.PathLike):
        if not isinstance(logdir, str | os.PathLike) or not os.fspath(logdir):
            raise ValueError(f"logdir must be a non-empty path, got {logdir!r}")
        # Imported here so that JSONL-only users never pay for tensorboardX's protobuf import.
        from tensorboardX import SummaryWriter

        self.logdir = os.fspath(logdir)
        self._writer = SummaryWriter(logdir=self.logdir)

    def write(self, step: int, metrics: Mapping[str, float | int]) -> None:
        step, values = _normalize(step, metrics)
        for name, value in values.items():
            self._writer.add_scalar(name, float(value), global_step=step)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class MultiWriter:
    """Fans every call out to several writers, in order."""

    def __init__(self, writers: Sequence[MetricWriter]):
        writers = list(writers)
        for i, w in enumerate(writers):
            if not isinstance(w, MetricWriter):
                raise ValueError(f"writers[{i}] is {type(w).__name__}, which lacks write/flush/close")
        self.writers = writers

    def write(self, step: int, metrics: Mapping[str, float | int]) -> None:
        for w in self.writers:
            w.write(step, metrics)

    def flush(self) -> None:
        for w in self.writers:
            w.flush()

    def close(self) -> None:
        for w in self.writers:
            w.close()


class NullWriter:
    """Discards everything; what processes other than 0 get. Still validates, so bugs show everywhere."""

    def write(self, step: int, metrics: Mapping[str, float | int]) -> None:
        _normalize(step, metrics)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def create_writer(workdir: str | os.PathLike, *, tensorboard: bool,
                  process_index: int | None = None) -> MetricWriter:
    """The run's writer: ``workdir/metrics.jsonl`` (+ ``workdir/tensorboard/``) on process 0, else Null.

    Args:
      workdir: the run directory (created if missing).
      tensorboard: also write TensorBoard event files.
      process_index: this process's index; defaults to `jax.process_index()`.
    """
    if not isinstance(workdir, str | os.PathLike) or not os.fspath(workdir):
        raise ValueError(f"workdir must be a non-empty path, got {workdir!r}")
    if process_index is None:
        process_index = jax.process_index()
    check_int("process_index", process_index, minimum=0)
    if process_index != 0:
        return NullWriter()
    workdir = os.fspath(workdir)
    writers: list[MetricWriter] = [JsonlWriter(os.path.join(workdir, "metrics.jsonl"))]
    if tensorboard:
        writers.append(TensorBoardWriter(os.path.join(workdir, "tensorboard")))
    return MultiWriter(writers)


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """Reads a metrics.jsonl file back, in file order, with ``"NaN"``/``"Infinity"`` strings as floats.

    A line that does not parse (the torn last line of a killed run) or is not UTF-8 is skipped with a warning.
    """
    records = []
    for lineno, line in _lines(path):
        if line is None:
            warnings.warn(f"{os.fspath(path)}:{lineno}: skipping a line that is not UTF-8", stacklevel=2)
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            warnings.warn(f"{os.fspath(path)}:{lineno}: skipping unparsable line ({err})", stacklevel=2)
            continue
        if not isinstance(record, dict) or "step" not in record:
            warnings.warn(f"{os.fspath(path)}:{lineno}: skipping a record without 'step'", stacklevel=2)
            continue
        records.append({k: _NON_FINITE.get(v, v) if isinstance(v, str) else v
                        for k, v in record.items()})
    return records


def drop_records_after(path: str | os.PathLike, step: int) -> int:
    """Removes the records with ``"step" > step`` from a metrics.jsonl file; returns how many were removed.

    Kept lines are copied byte for byte; unparsable lines (a torn last line) are dropped too. The file is
    replaced atomically (a crash leaves either the old or the new file). A missing file is left missing.
    """
    step = check_int("step", step, minimum=0)
    path = os.fspath(path)
    if not os.path.exists(path):
        return 0
    kept, removed = [], 0
    for _, line in _lines(path):
        if line is not None and not line.strip():
            continue
        try:
            record = json.loads(line) if line is not None else None
        except json.JSONDecodeError:
            record = None
        if record is None:  # Not UTF-8 or not JSON (a torn last line): dropped.
            removed += 1
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] > step:
            removed += 1
            continue
        kept.append(line if line.endswith("\n") else line + "\n")
    if removed:
        temporary = f"{path}.tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.replace(temporary, path)
    return removed
