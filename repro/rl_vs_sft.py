"""RL with process rewards vs SFT on k-sparse Boolean chains (Lyu, Jia, Cai, Zhu, arXiv 2511.17852).

The one-layer transformer (model "one_layer", preset `configs/boolean_sft.py`) learns k-PARITY of d bits along
its chain of thought under each objective mode of `zoo.losses.boolean_chain`: SFT with teacher forcing, SFT
without it (greedy free-running context) and REINFORCE with per-step rewards and a batch-mean baseline. As the
spec asks, every step draws a fresh batch of x (the support S stays fixed by the seed), so this loop feeds the
generator of `train.data.sparse_boolean` directly instead of a stored split; the objective is the registered
one, unchanged, and so are the presets' model and optimizer (the spec's Adam at a constant learning rate).
Every `eval_every` steps it records the greedy free-running accuracy of each chain step j on fixed held-out x,
the spec's acc_j(t) curves. Every mode trains at the same width and batch over the same learning-rate grid
(`learning_rates`), each (mode, rate) for every seed of the budget; the table gives, per (mode, rate), the mean
and the min..max over seeds of the final accuracy and the onsets, and marks each mode's best rate. Each
(mode, rate, seed) cell's history is stored under ``<run_dir>/cells/<mode>_lr<rate>_seed<seed>/history.json``
and reused on a rerun with the same settings.

    python -m icml26zoo.repro rl_vs_sft [--smoke | --quick] --out DIR [modes=free_running,rl] [num_bits=16]
                                        [sparsity=3] [eval_every=50] [learning_rates=1e-4,1e-3] [d_model=32]
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

import jax
import numpy as np
import optax
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.configs.boolean_sft import boolean_chain
from icml26zoo.losses.boolean_chain import BooleanChainOptions, boolean_chain_objective, step_correct
from icml26zoo.models import build_model
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, markdown_table
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train.data.sparse_boolean import SparseBoolean, SparseBooleanOptions, chain_levels
from icml26zoo.train.optim import build_optimizer
from icml26zoo.validation import check_int, check_positive

MODES = ("teacher_forcing", "free_running", "rl")
# The paper's contrast: SFT without teacher forcing against RL with process rewards (teacher forcing on request).
DEFAULT_MODES = ("free_running", "rl")
NUM_BITS, SPARSITY = 16, 3
# seq_len is set by the task (d + k - 2 next-token positions); run() records the one it uses.
QUICK = Budget(steps=300, batch_size=256, seq_len=NUM_BITS + SPARSITY - 2)
# 2,000 steps x 256 fresh x, three seeds, for every (mode, rate) of the grid: 12 cells at the defaults. The
# spec's 5k-20k steps do not fit the shared 2-core machine at three seeds x two rates x two modes (a cell of
# 2,000 steps took ~4.5 minutes there at load ~11, see docs/papers/rl_vs_sft_boolean.md); earlier single-seed runs saw
# free-running SFT finish both levels by step ~1,800.
FULL = Budget(steps=2000, batch_size=256, seq_len=NUM_BITS + SPARSITY - 2, seeds=(0, 1, 2))
# The smallest run: one REINFORCE cell at one rate (the modes share every line of this loop and differ only in the
# objective, tests/zoo/test_boolean_chain.py), 3-PARITY of 4 bits, 2 steps of 8 examples, width 8, an evaluation
# at every step.
SMOKE = Budget(steps=2, batch_size=8, seq_len=4 + SPARSITY - 2)
SMOKE_ARGS = {"modes": ("rl",), "num_bits": 4, "eval_every": 1, "d_model": 8, "learning_rates": (1e-3,)}
# One width for every mode (MLP 4 x d_model): the width of the earlier runs that learned in either mode
# (the presets' 64 costs ~2-3x more per step on this machine).
D_MODEL = 32
# The learning-rate grid every mode trains over (Adam, constant rate): the spec's SFT rate 1e-3 and the 10x
# smaller rate at which RL learned in an earlier single-seed run.
LEARNING_RATES = (1e-4, 1e-3)
# A chain step counts as learned from the first evaluation with accuracy >= ONSET.
ONSET = 0.9


def chain_batch(tokens: np.ndarray, options: SparseBooleanOptions) -> dict[str, np.ndarray]:
    """Examples [B, d + k - 1] as the trainer's next-token rows (one example per row, chain targets weighted)."""
    rows, length = tokens.shape[0], tokens.shape[1] - 1
    weights = np.broadcast_to(SparseBoolean.loss_weights(options)[1:], (rows, length)).astype(np.float32)
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": weights,
            "segment_ids": np.ones((rows, length), np.int32),
            "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length))}


