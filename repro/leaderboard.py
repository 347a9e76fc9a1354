"""Leaderboard: every registered sequence mixer at one parameter budget and one token budget on three tasks.

    python -m icml26zoo.repro leaderboard --out runs/leaderboard_standard          # the standard (FULL) budget
    python -m icml26zoo.repro leaderboard --quick --out runs/leaderboard_quick    # one MQAR cell, one rate
    python -m icml26zoo.repro leaderboard --smoke --out /tmp/lb_smoke              # two mixers, MQAR, 2 steps
    python -m icml26zoo.repro leaderboard mixers=attention,mamba2 mqar_pairs=4 --steps 50 --out /tmp/lb

The standard budget is the FULL one (the default): MQAR at `mqar_pairs` key-value pairs (2, 4 and 8 of 32
keys and 32 values, rows of 32 tokens; as in Zoology's MQAR, more pairs in the same state is harder recall),
the byte corpus and Dyck-2. Each MQAR cell is trained once per learning rate in `learning_rates` and reported
at the best one (the rate that won each cell is the "best lr" column); bytes and Dyck-2, which only have to show a
row above the constant predictor, train at the first rate (`sweep_tasks`). QUICK and SMOKE run one MQAR setting
(8 pairs) at one rate.

Each mixer is the "llama" backbone (2 layers, 4 query heads sharing 2 key/value heads, vocabulary 256) with
that mixer in every layer and its default options; its width d_model is the multiple of 16 whose parameter
count is closest to the attention model's at `reference_width` (64), so every row has about the same number
of parameters. Every cell trains the budget's steps x rows x tokens with the shared trainer on one device
(AdamW, 10% warmup, cosine decay, untuned per mixer beyond the shared rate sweep) on:

  mqar    multi-query associative recall (32 keys, 32 values, P pairs): next-token accuracy of the answers
  bytes   the built-in byte corpus (pystdlib): bits per byte on its validation split (lower is better)
  dyck    Dyck-2 recognition of strings of 16 brackets (objective "classification"): accuracy

The last row, "constant predictor", is what a model that ignores its input scores on the same eval batches:
the most frequent MQAR answer's share, the add-one byte unigram of the train split (bits/byte on validation)
and the majority Dyck-2 class's share. A mixer above it on a task has learned something there. The best rate
is chosen on the eval batches it is reported on (as in Zoology's sweeps), so a cell's number is the best of
`len(learning_rates)` tries, not a held-out estimate.

tokens/s is the median of the mixer's cells' training throughput (logging windows after the first, which
holds compilation); peak memory is XLA's plan for one forward-backward of the byte LM on one batch (parameters,
gradients, activations and temporaries; the optimizer's two Adam moments add 8 bytes per parameter). Mixers
registered later appear without editing this module: the rows are `zoo.registry.MIXERS`. Writes results.md,
results.json and leaderboard.png to --out; cells resume as in every reproduction (repro/common.py).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.models import ModelConfig, build_model
from icml26zoo.registry import MIXERS
from icml26zoo.repro.common import Budget, Experiment, Results, check_mixers, check_names, parameter_count
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train import data as data_lib
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig
from icml26zoo.validation import check_int, check_positive

__all__ = ["BASELINE", "FULL", "NO_RECALL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "STANDARD", "TASKS",
           "WIDTH", "best_rate", "constant_baseline", "figure", "matched_width", "model_config",
           "no_recall_baseline", "peak_step_bytes", "run", "task_columns"]

WIDTH = 64
# The standard budget (FULL, what the README reports), chosen so softmax attention learns MQAR at 2 pairs. Probes of
# that cell at lr 3e-3 (2026-12-06, 2-core CPU): 0.74 after a 600-step schedule; 0.77 after a 1,200-step one (seeds
# 0 and 1); on a 1,600-step schedule 0.78 at step 600, 0.90 at 1,000, 0.98 at 1,200 and 1.000 at the end. 16-row
# batches (1,600 steps) and lr 1e-2 (1,200 steps) stayed at the no-recall guess. So attention's recall forms late
# in this schedule; 1,600 steps is the shortest measured that shows it. The whole grid (13 mixers x 8 cells) is about
# 250 CPU-minutes by the per-step times of a quiet machine (about 2 h on 2 cores as two processes over disjoint
# mixer lists); protot's cells are a quarter of it, attention's and hyena's the cheapest.
STANDARD = FULL = Budget(steps=1600, batch_size=32, seq_len=32)
QUICK = Budget(steps=100, batch_size=16, seq_len=64)
QUICK_ARGS = {"mqar_pairs": (8,), "learning_rates": (3e-3,)}
# Every code path at the smallest size: two mixers (the two whose training and memory plan compile fastest) on
# MQAR (its 8 pairs fill 31 of the 32 tokens), 2 steps of 8 rows, parameters matched to attention at width 32.
SMOKE = Budget(steps=2, batch_size=8, seq_len=32)
SMOKE_ARGS = {"mixers": ("attention", "circulation"), "tasks": ("mqar",), "reference_width": 32,
              "mqar_pairs": (8,), "learning_rates": (3e-3,)}
DYCK_LENGTH = 16
DEFAULT_CHUNK = 64  # the chunked ops' default chunk_size
MQAR_KEYS = 32
BASELINE = "constant predictor"
NO_RECALL = "no-recall guess"


class Task(NamedTuple):
    """One leaderboard column: the data, the objective, the summary metric reported and its column name."""

    data: DataConfig
    objective: str
    metric: str
    column: str

    @property
    def lower_is_better(self) -> bool:
        return self.metric.endswith("bits_per_byte")


TASKS = {
    "mqar": Task(DataConfig(name="mqar", mqar_num_keys=MQAR_KEYS, mqar_num_values=32, mqar_num_pairs=8,
                            mqar_train_examples=32768, mqar_eval_examples=256), "lm", "eval/accuracy",
                 "MQAR accuracy"),
    "bytes": Task(DataConfig(name="pystdlib"), "lm", "eval/bits_per_byte", "bytes bits/byte"),
    "dyck": Task(DataConfig(name="dyck", task_options=(("length", DYCK_LENGTH), ("num_types", 2))),
                 "classification", "eval/accuracy", "Dyck-2 accuracy"),
}


def task_columns(tasks: Sequence[str], mqar_pairs: Sequence[int]) -> dict[str, Task]:
    """cell key -> Task, in column order: "mqar" becomes one column per pair count ("mqar_p4": "MQAR p4 acc")."""
    columns = {}
    for name in tasks:
        task = TASKS[name]
        if name != "mqar":
            columns[name] = task
            continue
        for pairs in mqar_pairs:
            columns[f"mqar_p{pairs}"] = task._replace(data=dataclasses.replace(task.data, mqar_num_pairs=pairs),
                                                      column=f"MQAR p{pairs} acc")
    return columns


def column_task(key: str) -> str:
    """The TASKS name of a `task_columns` key ("mqar_p4" -> "mqar", "bytes" -> "bytes")."""
    return key if key in TASKS else key.rpartition("_p")[0]


def best_rate(results: Mapping[float, float], *, lower_is_better: bool) -> tuple[float, float]:
    """(learning rate, value) of the best finite result of a rate sweep; the first listed wins a tie. A sweep
    whose every run diverged (no finite value) reports its first rate with NaN."""
    if not results:
        raise ValueError("results must hold at least one learning rate's value, got none")
    finite = {rate: value for rate, value in results.items() if math.isfinite(value)}
    if not finite:
        return next(iter(results)), math.nan
    pick = min if lower_is_better else max
    best = pick(finite.values())
    return next(rate for rate, value in finite.items() if value == best), best


def constant_baseline(task: Task, *, batch_size: int, seq_len: int, eval_batches: int) -> float:
    """What ignoring the input scores on `task`'s eval batches (the trainer's eval: `eval_batches` batches of
    [batch_size, seq_len]): the byte unigram's bits/byte (add-one, fitted on the train split), else the share
    of the most frequent target (MQAR answers) or label (classification) among the weighted ones."""
    if task.lower_is_better:
        return data_lib.unigram_bits_per_byte(task.data, task.data.eval_split)
    counts: collections.Counter = collections.Counter()
    for batch in data_lib.make_eval_iterator(task.data, batch_size=batch_size, seq_len=seq_len,
                                             max_batches=eval_batches):
        weights = np.asarray(batch["weights"])
        if task.objective == "classification":
            counts.update(np.asarray(batch["labels"])[weights.sum(axis=1) > 0].tolist())
        else:
            counts.update(np.asarray(batch["targets"])[weights > 0].tolist())
    total = sum(counts.values())
    if total == 0:
        raise ValueError(f"data.name {task.data.name!r}: the eval batches hold no weighted target")
    return max(counts.values()) / total


def model_config(mixer: str, d_model: int, seq_len: int) -> ModelConfig:
    """The leaderboard's backbone with `mixer` in both layers at width `d_model` and `row_options` for its rows."""
    return ModelConfig(name="llama", mixer=mixer, vocab_size=256, d_model=d_model, num_layers=2, num_heads=4,
                       num_kv_heads=2, max_seq_len=seq_len, mixer_options=row_options(mixer, seq_len))


