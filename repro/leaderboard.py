"""Leaderboard: every registered sequence mixer at one parameter budget and one token budget on three tasks.

    python -m icml26zoo.repro leaderboard --quick --out runs/leaderboard_quick    # < 15 min on 2 CPU cores
    python -m icml26zoo.repro leaderboard --out runs/leaderboard                   # the full budget
    python -m icml26zoo.repro leaderboard --smoke --out /tmp/lb_smoke              # two mixers, MQAR, 2 steps
    python -m icml26zoo.repro leaderboard mixers=attention,mamba2 --steps 50 --out /tmp/lb

Each mixer is the "llama" backbone (2 layers, 4 query heads sharing 2 key/value heads, vocabulary 256) with
that mixer in every layer and its default options; its width d_model is the multiple of 16 whose parameter
count is closest to the attention model's at `reference_width` (64 quick, 128 full), so every row has
about the same number of parameters. Every cell trains the budget's steps x rows x tokens with the shared
trainer on one device (AdamW, learning rate 3e-3, 10% warmup, untuned per mixer) on:

  mqar    multi-query associative recall (32 keys, 32 values, 8 pairs): next-token accuracy of the answers
  bytes   the built-in byte corpus (pystdlib): bits per byte on its validation split (lower is better)
  dyck    Dyck-2 recognition of strings of 16 brackets (objective "classification", chance 0.5): accuracy

tokens/s is the median of the three cells' training throughput (logging windows after the first, which
holds compilation); peak memory is XLA's plan for one forward-backward of the byte LM on one batch (parameters,
gradients, activations and temporaries; the optimizer's two Adam moments add 8 bytes per parameter). Mixers
registered later appear without editing this module: the rows are `zoo.registry.MIXERS`. Writes results.md,
results.json and leaderboard.png to --out; cells resume as in every reproduction (repro/common.py).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.models import ModelConfig, build_model
from icml26zoo.registry import MIXERS
from icml26zoo.repro.common import Budget, Experiment, Results, check_mixers, check_names, parameter_count
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig
from icml26zoo.validation import check_int

__all__ = ["FULL", "FULL_WIDTH", "QUICK", "QUICK_ARGS", "QUICK_WIDTH", "SMOKE", "SMOKE_ARGS", "TASKS", "figure",
           "matched_width", "model_config", "peak_step_bytes", "run"]

QUICK = Budget(steps=100, batch_size=16, seq_len=64)
FULL = Budget(steps=1000, batch_size=32, seq_len=128)
QUICK_WIDTH, FULL_WIDTH = 64, 128
QUICK_ARGS = {"reference_width": QUICK_WIDTH}
# Every code path at the smallest size: two mixers (the two whose training and memory plan compile fastest) on
# MQAR (its 8 pairs fill 31 of the 32 tokens), 2 steps of 8 rows, parameters matched to attention at width 32.
SMOKE = Budget(steps=2, batch_size=8, seq_len=32)
SMOKE_ARGS = {"mixers": ("attention", "circulation"), "tasks": ("mqar",), "reference_width": 32}
DYCK_LENGTH = 16


class Task(NamedTuple):
    """One leaderboard column: the data, the objective, the summary metric reported and its column name."""

    data: DataConfig
    objective: str
    metric: str
    column: str


TASKS = {
    "mqar": Task(DataConfig(name="mqar", mqar_num_keys=32, mqar_num_values=32, mqar_num_pairs=8,
                            mqar_train_examples=8192, mqar_eval_examples=256), "lm", "eval/accuracy",
                 "MQAR accuracy"),
    "bytes": Task(DataConfig(name="pystdlib"), "lm", "eval/bits_per_byte", "bytes bits/byte"),
    "dyck": Task(DataConfig(name="dyck", task_options=(("length", DYCK_LENGTH), ("num_types", 2))),
                 "classification", "eval/accuracy", "Dyck-2 accuracy"),
}


def model_config(mixer: str, d_model: int, seq_len: int) -> ModelConfig:
    """The leaderboard's backbone with `mixer` in both layers at width `d_model`."""
    return ModelConfig(name="llama", mixer=mixer, vocab_size=256, d_model=d_model, num_layers=2, num_heads=4,
                       num_kv_heads=2, max_seq_len=seq_len)


def matched_width(mixer: str, target: int, reference: int, seq_len: int) -> tuple[int, int]:
    """(d_model, parameters): the width in 32, 48, ..., 2 x reference whose count is closest to `target`.

    Widths the mixer rejects (ValueError when built) are skipped; none accepted is a ValueError.
    """
    best = None
    for width in range(32, 2 * reference + 1, 16):
        try:
            count = parameter_count(model_config(mixer, width, seq_len))
        except ValueError:
            continue
        if best is None or abs(count - target) < abs(best[1] - target):
            best = (width, count)
    if best is None:
        raise ValueError(f"mixers: {mixer!r} builds at no width in 32 .. {2 * reference}")
    return best


def peak_step_bytes(model: ModelConfig, batch_size: int, seq_len: int) -> int:
    """XLA's planned memory for one forward-backward of `model`'s next-token loss on [batch_size, seq_len]:
    arguments + outputs + temporaries, less buffers it aliases (read from the compiled program, nothing runs)."""
    graphdef, params = nnx.split(nnx.eval_shape(lambda: build_model(model, rngs=nnx.Rngs(0))), nnx.Param)

    def loss(params: nnx.State, tokens: jax.Array) -> jax.Array:
        logits = nnx.merge(graphdef, params)(tokens)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], axis=-1))

    tokens = jax.ShapeDtypeStruct((batch_size, seq_len), jnp.int32)
    stats = jax.jit(jax.value_and_grad(loss)).lower(params, tokens).compile().memory_analysis()
    if stats is None:
        return 0
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
               - stats.alias_size_in_bytes)


