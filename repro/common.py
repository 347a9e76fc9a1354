"""What every reproduction shares: a checked budget, a run directory of resumable cells, result tables and plots.

A reproduction is a grid of *cells* (one training run each: a mixer, a size, a seed ...). `Experiment` gives
each cell its own workdir under ``<run_dir>/cells/<cell>``, trains it with the shared trainer, and reuses it
when the script is run again: a cell whose run finished (``summary.json`` written) is read back, one that was
interrupted resumes from its latest checkpoint, and a cell whose stored config differs from the requested one
is an error rather than a silent mix of two experiments. `Experiment.write` writes the result table as
markdown (``results.md``) and JSON (``results.json``, with the budget and the machine), and every figure as
PNG, all into the run directory.

Example::

    experiment = Experiment("runs/fox_fix", budget=Budget(steps=200, batch_size=16, seq_len=128))
    summary = experiment.train_cell("fox_seed0", config)          # trains, or reuses a finished cell
    results = experiment.write(rows, columns=("mixer", "bits_per_byte"), title="FoX vs FiX",
                               figures={"loss_curves": figure})
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime
import json
import math
import os
import pathlib
import platform
import re
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import jax
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.models import ModelConfig, build_model, count_params
from icml26zoo.registry import MIXERS, OPTIMIZERS
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.errors import RunError
from icml26zoo.train.loop import train
from icml26zoo.train.metrics import read_metrics
from icml26zoo.validation import check_int, is_number

__all__ = ["MARKER", "Budget", "Experiment", "Results", "check_mixers", "check_names", "check_optimizers",
           "line_figure", "machine", "metric_series", "parameter_count", "running_experiment",
           "running_experiment_name"]

CELL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]*")
# The file naming the experiment that made a run directory (a --resume by another experiment is refused).
MARKER = "experiment.json"
# The registered experiment whose `run` is executing (set by repro.registry's wrapper), or None.
_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar("running_experiment", default=None)


def running_experiment_name() -> str | None:
    """The name of the registered experiment now running, or None outside one."""
    return _RUNNING.get()


@contextlib.contextmanager
def running_experiment(name: str) -> Iterator[None]:
    """Marks `name` as the running experiment: an `Experiment` created inside stamps its run directory."""
    token = _RUNNING.set(name)
    try:
        yield
    finally:
        _RUNNING.reset(token)


@dataclasses.dataclass(frozen=True)
class Budget:
    """The compute of one reproduction: every cell trains `steps` steps of `batch_size` rows of `seq_len`
    tokens, once per seed in `seeds`. Each field is checked on construction (ValueError names it)."""

    steps: int
    batch_size: int
    seq_len: int
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len"):
            check_int(f"budget.{name}", getattr(self, name))
        seeds = self.seeds
        if not isinstance(seeds, tuple) or not seeds:
            raise ValueError(f"budget.seeds must be a non-empty tuple of integers >= 0, got {seeds!r}")
        for seed in seeds:
            check_int("budget.seeds[i]", seed, minimum=0)
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"budget.seeds must not repeat a seed, got {seeds!r}")

    @property
    def tokens_per_cell(self) -> int:
        return self.steps * self.batch_size * self.seq_len

    def describe(self) -> str:
        """One line for tables and paper pages, e.g. "200 steps x 16 rows x 128 tokens, seeds (0, 1)"."""
        return (f"{self.steps} steps x {self.batch_size} rows x {self.seq_len} tokens "
                f"({self.tokens_per_cell:,} tokens per cell), seeds {self.seeds}")


def check_names(field: str, names: Iterable[str], allowed: Iterable[str]) -> tuple[str, ...]:
    """`names` as a tuple, each one of `allowed`; otherwise ValueError naming `field`, the bad name and the
    allowed ones. An empty selection is an error too (a reproduction of nothing)."""
    names, allowed = tuple(names), list(allowed)
    if not names:
        raise ValueError(f"{field} must name at least one of {allowed}, got none")
    for name in names:
        if name not in allowed:
            raise ValueError(f"{field}: unknown name {name!r}; expected one of {allowed}")
    if len(set(names)) != len(names):
        raise ValueError(f"{field} must not repeat a name, got {list(names)}")
    return names


def check_mixers(field: str, names: Iterable[str], allowed: Iterable[str] | None = None) -> tuple[str, ...]:
    """Like `check_names` against the registered mixers (or the subset `allowed` an experiment supports)."""
    return check_names(field, names, MIXERS.names() if allowed is None else allowed)


def check_optimizers(field: str, names: Iterable[str], allowed: Iterable[str] | None = None) -> tuple[str, ...]:
    """Like `check_names` against the registered optimizers (or the subset `allowed`)."""
    return check_names(field, names, OPTIMIZERS.names() if allowed is None else allowed)


def spread(values: Sequence[float]) -> float | None:
    """max − min of per-seed values, the spread a page reports beside their mean; None with fewer than two."""
    return float(max(values) - min(values)) if len(values) > 1 else None


def mean_and_spread(values: Sequence[float], digits: int = 4) -> tuple[float, float | None]:
    """(mean, `spread`) of per-seed values, each rounded to `digits` decimals (spread None with one value)."""
    if not values:
        raise ValueError("mean_and_spread needs at least one value, got none")
    width = spread(values)
    return round(math.fsum(values) / len(values), digits), None if width is None else round(width, digits)


def seed_summary(values: Sequence[float]) -> tuple[float, float | None, str]:
    """(mean, `spread`, the per-seed values as "0.123, 0.456") of per-seed values: a row's three cells for a metric."""
    return statistics.fmean(values), spread(values), ", ".join(f"{v:.3f}" for v in values)