def row_chunk(seq_len: int) -> int:
    """The chunk a chunked mixer runs rows of `seq_len` tokens in: the row length rounded up to a power of two,
    at least 16 and at most the ops' default 64."""
    return min(DEFAULT_CHUNK, max(16, 1 << (check_int("seq_len", seq_len) - 1).bit_length()))


@functools.cache
def row_options(mixer: str, seq_len: int) -> tuple[tuple[str, Any], ...]:
    """Mixer options that change what a row costs, never what the model computes: (("chunk_size", row_chunk),)
    for a mixer with a `chunk_size` option when the row is shorter than its default chunk, else ().

    A chunked op pads the row to whole chunks, so 32-token rows in the default 64-token chunk do twice the work
    (measured: deltanet, mamba2, mdn 1.4-1.6x faster per step at chunk 32, same outputs up to float rounding).
    A mixer without the option (building with it raises ValueError) keeps its defaults."""
    chunk = row_chunk(seq_len)
    if chunk >= DEFAULT_CHUNK:
        return ()
    options = (("chunk_size", chunk),)
    config = ModelConfig(name="llama", mixer=mixer, vocab_size=256, d_model=64, num_layers=1, num_heads=4,
                         num_kv_heads=2, max_seq_len=seq_len, mixer_options=options)
    try:
        nnx.eval_shape(lambda: build_model(config, rngs=nnx.Rngs(0)))
    except ValueError:
        return ()
    return options


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


