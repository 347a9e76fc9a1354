"""What a start may do to a workdir that already holds a run: its history is append-only.

A run's workdir keeps the config it was started with (``config.json``, written once and never overwritten)
and one line per start in ``config_history.jsonl``: the step it started from, the time, and every field that
differs from config.json as ``{"field": [old, new]}``. Before anything is built or restored, `check_start`
compares a start's config with config.json:

* a field in `SAFE_ON_RESUME` (how long to train, how often to log, evaluate and checkpoint, how many
  checkpoints to keep, the sample, TensorBoard, the progress bar, the spike monitor, the mesh and how to
  launch) may change: it changes neither the parameter and optimizer-state tree nor what the run trains;
* any other field (model, data, objective and its options, optimizer and its options, schedule, batch_size,
  seq_len, seed, init_from, LoRA) raises `ConfigChangeError` naming each field as old → new, unless the
  caller allows it (`allow_config_change`); allowed changes are recorded the same way.

A start never deletes history: with checkpoints off (checkpoint_every=0) on a workdir that holds metrics or
checkpoints it is refused (`WorkdirError`), as is a config whose last step is before the newest checkpoint;
a finished run (its newest checkpoint at the last step, summary.json written) started again with the same
num_steps is a no-op (`finished_message`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import pathlib
from typing import Any

from icml26zoo.train.checkpoint import saved_steps
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.errors import ConfigChangeError, RunError, WorkdirError

__all__ = ["CONFIG_FILE", "HISTORY_FILE", "SAFE_ON_RESUME", "PriorRun", "check_start", "config_changes",
           "finished_message", "inspect_workdir", "read_history", "record_start"]

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
HISTORY_FILE = "config_history.jsonl"
# TrainConfig fields a resume may change without `allow_config_change`. Each leaves the parameter and
# optimizer-state tree and the data stream as they were: num_steps extends (or shortens) the run (the cosine
# schedule is stretched to the new end from the resumed step on, which the history records); the cadences and
# the sample, TensorBoard, progress-bar and spike-monitor settings only change what is logged or saved; the
# mesh and `distributed` only change how the same state is laid out and launched (checkpoints restore onto
# another mesh). Every other field changes what the run trains.
SAFE_ON_RESUME = frozenset({
    "num_steps", "log_every", "eval_every", "eval_batches", "checkpoint_every", "keep_checkpoints", "tensorboard",
    "progress_bar", "sample_length", "sample_temperature", "sample_top_k", "spike_monitor_every", "mesh_data",
    "mesh_fsdp", "distributed",
})
# At most this many differing fields are spelled out in an error; the rest are counted.
_LISTED_FIELDS = 6


@dataclasses.dataclass(frozen=True)
class PriorRun:
    """What a workdir held before this start: its config.json, checkpoint steps, metrics and summary."""

    workdir: pathlib.Path
    config: TrainConfig | None
    steps: list[int]
    has_metrics: bool
    has_summary: bool

    @property
    def exists(self) -> bool:
        """Whether a start has trained here: a checkpoint or a metrics row would be history to keep."""
        return bool(self.steps) or self.has_metrics


def inspect_workdir(workdir: pathlib.Path) -> PriorRun:
    """Reads what `workdir` holds without changing it; RunError when its config.json is not a config."""
    metrics = workdir / "metrics.jsonl"
    return PriorRun(
        workdir=workdir,
        config=_read_original(workdir / CONFIG_FILE),
        steps=saved_steps(workdir / "checkpoints"),
        has_metrics=metrics.is_file() and metrics.stat().st_size > 0,
        has_summary=(workdir / "summary.json").is_file(),
    )


def _read_original(path: pathlib.Path) -> TrainConfig | None:
    if not path.is_file():
        return None
    try:
        return TrainConfig.from_json(path.read_text())
    except ValueError as error:
        raise RunError(f"{path} does not describe a config ({error}); it cannot be compared with this start's "
                       "config: choose a new --workdir") from None


def config_changes(old: TrainConfig, new: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """Every field where `new` differs from `old`, by dotted path, as (old, new) JSON values.

    Compared as JSON of the whole config, so nested configs give paths such as ``optim.learning_rate``; an
    optional nested config switched on or off (``model.moe``) is one entry, None against its fields.
    """
    changes: dict[str, tuple[Any, Any]] = {}
    _diff(json.loads(old.to_json()), json.loads(new.to_json()), "", changes)
    return changes


def _diff(old: Any, new: Any, prefix: str, changes: dict[str, tuple[Any, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for name in sorted(set(old) | set(new)):
            _diff(old.get(name), new.get(name), f"{prefix}{name}.", changes)
    elif old != new:
        changes[prefix.rstrip(".")] = (old, new)


def unsafe_fields(changes: dict[str, tuple[Any, Any]]) -> list[str]:
    """The changed paths that are not in `SAFE_ON_RESUME` (every nested path is unsafe)."""
    return sorted(path for path in changes if path not in SAFE_ON_RESUME)


def check_start(prior: PriorRun, config: TrainConfig, *, allow_config_change: bool) -> dict[str, tuple[Any, Any]]:
    """The changes of `config` against the run in `prior.workdir`; raises before a change could rewrite history.

    Raises:
      ConfigChangeError: a field outside `SAFE_ON_RESUME` differs from config.json and `allow_config_change`
        is False; names each field as old → new.
      WorkdirError: the workdir holds a run and `config` turns checkpoints off, or its last step is before
        the newest checkpoint.
    """
    changes = {} if prior.config is None else config_changes(prior.config, config)
    unsafe = unsafe_fields(changes)
    if unsafe and not allow_config_change:
        raise ConfigChangeError(
            f"workdir {str(prior.workdir)!r} holds a run trained with another config ({CONFIG_FILE}): "
            f"{_listing(changes, unsafe)}; resuming would continue its checkpoints as a different run. Choose a "
            f"new --workdir, or resume anyway with --allow-config-change (train(..., allow_config_change=True)), "
            f"which records the change in {HISTORY_FILE}"
        )
    if prior.exists and not config.checkpoint_every:
        # Without checkpoints the run would restart at step 0 and drop every metrics row after it.
        raise WorkdirError(
            f"workdir {str(prior.workdir)!r} already holds a run (metrics or checkpoints) and checkpoint_every=0 "
            "would restart it at step 0, erasing its metrics; choose a new --workdir"
        )
    last = config.num_steps * config.optim.grad_accum_steps
    if prior.steps and prior.steps[-1] > last:
        raise WorkdirError(
            f"workdir {str(prior.workdir)!r} already trained to step {prior.steps[-1]}, past this config's last "
            f"step {last} (num_steps={config.num_steps}); raise num_steps to resume it, or choose a new --workdir"
        )
    return changes


def _listing(changes: dict[str, tuple[Any, Any]], paths: list[str]) -> str:
    shown = [f"{path} {_show(changes[path][0])} → {_show(changes[path][1])}" for path in paths[:_LISTED_FIELDS]]
    more = len(paths) - _LISTED_FIELDS
    return ", ".join(shown) + (f" and {more} more field{'s' if more > 1 else ''}" if more > 0 else "")


def _show(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def finished_message(prior: PriorRun, config: TrainConfig) -> str | None:
    """The one-line notice when `config` would restart a finished run in place (nothing to train), else None.

    Finished: the newest checkpoint is at the config's last step and the run wrote summary.json.
    """
    last = config.num_steps * config.optim.grad_accum_steps
    if not (prior.steps and prior.steps[-1] == last and prior.has_summary):
        return None
    return (f"the run in {str(prior.workdir)!r} already finished at step {last} (num_steps={config.num_steps}); "
            "nothing to do: raise num_steps to train further, or choose a new --workdir")


def record_start(prior: PriorRun, config: TrainConfig, changes: dict[str, tuple[Any, Any]], step: int) -> None:
    """Writes config.json when the workdir has none and appends this start's line to the history.

    Called once the state is restored, right before the first step, so a start that fails earlier records
    nothing. The line holds the step it starts from, the time (UTC), the fields differing from config.json
    and which of them only `allow_config_change` let through.
    """
    path = prior.workdir / CONFIG_FILE
    if prior.config is None:
        if prior.exists:
            log.warning("workdir %s holds a run but no %s; recording this start's config as its config",
                        prior.workdir, CONFIG_FILE)
        # Written whole, then renamed into place: a reader of the live run (load_run) never sees half of it.
        partial = path.with_name(f"{CONFIG_FILE}.partial")
        partial.write_text(config.to_json())
        partial.replace(path)
    record = {
        "step": step,
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "changed": {name: list(values) for name, values in changes.items()},
        "allowed_by_flag": unsafe_fields(changes),
    }
    with open(prior.workdir / HISTORY_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, allow_nan=False) + "\n")


def read_history(workdir: str | pathlib.Path) -> list[dict]:
    """The history lines of `workdir`, oldest first ([] when it has none)."""
    path = pathlib.Path(workdir) / HISTORY_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
