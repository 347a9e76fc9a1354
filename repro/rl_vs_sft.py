"""RL with process rewards vs SFT on k-sparse Boolean chains (Lyu, Jia, Cai, Zhu, arXiv 2511.17852).

The one-layer transformer (model "one_layer", preset `configs/boolean_sft.py`) learns k-PARITY of d bits along
its chain of thought under each objective mode of `zoo.losses.boolean_chain`: SFT with teacher forcing, SFT
without it (greedy free-running context) and REINFORCE with per-step rewards and a batch-mean baseline. As the
spec asks, every step draws a fresh batch of x (the support S stays fixed by the seed), so this loop feeds the
generator of `train.data.sparse_boolean` directly instead of a stored split; the objective is the registered
one, unchanged, and so are the presets' model and optimizer (the spec's Adam at a constant learning rate).
Every `eval_every` steps it records the greedy free-running accuracy of each chain step j on fixed held-out x,
the spec's acc_j(t) curves. Each (mode, seed) cell's history is stored under
``<run_dir>/cells/<mode>_seed<seed>/history.json`` and reused on a rerun with the same settings.

    python -m icml26zoo.repro rl_vs_sft [--smoke | --quick] --out DIR [modes=rl,free_running] [num_bits=16]
                                        [sparsity=3] [eval_every=100] [learning_rate=1e-4] [d_model=64]
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
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train.data.sparse_boolean import SparseBoolean, SparseBooleanOptions, chain_levels
from icml26zoo.train.optim import build_optimizer
from icml26zoo.validation import check_int, check_positive

MODES = ("teacher_forcing", "free_running", "rl")
NUM_BITS, SPARSITY = 16, 3
# seq_len is set by the task (d + k - 2 next-token positions); run() records the one it uses.
QUICK = Budget(steps=300, batch_size=256, seq_len=NUM_BITS + SPARSITY - 2)
# The spec's shortest budget (5k-20k steps); 600 and 3,000 steps left RL on a plateau.
FULL = Budget(steps=5000, batch_size=256, seq_len=NUM_BITS + SPARSITY - 2)
# The smallest run: one REINFORCE cell (the modes share every line of this loop and differ only in the
# objective, tests/zoo/test_boolean_chain.py), 3-PARITY of 4 bits, 2 steps of 8 examples, width 8, an evaluation
# at every step.
SMOKE = Budget(steps=2, batch_size=8, seq_len=4 + SPARSITY - 2)
SMOKE_ARGS = {"modes": ("rl",), "num_bits": 4, "eval_every": 1, "d_model": 8}
# The presets' width (MLP 4 x d_model).
D_MODEL = 64
# Learning rate per mode, as the presets (spec: Adam, 1e-3 for SFT, 1e-3 .. 1e-2 for RL).
LEARNING_RATES = {"teacher_forcing": 1e-3, "free_running": 1e-3, "rl": 1e-3}


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
    """`train_mode`'s history, stored as the cell `<mode>_seed<seed>` of the run directory and read back on a
    rerun; a stored cell trained with other settings is a ValueError (use another run directory)."""
    settings = {"mode": mode, "task": dataclasses.asdict(task), "seed": seed, "eval_every": eval_every,
                "learning_rate": learning_rate, "d_model": d_model, "budget": dataclasses.asdict(experiment.budget)}
    path = experiment.cell_dir(f"{mode}_seed{seed}") / "history.json"
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


def onset(steps: Sequence[int], accuracies: Sequence[float], threshold: float = 0.9) -> int | None:
    """The first evaluated step at which an accuracy curve reaches `threshold` (None if it never does)."""
    return next((step for step, acc in zip(steps, accuracies, strict=True) if acc >= threshold), None)


@register_experiment("rl_vs_sft", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/rl_vs_sft_boolean.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, modes: Sequence[str] = MODES, num_bits: int = NUM_BITS,
        sparsity: int = SPARSITY, eval_every: int = 100, learning_rate: float | None = None,
        d_model: int = D_MODEL, resume: bool = False) -> Results:
    """Trains each mode for each seed; writes per-step accuracy at the end, onsets and the acc_j(t) figure.
    learning_rate None is LEARNING_RATES[mode] for each mode; budget.seq_len is set by the task
    (num_bits + sparsity - 2 next-token positions).

    Bad input (an unknown mode, num_bits/sparsity out of range, eval_every or d_model < 1, a learning rate
    that is not positive) raises ValueError naming it.
    """
    modes = check_names("modes", modes, MODES)
    check_int("eval_every", eval_every)
    check_int("d_model", d_model)
    if learning_rate is not None:
        check_positive("learning_rate", learning_rate)
    task = SparseBooleanOptions(num_bits=num_bits, sparsity=sparsity)
    budget = dataclasses.replace(budget, seq_len=num_bits + sparsity - 2)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    levels = chain_levels(sparsity)
    rows, curves = [], {}
    for mode in modes:
        for seed in budget.seeds:
            rate = LEARNING_RATES[mode] if learning_rate is None else learning_rate
            history = cached_history(experiment, mode, task, seed=seed, eval_every=eval_every, learning_rate=rate,
                                     d_model=d_model)
            curves[(mode, seed)] = history
            final = history["step_accuracy"][-1]
            row = {"mode": mode, "seed": seed}
            for j, level in enumerate(levels):
                per_step = [acc[j] for acc in history["step_accuracy"]]
                row[f"acc z{j + 1} (level {level})"] = round(final[j], 3)
                row[f"onset z{j + 1}"] = onset(history["step"], per_step)
            rows.append(row)
    columns = ["mode", "seed", *[c for c in rows[0] if c.startswith("acc")], *[c for c in rows[0] if
                                                                                c.startswith("onset")]]
    notes = [f"{sparsity}-PARITY of {num_bits} bits; one_layer model; the presets' Adam; fresh batch each "
             "step. acc: greedy free-running accuracy of each chain step on 1024 held-out x; onset: first "
             "evaluated step with accuracy >= 0.9 (None: never)."]
    return experiment.write(rows, columns=columns, title="RL vs SFT on k-sparse Boolean chains", notes=notes,
                            figures={"boolean_chain_steps": figure(curves, levels)},
                            extra={"curves": {f"{m}_seed{s}": h for (m, s), h in curves.items()}})


def figure(curves: dict, levels: np.ndarray) -> Figure:
    """acc_j(t): one panel per mode, one line per chain step (seed of the first run)."""
    modes = list(dict.fromkeys(mode for mode, _ in curves))
    fig = Figure(figsize=(4 * len(modes), 3.2), layout="constrained")
    for axis, mode in zip(np.atleast_1d(fig.subplots(1, len(modes), sharey=True)), modes, strict=True):
        history = next(h for (m, _), h in curves.items() if m == mode)
        for j, level in enumerate(levels):
            axis.plot(history["step"], [acc[j] for acc in history["step_accuracy"]], label=f"z{j + 1} (level {level})")
        axis.set_title(mode)
        axis.set_xlabel("step")
        axis.set_ylim(0, 1.02)
    fig.axes[0].set_ylabel("free-running step accuracy")
    fig.axes[0].legend(loc="lower right")
    return fig