def no_recall_baseline(task: Task, *, batch_size: int, seq_len: int, eval_batches: int) -> float:
    """MQAR without recall: the expected accuracy, on the same eval batches, of answering each query with the value
    of a uniformly drawn pair among those not yet queried. It uses the context's values and which keys were asked
    already, never which value a key was bound to: the plateau a model reaches by elimination alone
    (about H_P / P for P pairs: 0.75 at 2, 0.52 at 4, 0.34 at 8). Only accuracy above it shows recall."""
    pairs = task.data.mqar_num_pairs
    hits, total = 0.0, 0
    for batch in data_lib.make_eval_iterator(task.data, batch_size=batch_size, seq_len=seq_len,
                                             max_batches=eval_batches):
        inputs, targets = np.asarray(batch["inputs"]), np.asarray(batch["targets"])
        segments, weights = np.asarray(batch["segment_ids"]), np.asarray(batch["weights"])
        examples = [(row, segment) for row in range(len(segments)) for segment in np.unique(segments[row]) if segment]
        for row, segment in examples:
            where = np.flatnonzero(segments[row] == segment)
            if not weights[row, where].any():
                continue
            # One whole example: its inputs and the last target (the final answer).
            tokens = np.append(inputs[row, where], targets[row, where[-1]])
            keys, values = list(tokens[0:2 * pairs:2]), tokens[1:2 * pairs:2]
            left = list(range(pairs))
            for query, answer in zip(tokens[2 * pairs::2], tokens[2 * pairs + 1::2], strict=True):
                hits += float(np.mean(values[left] == answer))
                total += 1
                left.remove(keys.index(query))
    if total == 0:
        raise ValueError(f"data.name {task.data.name!r}: the eval batches hold no MQAR example")
    return hits / total


EVAL_BATCHES = 8