def _stored_peak_bytes(experiment: Experiment, cell: str, model: ModelConfig) -> int:
    """`peak_step_bytes` of `model` at the budget's batch shape, stored in `cell` (peak_bytes.json) and read back on
    a rerun: measuring it compiles a forward-backward program, as long as a short cell's training."""
    budget = experiment.budget
    key = {"model": repr(model), "batch_size": budget.batch_size, "seq_len": budget.seq_len}
    path = experiment.cell_dir(cell) / "peak_bytes.json"
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored.get("key") == key:
            return int(stored["bytes"])
    value = peak_step_bytes(model, budget.batch_size, budget.seq_len)
    path.write_text(json.dumps({"key": key, "bytes": value}) + "\n")
    return value


def cell_config(experiment: Experiment, model: ModelConfig, task: Task) -> TrainConfig:
    steps = experiment.budget.steps
    config = TrainConfig(model=model, data=task.data, objective=task.objective,
                         optim=OptimConfig(learning_rate=3e-3, warmup_steps=max(1, steps // 10)),
                         log_every=max(1, steps // 10), eval_batches=8)
    return experiment.cell_config(config, checkpoints=1)


def throughput(experiment: Experiment, cell: str) -> float:
    """Median training tokens/s of the cell's logging windows after the first (which holds compilation)."""
    _, values = experiment.metrics(cell, "perf/tokens_per_sec")
    return statistics.median(values[1:] or values)


@register_experiment("leaderboard", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, volatile=("tokens/s", "peak MiB"))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, mixers: Sequence[str] | None = None,
        tasks: Sequence[str] = tuple(TASKS), reference_width: int = FULL_WIDTH, resume: bool = False) -> Results:
    """Trains every (mixer, task) cell and writes the leaderboard table and plot into `run_dir`.

    Args:
      run_dir: the run directory (cells, datasets, results.md/json, leaderboard.png).
      budget: steps, rows and tokens of every cell (each trained once, from TrainConfig's default seed;
        budget.seeds is not used).
      mixers: registered mixers, one row each; None (the default) means every registered mixer.
      tasks: a subset of TASKS (all by default); the first one orders the rows.
      reference_width: d_model of the attention model whose parameter count every row matches (a multiple of
        16, >= 32; QUICK uses 64).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    mixers = check_mixers("mixers", MIXERS.names() if mixers is None else mixers)
    tasks = {name: TASKS[name] for name in check_names("tasks", tasks, TASKS)}
    if check_int("reference_width", reference_width, minimum=32) % 16:
        raise ValueError(f"reference_width must be a multiple of 16, got {reference_width!r}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    target = parameter_count(model_config("attention", reference_width, budget.seq_len))
    rows = []
    for mixer in mixers:
        width, count = matched_width(mixer, target, reference_width, budget.seq_len)
        model = model_config(mixer, width, budget.seq_len)
        row = {"mixer": mixer, "d_model": width, "params": count}
        speeds = []
        for name, task in tasks.items():
            # One device: rows compare mixers, not sharding, and tiny models gain nothing from a mesh.
            summary = experiment.train_cell(f"{mixer}_{name}", cell_config(experiment, model, task),
                                            devices=jax.local_devices()[:1])
            row[task.column] = round(float(summary[task.metric]), 4)
            speeds.append(throughput(experiment, f"{mixer}_{name}"))
        row["tokens/s"] = round(statistics.median(speeds))
        row["peak MiB"] = round(_stored_peak_bytes(experiment, f"{mixer}_{next(iter(tasks))}", model) / 2**20, 1)
        rows.append(row)
    first = next(iter(tasks.values()))
    rows.sort(key=lambda row: row[first.column] * (1 if first.metric.endswith("bits_per_byte") else -1))
    columns = ("mixer", "d_model", "params", *(task.column for task in tasks.values()), "tokens/s", "peak MiB")
    notes = [f"Parameter budget: the attention model at d_model {reference_width} ({target:,} parameters); "
             "each mixer at the multiple of 16 closest to it. One recipe for all (AdamW 3e-3), untuned.",
             "MQAR and Dyck-2: accuracy (higher is better; Dyck chance 0.5); bytes: bits per byte (lower is "
             "better); peak MiB: XLA's plan for one forward-backward of the byte LM (Adam moments excluded)."]
    return experiment.write(rows, columns=columns, title="Zoo leaderboard", notes=notes,
                            figures={"leaderboard": figure(rows, [task.column for task in tasks.values()])})


def figure(rows: Sequence[dict], metrics: Sequence[str]) -> Figure:
    """One horizontal bar panel per task metric column and one for throughput, mixers on the y axis."""
    panels = [*metrics, "tokens/s"]
    fig = Figure(figsize=(4 * len(panels), 0.35 * len(rows) + 1.5), layout="constrained")
    names = [row["mixer"] for row in rows]
    for axis, column in zip(fig.subplots(1, len(panels), sharey=True), panels, strict=True):
        axis.barh(names, [row[column] for row in rows], color="tab:blue")
        axis.set_title(column)
        axis.invert_yaxis()
    return fig