def seed_summary_text(name: str, values: Sequence[float]) -> str:
    """"name mean (spread s: v0, v1, v2)" of per-seed values (`seed_summary`), for an experiment's notes."""
    mean, width, text = seed_summary(values)
    return f"{name} {mean:.4g} (spread {'-' if width is None else f'{width:.3g}'}: {text})"


def mean_std_text(values: Sequence[float], mean_format: str = ".4g", std_format: str = ".2g") -> str:
    """"mean ± std" of per-seed values (population standard deviation, 0 for one seed) in the given format specs,
    for the experiments whose pages report the standard deviation rather than `spread`."""
    if not values:
        raise ValueError("mean_std_text needs at least one value, got none")
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    return f"{mean:{mean_format}} ± {std:{std_format}}"


def parameter_count(model: ModelConfig) -> int:
    """Parameters of the model `model` describes, counted on abstract shapes (nothing is allocated)."""
    return count_params(nnx.eval_shape(lambda: build_model(model, rngs=nnx.Rngs(0))))


def machine() -> str:
    """Where a result was measured: processor count, OS, JAX version and backend, for tables and pages."""
    devices = jax.devices()
    kind = devices[0].device_kind if devices[0].platform != "cpu" else f"{os.cpu_count()}-core CPU"
    return (f"{len(devices)} x {kind} ({platform.system()} {platform.machine()}), jax {jax.__version__}, "
            f"backend {jax.default_backend()}")


@dataclasses.dataclass
class Results:
    """What a reproduction returns: its rows, the markdown table, its figures and the files written."""

    title: str
    rows: list[dict]
    markdown: str
    figures: dict[str, Figure]
    paths: dict[str, pathlib.Path]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def figure(self, name: str | None = None) -> Figure:
        """The figure `name` (default: the first one), for a notebook cell to display."""
        if name is None:
            return next(iter(self.figures.values()))
        if name not in self.figures:
            raise ValueError(f"name must be one of {list(self.figures)}, got {name!r}")
        return self.figures[name]