def cell_config(experiment: Experiment, model: ModelConfig, task: Task, learning_rate: float) -> TrainConfig:
    steps = experiment.budget.steps
    config = TrainConfig(model=model, data=task.data, objective=task.objective,
                         optim=OptimConfig(learning_rate=learning_rate, warmup_steps=max(1, steps // 10)),
                         log_every=max(1, steps // 10), eval_batches=EVAL_BATCHES)
    return experiment.cell_config(config, checkpoints=1)


def throughput(experiment: Experiment, cell: str) -> float:
    """Median training tokens/s of the cell's logging windows after the first (which holds compilation)."""
    _, values = experiment.metrics(cell, "perf/tokens_per_sec")
    return statistics.median(values[1:] or values)


def _check_options(budget: Budget, tasks: Sequence[str], mqar_pairs: Sequence[int],
                   learning_rates: Sequence[float]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The pair counts and rates, checked against each other and the budget (ValueError naming the option)."""
    rates = tuple(learning_rates)
    if not rates:
        raise ValueError("learning_rates must name at least one learning rate, got none")
    for rate in rates:
        check_positive("learning_rates[i]", rate, finite=True)
    if len(set(rates)) != len(rates):
        raise ValueError(f"learning_rates must not repeat a rate, got {list(rates)}")
    pairs = tuple(mqar_pairs)
    if "mqar" in tasks:
        if not pairs:
            raise ValueError("mqar_pairs must name at least one pair count, got none")
        for count in pairs:
            check_int("mqar_pairs[i]", count, maximum=MQAR_KEYS)
            if 4 * count - 1 > budget.seq_len:
                raise ValueError(f"mqar_pairs: {count} pairs need rows of 4 * {count} - 1 = {4 * count - 1} "
                                 f"tokens, more than budget.seq_len {budget.seq_len}")
        if len(set(pairs)) != len(pairs):
            raise ValueError(f"mqar_pairs must not repeat a count, got {list(pairs)}")
    return pairs, tuple(float(rate) for rate in rates)


@register_experiment("leaderboard", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, volatile=("tokens/s", "peak MiB"))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, mixers: Sequence[str] | None = None,
        tasks: Sequence[str] = tuple(TASKS), mqar_pairs: Sequence[int] = (2, 4, 8),
        learning_rates: Sequence[float] = (3e-3, 1e-2), sweep_tasks: Sequence[str] = ("mqar",),
        reference_width: int = WIDTH, resume: bool = False) -> Results:
    """Trains every (mixer, task column, learning rate) cell and writes the leaderboard table and plot into `run_dir`.

    Args:
      run_dir: the run directory (cells, results.md/json, leaderboard.png).
      budget: steps, rows and tokens of every cell (each trained once, from TrainConfig's default seed;
        budget.seeds is not used).
      mixers: registered mixers, one row each; None (the default) means every registered mixer.
      tasks: a subset of TASKS (all by default); the first column orders the rows, ties broken by the next.
      mqar_pairs: key-value pairs of the MQAR columns (each at most 32 keys, and 4 x pairs - 1 <= budget.seq_len).
      learning_rates: the AdamW peak rates a cell of a `sweep_tasks` task is trained at (the best one is
        reported); the other tasks' cells train at the first rate only.
      sweep_tasks: the tasks whose cells sweep every rate (by default MQAR, the task the ranking rests on; bytes
        and Dyck-2 only have to show a row above the constant predictor). () trains every cell at one rate.
      reference_width: d_model of the attention model whose parameter count every row matches (a multiple of
        16, >= 32).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    mixers = check_mixers("mixers", MIXERS.names() if mixers is None else mixers)
    tasks = check_names("tasks", tasks, TASKS)
    sweep_tasks = tuple(sweep_tasks)
    sweep_tasks = check_names("sweep_tasks", sweep_tasks, TASKS) if sweep_tasks else ()
    if check_int("reference_width", reference_width, minimum=32) % 16:
        raise ValueError(f"reference_width must be a multiple of 16, got {reference_width!r}")
    mqar_pairs, learning_rates = _check_options(budget, tasks, mqar_pairs, learning_rates)
    columns = task_columns(tasks, mqar_pairs)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    target = parameter_count(model_config("attention", reference_width, budget.seq_len))
    rows = []
    for mixer in mixers:
        width, count = matched_width(mixer, target, reference_width, budget.seq_len)
        model = model_config(mixer, width, budget.seq_len)
        row = {"mixer": mixer, "d_model": width, "params": count}
        speeds, winners, first_cell = [], [], None
        for key, task in columns.items():
            results = {}
            for rate in learning_rates if column_task(key) in sweep_tasks else learning_rates[:1]:
                cell = f"{mixer}_{key}_lr{rate:g}"
                first_cell = first_cell or cell
                # One device: rows compare mixers, not sharding, and tiny models gain nothing from a mesh.
                summary = experiment.train_cell(cell, cell_config(experiment, model, task, rate),
                                                devices=jax.local_devices()[:1])
                results[rate] = float(summary[task.metric])
                speeds.append(throughput(experiment, cell))
            rate, value = best_rate(results, lower_is_better=task.lower_is_better)
            row[task.column] = round(value, 4)
            winners.append(f"{rate:g}")
        row["best lr"] = "/".join(winners)
        row["tokens/s"] = round(statistics.median(speeds))
        row["peak MiB"] = round(_stored_peak_bytes(experiment, first_cell, model) / 2**20, 1)
        rows.append(row)
    order = list(columns.values())
    rows.sort(key=lambda row: tuple(row[t.column] * (1 if t.lower_is_better else -1) for t in order))
    baseline = {"mixer": BASELINE, "d_model": None, "params": None, "best lr": None, "tokens/s": None,
                "peak MiB": None}
    guess = dict(baseline, mixer=NO_RECALL)
    shape = {"batch_size": budget.batch_size, "seq_len": budget.seq_len, "eval_batches": EVAL_BATCHES}
    for key, task in columns.items():
        baseline[task.column] = round(constant_baseline(task, **shape), 4)
        guess[task.column] = round(no_recall_baseline(task, **shape), 4) if key.startswith("mqar") else None
    baselines = [guess, baseline] if "mqar" in tasks else [baseline]
    table = ("mixer", "d_model", "params", *(task.column for task in order), "best lr", "tokens/s", "peak MiB")
    rates = ", ".join(f"{rate:g}" for rate in learning_rates)
    swept = ", ".join(sweep_tasks) or "no task"
    notes = [f"Parameter budget: the attention model at d_model {reference_width} ({target:,} parameters); "
             "each mixer at the multiple of 16 closest to it. One recipe for all (AdamW, 10% warmup, cosine); "
             f"cells of {swept} trained at learning rates {rates} and reported at the best, the other tasks' at "
             f"{learning_rates[0]:g}; best lr lists the rate per task column "
             f"({', '.join(t.column for t in order)}). Chunked mixers run in chunks of {row_chunk(budget.seq_len)} "
             "tokens (row_options: the row length, so no padded chunk work; the model is unchanged).",
             "MQAR and Dyck-2: accuracy (higher is better); bytes: bits per byte (lower is better). "
             f"The {BASELINE!r} row ignores the input: most frequent MQAR answer's share, byte unigram "
             f"bits/byte, majority Dyck-2 class share, on the same eval batches. The {NO_RECALL!r} row answers "
             "each MQAR query with a random value among the pairs not yet queried (elimination, no key-value "
             "binding): MQAR accuracy above it is recall. peak MiB: XLA's plan for one forward-backward of the "
             "first cell's model (Adam moments excluded)."]
    return experiment.write([*rows, *baselines], columns=table, title="Zoo leaderboard", notes=notes,
                            figures={"leaderboard": figure(rows, [t.column for t in order], baselines)},
                            extra={"learning_rates": list(learning_rates), "mqar_pairs": list(mqar_pairs),
                                   "sweep_tasks": list(sweep_tasks)})


def figure(rows: Sequence[dict], metrics: Sequence[str], baselines: Sequence[Mapping[str, Any]] = ()) -> Figure:
    """One horizontal bar panel per task metric column (each baseline row a vertical line where it has a value)
    and one for throughput, mixers on the y axis."""
    panels = [*metrics, "tokens/s"]
    fig = Figure(figsize=(3.2 * len(panels), 0.35 * len(rows) + 1.5), layout="constrained")
    names = [row["mixer"] for row in rows]
    styles = ({"color": "tab:red", "linestyle": "--"}, {"color": "tab:gray", "linestyle": ":"})
    axes = fig.subplots(1, len(panels), sharey=True)
    axes[0].invert_yaxis()  # Best row on top; the axes share y, so once (an even count of inversions cancels).
    for axis, column in zip(axes, panels, strict=True):
        axis.barh(names, [row[column] for row in rows], color="tab:blue")
        drawn = False
        for baseline, style in zip(baselines, itertools.cycle(styles), strict=False):
            if baseline.get(column) is not None:
                axis.axvline(baseline[column], linewidth=1.2, label=baseline["mixer"], **style)
                drawn = True
        if drawn:
            axis.legend(fontsize=7, loc="lower right")
        axis.set_title(column)
    return fig