def train_mode(mode: str, task: SparseBooleanOptions, *, budget: Budget, seed: int, eval_every: int,
               learning_rate: float, d_model: int, eval_rows: int = 1024) -> dict[str, list]:
    """Trains the spec-16 model (width d_model, MLP 4 x d_model) with objective mode `mode`; returns
    {"step": [...], "step_accuracy": [[acc_j]]}."""
    config = boolean_chain(mode, learning_rate, budget.steps)
    length = task.num_bits + task.sparsity - 2
    model = build_model(dataclasses.replace(config.model, max_seq_len=length, d_model=d_model, mlp_dim=4 * d_model,
                                            model_options=(("max_positions", length),)), rngs=nnx.Rngs(seed))
    graphdef, params = nnx.split(model, nnx.Param)
    # The trainer's optimizer for this config (the spec's constant-rate Adam), as the presets.
    optimizer = build_optimizer(config.optim, budget.steps)
    opt_state = optimizer.init(params)
    options = BooleanChainOptions(mode=mode)

    @jax.jit
    def update(params, opt_state, batch, key):
        def loss(p):
            return boolean_chain_objective(nnx.merge(graphdef, p), batch, key, options=options)[0]

        grads = jax.grad(loss)(params)
        # optax mixes Python floats and int32 step counts, as the trainer's own step allows.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

    @jax.jit
    def accuracy(params, batch):
        correct = step_correct(nnx.merge(graphdef, params), batch)
        return correct[:, task.num_bits - 1:].mean(axis=0)

    eval_tokens, _ = SparseBoolean.generate(task, eval_rows, np.random.SeedSequence([seed, 1]))
    eval_batch = chain_batch(eval_tokens, task)
    history = {"step": [], "step_accuracy": []}
    key = jax.random.key(seed)
    for step in range(budget.steps + 1):
        if step % eval_every == 0 or step == budget.steps:
            history["step"].append(step)
            history["step_accuracy"].append([float(a) for a in accuracy(params, eval_batch)])
        if step == budget.steps:
            break
        tokens, _ = SparseBoolean.generate(task, budget.batch_size, np.random.SeedSequence([seed, 2, step]))
        params, opt_state = update(params, opt_state, chain_batch(tokens, task), jax.random.fold_in(key, step))
    return history