class Experiment:
    """A run directory holding one reproduction's cells, tables and figures.

    Args:
      run_dir: the directory (created with its parents when `resume` is False).
      budget: the experiment's `Budget`, recorded with the results.
      resume: require `run_dir` to exist already (a resumed or re-reported experiment); a missing one
        raises FileNotFoundError naming it instead of silently starting over somewhere else.
    """

    def __init__(self, run_dir: str | os.PathLike, *, budget: Budget, resume: bool = False) -> None:
        if not isinstance(budget, Budget):
            raise ValueError(f"budget must be a repro.common.Budget, got {type(budget).__name__}")
        self.run_dir = pathlib.Path(run_dir)
        if resume and not self.run_dir.is_dir():
            raise FileNotFoundError(f"run_dir {str(self.run_dir)!r} does not exist: there is nothing to resume "
                                    f"(drop --resume to start a new experiment there)")
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise ValueError(f"run_dir {str(self.run_dir)!r} exists and is not a directory")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.budget = budget
        self.name = running_experiment_name()
        if self.name is not None and not (self.run_dir / MARKER).is_file():
            (self.run_dir / MARKER).write_text(json.dumps({"experiment": self.name}) + "\n")

    def cell_dir(self, cell: str) -> pathlib.Path:
        if not isinstance(cell, str) or not CELL_NAME.fullmatch(cell):
            raise ValueError(f"cell must be a name of letters, digits and _.=- , got {cell!r}")
        return self.run_dir / "cells" / cell

    def cell_config(self, config: TrainConfig, *, seed: int | None = None, checkpoints: int = 2) -> TrainConfig:
        """`config` with this experiment's budget (steps, batch size, sequence length, `seed`), quiet
        logging, and `checkpoints` evenly spaced checkpoints so an interrupted cell resumes."""
        check_int("checkpoints", checkpoints)
        steps = self.budget.steps
        return dataclasses.replace(
            config, num_steps=steps, batch_size=self.budget.batch_size, seq_len=self.budget.seq_len,
            seed=config.seed if seed is None else seed, checkpoint_every=max(1, math.ceil(steps / checkpoints)),
            keep_checkpoints=1, tensorboard=False, progress_bar=False, sample_length=0,
        )

    def train_cell(self, cell: str, config: TrainConfig, **train_kwargs: Any) -> dict[str, Any]:
        """Trains `config` in the cell's workdir, or reads back the summary of a cell that already finished.

        Returns the run's final eval metrics (the JSON summary, without the train state). `train_kwargs`
        go to `icml26zoo.train.loop.train` (e.g. `data=`, `eval_data=`; `final_eval=False` for a cell the
        experiment scores itself, which then skips the trainer's closing evaluation). A cell whose stored config.json
        differs from `config` raises ValueError: use another run directory for another experiment.
        """
        workdir = self.cell_dir(cell)
        stored = workdir / "config.json"
        # Compared as configs, not as text: a field the zoo added since the cell ran takes its default.
        if stored.is_file() and _stored_config(stored) != config:
            raise ValueError(f"cell {cell!r} in {str(self.run_dir)!r} was trained with another config "
                             f"({stored}); use a new run_dir, or delete the cell to retrain it")
        summary_path = workdir / "summary.json"
        if summary_path.is_file():
            return json.loads(summary_path.read_text())
        summary = train(config, workdir, **train_kwargs)
        summary.pop("state", None)
        return summary

    def metrics(self, cell: str, key: str) -> tuple[list[int], list[float]]:
        """Steps and finite values of metric `key` logged by `cell` (see `metric_series`)."""
        return metric_series(self.cell_dir(cell) / "metrics.jsonl", key)

    def write(self, rows: Sequence[Mapping[str, Any]], *, columns: Sequence[str], title: str,
              notes: Sequence[str] = (), figures: Mapping[str, Figure] | None = None,
              extra: Mapping[str, Any] | None = None) -> Results:
        """Writes results.md (title, budget, machine, notes, the table of `columns`), results.json (rows,
        budget, machine, date, `extra`) and `<name>.png` per figure; returns them as `Results`."""
        rows = [dict(row) for row in rows]
        missing = sorted({c for row in rows for c in columns if c not in row})
        if missing:
            raise ValueError(f"columns {missing} are missing from some rows")
        figures = dict(figures or {})
        where = machine()
        lines = [f"# {title}", "", f"Budget: {self.budget.describe()}.", f"Machine: {where}.", ""]
        lines += [f"{note}" for note in notes] + ([""] if notes else [])
        lines += markdown_table(rows, columns)
        text = "\n".join(lines) + "\n"
        paths = {"markdown": self.run_dir / "results.md", "json": self.run_dir / "results.json"}
        paths["markdown"].write_text(text)
        record = {"title": title, "experiment": self.name, "budget": dataclasses.asdict(self.budget), "machine": where,
                  "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "rows": rows,
                  "extra": dict(extra or {})}
        paths["json"].write_text(json.dumps(record, indent=2, default=_json_default) + "\n")
        for name, figure in figures.items():
            paths[name] = self.run_dir / f"{name}.png"
            figure.savefig(paths[name], dpi=100)
        return Results(title=title, rows=rows, markdown=text, figures=figures, paths=paths, extra=dict(extra or {}))


def _stored_config(path: pathlib.Path) -> TrainConfig | None:
    """The config a cell stored, or None when it no longer parses (a field was renamed or removed)."""
    try:
        return TrainConfig.from_json(path.read_text())
    except (RunError, ValueError, TypeError):
        return None


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[str]:
    """The lines of a markdown table of `columns`; floats with 4 significant digits, None as "-"."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell_text(row[c]) for c in columns) + " |")
    return lines


def _cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def metric_series(metrics_path: str | os.PathLike, key: str) -> tuple[list[int], list[float]]:
    """Steps and finite values of `key` in a metrics.jsonl, sorted by step, the last record of a step winning
    (a resumed run may log a step twice)."""
    by_step: dict[int, float] = {}
    for record in read_metrics(metrics_path):
        value = record.get(key)
        if is_number(value) and math.isfinite(value):
            by_step[int(record["step"])] = float(value)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def line_figure(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *, xlabel: str, ylabel: str,
                title: str, logx: bool = False, logy: bool = False, markers: bool = True,
                hlines: Mapping[str, float] | None = None) -> Figure:
    """One axes with a line per `series` entry (label -> (xs, ys)) and dashed reference lines `hlines`."""
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for label, (xs, ys) in series.items():
        axes.plot(list(xs), list(ys), label=label, **({"marker": "o", "markersize": 3} if markers else {}))
    for label, value in (hlines or {}).items():
        axes.axhline(value, linestyle="--", linewidth=1, color="gray", label=label)
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logx:
        axes.set_xscale("log")
    if logy:
        axes.set_yscale("log")
    axes.grid(True, alpha=0.3)
    if series or hlines:
        axes.legend(fontsize=8)
    return figure
