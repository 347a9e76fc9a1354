"""Leaderboard: every registered sequence mixer at one parameter budget and one token budget on three tasks.

    python scripts/leaderboard.py --quick --out runs/leaderboard_quick    # < 15 min on 2 CPU cores
    python scripts/leaderboard.py --out runs/leaderboard                   # the full budget
    python scripts/leaderboard.py --mixers attention,mamba2 --steps 50 --out /tmp/lb

Each mixer is the "llama" backbone (2 layers, 4 query heads sharing 2 key/value heads, vocabulary 256) with
that mixer in every layer and its default options; its width d_model is the multiple of 16 whose parameter
count is closest to the attention model's at the reference width (64 quick, 128 full), so every row has
about the same number of parameters. Every cell trains the budget's steps x rows x tokens with the shared
trainer on one device (AdamW, learning rate 3e-3, 10% warmup, untuned per mixer) on:

  mqar    multi-query associative recall (32 keys, 32 values, 8 pairs): next-token accuracy of the answers
  bytes   the built-in byte corpus (pystdlib): bits per byte on its validation split (lower is better)
  dyck    Dyck-2 recognition of strings of 16 brackets (objective "classification", chance 0.5): accuracy

tokens/s is the median of the three cells' training throughput (logging windows after the first, which
holds compilation); peak memory is XLA's plan for one forward-backward of the byte LM on one batch (parameters,
gradients, activations and temporaries; the optimizer's two Adam moments add 8 bytes per parameter). Mixers
registered later appear without editing this script: the rows are `zoo.registry.MIXERS`. Writes results.md,
results.json and leaderboard.png to --out; cells resume as in every reproduction (repro/common.py).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.models import ModelConfig, build_model
from icml26zoo.registry import MIXERS
from icml26zoo.repro.cli import (
    budget_parser,
    comma_list,
    parse_budget,
    print_results,
    run_main,
    use_compilation_cache,
)
from icml26zoo.repro.common import Budget, Experiment, Results, check_mixers, check_names, parameter_count
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

DEFAULT_OUT = "runs/leaderboard"
QUICK = Budget(steps=100, batch_size=16, seq_len=64)
FULL = Budget(steps=1000, batch_size=32, seq_len=128)
QUICK_WIDTH, FULL_WIDTH = 64, 128
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


def run(out: str, *, budget: Budget, mixers: Sequence[str] | None = None, tasks: Sequence[str] = tuple(TASKS),
        reference_width: int = FULL_WIDTH, resume: bool = False) -> Results:
    """Trains every (mixer, task) cell and writes the leaderboard table and plot into `out`.

    `mixers` None means every registered mixer; `tasks` a subset of TASKS (all by default).
    """
    mixers = check_mixers("mixers", MIXERS.names() if mixers is None else mixers)
    tasks = {name: TASKS[name] for name in check_names("tasks", tasks, TASKS)}
    experiment = Experiment(out, budget=budget, resume=resume)
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
        row["peak MiB"] = round(peak_step_bytes(model, budget.batch_size, budget.seq_len) / 2**20, 1)
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--mixers", help="comma-separated registered mixers (default: all of them)")
    parser.add_argument("--tasks", help=f"comma-separated, from {','.join(TASKS)} (default: all)")
    parser.add_argument("--width", type=int, help=f"reference d_model of the attention model that sets the "
                                                  f"parameter budget (default {FULL_WIDTH}; --quick {QUICK_WIDTH})")
    args, budget = parse_budget(parser, argv, quick=QUICK, full=FULL)
    mixers = None if args.mixers is None else comma_list("--mixers", args.mixers)
    tasks = tuple(TASKS) if args.tasks is None else comma_list("--tasks", args.tasks)
    width = args.width or (QUICK_WIDTH if args.quick else FULL_WIDTH)
    if width < 32 or width % 16:
        raise ValueError(f"--width must be a multiple of 16 >= 32, got {width}")
    print_results(run(args.out, budget=budget, mixers=mixers, tasks=tasks, reference_width=width,
                      resume=args.resume))


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