def cached_history(experiment: Experiment, mode: str, task: SparseBooleanOptions, *, seed: int,
                   eval_every: int, learning_rate: float, d_model: int) -> dict[str, list]:
    """`train_mode`'s history, stored as the cell `<mode>_lr<rate>_seed<seed>` of the run directory and read
    back on a rerun; a stored cell trained with other settings is a ValueError (use another run directory)."""
    settings = {"mode": mode, "task": dataclasses.asdict(task), "seed": seed, "eval_every": eval_every,
                "learning_rate": learning_rate, "d_model": d_model, "budget": dataclasses.asdict(experiment.budget)}
    path = experiment.cell_dir(f"{mode}_lr{learning_rate:g}_seed{seed}") / "history.json"
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored["settings"] != json.loads(json.dumps(settings)):
            raise ValueError(f"cell {path.parent.name!r} in {str(experiment.run_dir)!r} was trained with other "
                             f"settings ({stored['settings']}); use a new run directory")
        return stored["history"]
    history = train_mode(mode, task, budget=experiment.budget, seed=seed, eval_every=eval_every,
                         learning_rate=learning_rate, d_model=d_model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": settings, "history": history}))
    return history


def onset(steps: Sequence[int], accuracies: Sequence[float], threshold: float = ONSET) -> int | None:
    """The first evaluated step at which an accuracy curve reaches `threshold` (None if it never does)."""
    return next((step for step, acc in zip(steps, accuracies, strict=True) if acc >= threshold), None)


def _stats(values: Sequence[float | None]) -> tuple[float | None, float | None, float | None]:
    """Mean, min and max of the values that are not None (all None when none is)."""
    known = [v for v in values if v is not None]
    if not known:
        return None, None, None
    return float(np.mean(known)), float(min(known)), float(max(known))


def _mean_range(values: Sequence[float | None], digits: int = 3) -> str:
    """'mean [min, max]' over seeds (a missing value, e.g. an onset never reached, is counted as '-')."""
    mean, low, high = _stats(values)
    missing = sum(v is None for v in values)
    if mean is None:
        return "-"
    text = f"{mean:.{digits}g}"
    if len(values) - missing > 1:
        text += f" [{low:.{digits}g}, {high:.{digits}g}]"
    return text + (f" ({missing} of {len(values)} never)" if missing else "")


def summary_rows(cells: Sequence[dict], levels: np.ndarray) -> list[dict]:
    """One row per (mode, rate): final accuracy and onset of each chain step, mean [min, max] over seeds; the
    number of seeds that learned the whole chain; the onset gap (last step's onset minus the first's); and
    `best` on each mode's rate with the highest mean final accuracy of the answer (ties: earlier mean onset)."""
    groups: dict[tuple[str, float], list[dict]] = {}
    for cell in cells:
        groups.setdefault((cell["mode"], cell["learning_rate"]), []).append(cell)
    rows = []
    last = len(levels)
    for (mode, rate), group in groups.items():
        row = {"mode": mode, "learning_rate": rate, "seeds": len(group)}
        for j, level in enumerate(levels):
            row[f"final z{j + 1} (level {level})"] = _mean_range([c[f"acc z{j + 1}"] for c in group])
        for j in range(last):
            row[f"onset z{j + 1}"] = _mean_range([c[f"onset z{j + 1}"] for c in group], digits=4)
        learned = sum(all(c[f"acc z{j + 1}"] >= ONSET for j in range(last)) for c in group)
        row["learned (all steps >= 0.9 at the end)"] = f"{learned} of {len(group)}"
        row[f"onset gap z{last} - z1 per seed"] = ", ".join(
            "-" if c[f"onset z{last}"] is None or c["onset z1"] is None else str(c[f"onset z{last}"] - c["onset z1"])
            for c in group)
        answer = _stats([c[f"acc z{last}"] for c in group])[0]
        onset_answer = _stats([c[f"onset z{last}"] for c in group])[0]
        row["_key"] = (answer, -(onset_answer if onset_answer is not None else float("inf")))
        rows.append(row)
    for mode in dict.fromkeys(r["mode"] for r in rows):
        best = max((r for r in rows if r["mode"] == mode), key=lambda r: r["_key"])
        for r in rows:
            if r["mode"] == mode:
                r["best"] = "best" if r is best else ""
    for r in rows:
        del r["_key"]
    return rows


@register_experiment("rl_vs_sft", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/rl_vs_sft_boolean.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, modes: Sequence[str] = DEFAULT_MODES,
        num_bits: int = NUM_BITS, sparsity: int = SPARSITY, eval_every: int = 50,
        learning_rates: Sequence[float] = LEARNING_RATES, d_model: int = D_MODEL, resume: bool = False) -> Results:
    """Trains each mode at every learning rate of the grid for each seed, all at width d_model and the budget's
    batch; writes the per-(mode, rate) summary over seeds, the per-seed table, onsets and the acc_j(t) figure.
    budget.seq_len is set by the task (num_bits + sparsity - 2 next-token positions).

    Bad input (an unknown mode, num_bits/sparsity out of range, eval_every or d_model < 1, an empty or repeated
    learning-rate grid or a rate that is not positive) raises ValueError naming it.
    """
    modes = check_names("modes", modes, MODES)
    check_int("eval_every", eval_every)
    check_int("d_model", d_model)
    learning_rates = tuple(learning_rates)
    if not learning_rates:
        raise ValueError("learning_rates must hold at least one rate, got none")
    for rate in learning_rates:
        check_positive("learning_rates", rate)
    if len(set(learning_rates)) != len(learning_rates):
        raise ValueError(f"learning_rates must not repeat a rate, got {list(learning_rates)}")
    task = SparseBooleanOptions(num_bits=num_bits, sparsity=sparsity)
    budget = dataclasses.replace(budget, seq_len=num_bits + sparsity - 2)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    levels = chain_levels(sparsity)
    cells, curves = [], {}
    for mode in modes:
        for rate in learning_rates:
            for seed in budget.seeds:
                history = cached_history(experiment, mode, task, seed=seed, eval_every=eval_every,
                                         learning_rate=rate, d_model=d_model)
                curves[(mode, rate, seed)] = history
                final = history["step_accuracy"][-1]
                cell = {"mode": mode, "learning_rate": rate, "seed": seed}
                for j in range(len(levels)):
                    cell[f"acc z{j + 1}"] = round(final[j], 3)
                for j in range(len(levels)):
                    cell[f"onset z{j + 1}"] = onset(history["step"], [acc[j] for acc in history["step_accuracy"]])
                cells.append(cell)
    rows = summary_rows(cells, levels)
    columns = list(rows[0])
    notes = [f"{sparsity}-PARITY of {num_bits} bits; one_layer model of width {d_model} (MLP 4 x width) in every "
             f"mode; Adam at a constant rate, the grid {list(learning_rates)} for every mode; "
             f"{budget.batch_size} fresh x per step. final: greedy free-running accuracy of each chain step on "
             f"1024 held-out x after the last step, mean [min, max] over seeds; onset: first evaluated step (every "
             f"{eval_every}) with accuracy >= {ONSET}, mean [min, max] over the seeds that reached it; best: each "
             "mode's rate with the highest mean final accuracy of the answer.", "", "Per seed:", "",
             *markdown_table(cells, list(cells[0])), "", "Over seeds:"]
    return experiment.write(rows, columns=columns, title="RL vs SFT on k-sparse Boolean chains", notes=notes,
                            figures={"boolean_chain_steps": figure(curves, levels)},
                            extra={"cells": cells,
                                   "curves": {f"{m}_lr{r:g}_seed{s}": h for (m, r, s), h in curves.items()}})


def figure(curves: dict, levels: np.ndarray) -> Figure:
    """acc_j(t): one panel per (mode, rate), one line per chain step: the mean over seeds, shaded min..max."""
    panels = list(dict.fromkeys((mode, rate) for mode, rate, _ in curves))
    fig = Figure(figsize=(3.6 * len(panels), 3.2), layout="constrained")
    for axis, (mode, rate) in zip(np.atleast_1d(fig.subplots(1, len(panels), sharey=True)), panels, strict=True):
        histories = [h for (m, r, _), h in curves.items() if (m, r) == (mode, rate)]
        steps = histories[0]["step"]
        for j, level in enumerate(levels):
            values = np.array([[acc[j] for acc in h["step_accuracy"]] for h in histories])
            line, = axis.plot(steps, values.mean(axis=0), label=f"z{j + 1} (level {level})")
            axis.fill_between(steps, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
        axis.set_title(f"{mode}, lr {rate:g} ({len(histories)} seeds)", fontsize=9)
        axis.set_xlabel("step")
        axis.set_ylim(0, 1.02)
    fig.axes[0].set_ylabel("free-running step accuracy")
    fig.axes[0].legend(loc="lower right")
    return fig
