"""Reproduction: SAM with a Polyak-type step size, untuned, against plain SAM with a tuned learning rate.

Paper: Oikonomou, Loizou, "Adaptive Sharpness-Aware Minimization with a Polyak-type Step size: A
Theory-Grounded Scheduler" (ICML 2026, arXiv 2606.01827). See docs/papers/sam_polyak.md.

The claim tested: SAM-Polyak's step γ_t = min{[f_S(e) − ℓ* − ⟨g, e − θ⟩]_+ / (c‖g‖²), γ_b} needs no learning
rate tuning, while plain SAM (θ ← θ − η ∇f_S(e)) needs η tuned. Both share the same perturbation
e = θ + ρ ∇f_S(θ)/‖∇f_S(θ)‖ (`icml26zoo.optim.sam.sam_polyak_grads`) and train through the shared trainer's
update hook (`optim.name="sam_polyak"` / `"sam"`). The task is the zoo's synthetic `topics` sequence
classification (4 classes, chance 25%; rows of `budget.seq_len + 1` tokens) with the tiny 2-layer attention
classifier (`train.presets.tiny_classifier`). SAM-Polyak runs once per seed with ℓ* = 0, c = 1 and the cap
γ_b = `polyak_cap` (not tuned: the spec's middle value 1); SAM runs once per learning rate of
`sam_learning_rates` and seed, and the learning rate with the lowest mean final eval loss is the tuned one.
Since the trainer logs the schedule (the cap), not the Polyak step itself, each trained SAM-Polyak cell is
reopened and its uncapped step γ measured on `probe_batches` fresh training minibatches: whether the cap still
binds at the end of training, or γ has become the smaller, adaptive value.
Both use a constant schedule (no warmup, no decay: the schedule is the cap for SAM-Polyak), no weight decay,
no gradient clipping (clipping would change g inside the Polyak ratio) and no momentum.

Example::

    from icml26zoo import repro
    results = repro.run("sam_polyak", "runs/sam_polyak", budget="quick")
    print(results.markdown)

From a shell: `python -m icml26zoo.repro sam_polyak [--smoke | --quick] --out DIR [sam_learning_rates=0.03,0.1,0.3]
[polyak_cap=10] [rho=0.1] [optimizers=sam_polyak,sam] [probe_batches=8]`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import statistics
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.optim.sam import sam_polyak_grads, scale_by_sam_polyak
from icml26zoo.registry import OBJECTIVES
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train import load_run
from icml26zoo.train.config import OptimConfig, TrainConfig
from icml26zoo.train.data import make_train_iterator
from icml26zoo.train.presets import tiny_classifier
from icml26zoo.train.step import objective_loss
from icml26zoo.validation import check_int, check_non_negative, check_positive

__all__ = ["FULL", "OPTIMIZERS", "QUICK", "QUICK_ARGS", "SAM_LEARNING_RATES", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=20, batch_size=8, seq_len=32, seeds=(0,))
FULL = Budget(steps=150, batch_size=16, seq_len=64, seeds=(0, 1))
# What the QUICK run (the notebook, `--quick`) runs: one SAM-Polyak and one SAM cell, the whole pipeline
# rather than a sweep (each cell compiles its two-pass step, several CPU-seconds on its own).
QUICK_ARGS = {"sam_learning_rates": (0.1,), "probe_batches": 2}
# The smallest run: one SAM-Polyak cell and its probe (a plain SAM cell is the same trainer path with the other
# optimizer, which tests/repro/test_repro_sam_polyak.py checks step by step), 2 steps of 8 rows of 9 tokens
# (fewer rows only add batches to the final eval of the 256 eval examples), one probe minibatch.
SMOKE = Budget(steps=2, batch_size=8, seq_len=8, seeds=(0,))
SMOKE_ARGS = {"optimizers": ("sam_polyak",), "probe_batches": 1}
OPTIMIZERS = ("sam_polyak", "sam")
# Plain SAM's sweep: half-decades around the tiny classifier's stable SGD range (1.0 diverges).
SAM_LEARNING_RATES = (0.01, 0.03, 0.1, 0.3, 1.0)
# The final train loss is the mean of the logged losses over this last fraction of training (less noisy than
# the last minibatch).
FINAL_FRACTION = 0.2


@register_experiment("sam_polyak", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/sam_polyak.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, optimizers: Sequence[str] = OPTIMIZERS,
        sam_learning_rates: Sequence[float] = SAM_LEARNING_RATES, polyak_cap: float = 1.0, rho: float = 0.05,
        probe_batches: int = 8, resume: bool = False) -> Results:
    """Trains SAM-Polyak (untuned) and SAM at every learning rate, per seed, and writes the comparison.

    Args:
      run_dir: the experiment's directory (cells, the topics dataset, results.md/json, loss_curves.png,
        lr_sweep.png: SAM's final eval loss against its learning rate, SAM-Polyak's as a dashed line).
      budget: steps, batch size, row length T (the topics rows have T + 1 tokens) and seeds of every cell.
      optimizers: from OPTIMIZERS: "sam_polyak" and/or "sam".
      sam_learning_rates: plain SAM's learning rates η (finite, > 0, distinct), one cell each per seed.
      polyak_cap: SAM-Polyak's step cap γ_b (finite, > 0); the method's only step-size setting, not tuned.
      rho: the SAM radius ρ >= 0 shared by both optimizers.
      probe_batches: training minibatches (>= 1) on which each trained SAM-Polyak cell's uncapped step is
        measured.
      resume: require run_dir to exist (an interrupted experiment); finished cells are reused either way.
    """
    optimizers = check_names("optimizers", optimizers, OPTIMIZERS)
    learning_rates = _check_learning_rates(sam_learning_rates) if "sam" in optimizers else ()
    check_positive("polyak_cap (the Polyak step cap γ_b)", polyak_cap, finite=True)
    check_non_negative("rho (the SAM radius)", rho, finite=True)
    check_int("probe_batches", probe_batches)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    base = _base_config(experiment)
    methods = ([("sam_polyak", polyak_cap)] if "sam_polyak" in optimizers else [])
    methods += [("sam", lr) for lr in learning_rates]
    devices = jax.devices()[:1]  # tiny models; batches need not divide a (possibly simulated) device count
    outcomes = {}
    for name, lr in methods:
        per_seed = []
        for seed in budget.seeds:
            cell = _cell_name(name, lr, seed)
            config = experiment.cell_config(_method_config(base, name, lr, rho), seed=seed)
            summary = dict(experiment.train_cell(cell, config, devices=devices))
            if name == "sam_polyak":
                summary["polyak_steps"] = _probed_steps(experiment.cell_dir(cell), rho=rho, batches=probe_batches,
                                                        devices=devices)
            per_seed.append((summary, experiment.metrics(cell, "train/loss")))
        outcomes[(name, lr)] = per_seed
    best = _tuned(outcomes)
    rows = [_row(name, lr, per_seed, best) for (name, lr), per_seed in outcomes.items()]
    figures = {"loss_curves": _loss_figure(outcomes, best), "lr_sweep": _sweep_figure(outcomes)}
    return experiment.write(
        rows, columns=("optimizer", "step_size", "tuned", "final_train_loss", "eval_loss", "eval_loss_spread",
                       "eval_accuracy", "polyak_step_end", "capped_end"),
        title="SAM-Polyak (untuned) vs SAM (learning-rate sweep) on topics classification",
        notes=_notes(budget, rho, polyak_cap), figures=figures,
        extra={"per_seed": {f"{name}@{lr:g}": [_seed_record(s, c) for s, c in per_seed]
                            for (name, lr), per_seed in outcomes.items()},
               "tuned_sam_learning_rate": None if best is None else best[1], "rho": rho, "polyak_cap": polyak_cap})


def final_polyak_steps(cell_dir: str | os.PathLike, *, rho: float, batches: int, f_min: float = 0.0,
                       c: float = 1.0, devices: list | None = None) -> list[float]:
    """The uncapped SAM-Polyak step γ = [f_S(e) − f_min − ⟨g, e − θ⟩]_+ / (c‖g‖²) of a trained cell's final
    parameters on each of `batches` training minibatches (the cell's batch size; an order of its own seed).

    Uses the zoo's own two passes and Polyak scaling with an infinite cap, on the cell's objective."""
    config, model, state = load_run(cell_dir, devices=devices)
    graphdef, _ = nnx.split(model, nnx.Param)
    loss_fn = objective_loss(graphdef, OBJECTIVES.get(config.objective), jax.random.key(config.seed))
    scale = scale_by_sam_polyak(f_min=f_min, max_learning_rate=jnp.inf, c=c)
    params = jax.device_get(state.params)

    @jax.jit
    def step_size(batch: dict) -> jax.Array:
        two_pass = sam_polyak_grads(loss_fn, params, batch, rho)
        with jax.numpy_dtype_promotion("standard"):
            scaled, _ = scale.update(two_pass.grad, scale.init(params), value=two_pass.value,
                                     perturbation=two_pass.perturbation)
        return optax.tree.norm(scaled) / jnp.maximum(optax.tree.norm(two_pass.grad), 1e-30)

    # A different order from training's (seed + 1_000_003): minibatches the final parameters were not fit on last.
    iterator = make_train_iterator(config.data, batch_size=config.batch_size, seq_len=config.seq_len,
                                   seed=config.seed + 1_000_003)
    return [float(step_size({k: jnp.asarray(v) for k, v in next(iterator).items()})) for _ in range(batches)]


def _probed_steps(cell_dir: pathlib.Path, *, rho: float, batches: int, devices: list) -> list[float]:
    """`final_polyak_steps` of a trained cell, stored in the cell (polyak_steps.json) and read back on a rerun
    with the same probe settings (a cell is retrained only in a new run directory, so its final parameters and
    the probe's minibatches are fixed)."""
    path = cell_dir / "polyak_steps.json"
    settings = {"rho": rho, "batches": batches}
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored.get("settings") == settings:
            return stored["steps"]
    steps = final_polyak_steps(cell_dir, rho=rho, batches=batches, devices=devices)
    path.write_text(json.dumps({"settings": settings, "steps": steps}) + "\n")
    return steps


def _check_learning_rates(learning_rates: Sequence[float]) -> tuple[float, ...]:
    values = tuple(learning_rates)
    if not values:
        raise ValueError("sam_learning_rates must hold at least one learning rate > 0, got none")
    for value in values:
        check_positive("sam_learning_rates[i]", value, finite=True)
    if len(set(values)) != len(values):
        raise ValueError(f"sam_learning_rates must not repeat a value, got {list(values)}")
    return tuple(float(v) for v in values)


def _base_config(experiment: Experiment) -> TrainConfig:
    """The tiny attention classifier on topics rows of T + 1 tokens (T = budget.seq_len), the dataset under
    the run directory, a final eval over the whole eval split (256 rows) and ~30 logged points."""
    config = tiny_classifier("attention")
    seq_len, steps = experiment.budget.seq_len, experiment.budget.steps
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "tfds"), topics_length=seq_len + 1)
    model = dataclasses.replace(config.model, max_seq_len=seq_len)
    return dataclasses.replace(config, data=data, model=model, eval_every=0, eval_batches=0,
                               log_every=max(1, steps // 30))


def _method_config(base: TrainConfig, name: str, lr: float, rho: float) -> TrainConfig:
    """`base` with optimizer `name` at constant step size `lr` (SAM's η or SAM-Polyak's cap γ_b), radius rho,
    and nothing else that would blur the comparison: no warmup or decay, no weight decay, no clipping."""
    optim = OptimConfig(name=name, learning_rate=lr, warmup_steps=0, end_lr_fraction=1.0, weight_decay=0.0,
                        grad_clip_norm=0.0, options=(("rho", rho),))
    return dataclasses.replace(base, optim=optim)


def _cell_name(name: str, lr: float, seed: int) -> str:
    return f"{name}_{'cap' if name == 'sam_polyak' else 'lr'}{lr:g}_seed{seed}"


def _final_train_loss(curve: tuple[list[int], list[float]]) -> float:
    """Mean logged train loss over the last FINAL_FRACTION of the run (NaN if nothing finite was logged)."""
    steps, losses = curve
    if not losses:
        return math.nan
    start = steps[-1] * (1 - FINAL_FRACTION)
    return statistics.fmean(v for s, v in zip(steps, losses, strict=True) if s >= start)


def _seed_record(summary: dict, curve: tuple[list[int], list[float]]) -> dict:
    record = {"eval_loss": float(summary.get("eval/loss", math.nan)),
              "eval_accuracy": float(summary.get("eval/accuracy", math.nan)),
              "final_train_loss": _final_train_loss(curve)}
    if "polyak_steps" in summary:
        record["polyak_steps"] = summary["polyak_steps"]
    return record


def _mean_of(per_seed: list, key: str) -> float:
    return statistics.fmean(_seed_record(s, c)[key] for s, c in per_seed)


def _tuned(outcomes: dict) -> tuple[str, float] | None:
    """The SAM cell (name, lr) with the lowest mean final eval loss; a non-finite loss never wins."""
    scored = [(_mean_of(per_seed, "eval_loss"), key) for key, per_seed in outcomes.items() if key[0] == "sam"]
    scored = [(loss, key) for loss, key in scored if math.isfinite(loss)]
    return min(scored)[1] if scored else None


def _row(name: str, lr: float, per_seed: list, best: tuple[str, float] | None) -> dict:
    losses = [_seed_record(s, c)["eval_loss"] for s, c in per_seed]
    steps = [gamma for summary, _ in per_seed for gamma in summary.get("polyak_steps", [])]
    return {
        "optimizer": "SAM-Polyak" if name == "sam_polyak" else "SAM",
        "step_size": f"Polyak, cap {lr:g}" if name == "sam_polyak" else f"lr {lr:g}",
        "tuned": "untuned" if name == "sam_polyak" else ("best of sweep" if (name, lr) == best else ""),
        "final_train_loss": _mean_of(per_seed, "final_train_loss"),
        "eval_loss": statistics.fmean(losses),
        "eval_loss_spread": (max(losses) - min(losses)) / 2 if len(losses) > 1 else None,
        "eval_accuracy": _mean_of(per_seed, "eval_accuracy"),
        "polyak_step_end": float(np.median(steps)) if steps else None,
        "capped_end": statistics.fmean(gamma >= lr for gamma in steps) if steps else None,
    }


def _mean_curve(per_seed: list) -> tuple[list[int], list[float]]:
    """The seed-mean train-loss curve over the steps every seed logged."""
    curves = [dict(zip(*curve, strict=True)) for _, curve in per_seed]
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    return steps, [statistics.fmean(c[s] for c in curves) for s in steps]


def _loss_figure(outcomes: dict, best: tuple[str, float] | None):
    series = {}
    for (name, lr), per_seed in outcomes.items():
        label = (f"SAM-Polyak (cap {lr:g}, untuned)" if name == "sam_polyak"
                 else f"SAM lr {lr:g}" + (" (tuned)" if (name, lr) == best else ""))
        series[label] = _mean_curve(per_seed)
    figure = line_figure(series, xlabel="step", ylabel="train loss (mean over seeds)", logy=True, markers=False,
                         title="Training loss: SAM-Polyak vs SAM at each learning rate")
    axes = figure.axes[0]
    for line in axes.get_lines():
        if line.get_label().startswith("SAM-Polyak"):
            line.set(linewidth=2.5, color="black")
    firsts = [ys[0] for _, ys in series.values() if ys]
    lows = [min(ys) for _, ys in series.values() if ys]
    if firsts:
        # A diverging learning rate would stretch the axis over many decades; keep the useful range in view.
        axes.set_ylim(min(lows) / 1.5, 3 * statistics.median(firsts))
    axes.legend(fontsize=8)
    return figure


def _sweep_figure(outcomes: dict):
    sam = sorted((lr, per_seed) for (name, lr), per_seed in outcomes.items() if name == "sam")
    lrs = [lr for lr, _ in sam]
    # Without SAM cells (optimizers=sam_polyak) the figure holds SAM-Polyak's line alone, on a linear x axis.
    series = {"SAM (final eval loss)": (lrs, [_mean_of(p, "eval_loss") for _, p in sam])} if sam else {}
    hlines = {f"SAM-Polyak cap {lr:g} (untuned)": _mean_of(p, "eval_loss")
              for (name, lr), p in outcomes.items() if name == "sam_polyak"}
    finite = [v for _, ys in series.values() for v in ys if np.isfinite(v)]
    finite += [v for v in hlines.values() if np.isfinite(v)]
    figure = line_figure(series, xlabel="SAM learning rate", ylabel="final eval loss (mean over seeds)",
                         title="SAM's learning-rate sweep against one untuned SAM-Polyak run", logx=bool(sam),
                         logy=True, hlines=hlines)
    if finite:
        figure.axes[0].set_ylim(min(finite) / 1.5, max(finite) * 1.5)
    return figure


def _notes(budget: Budget, rho: float, polyak_cap: float) -> list[str]:
    return [
        f"Task: zoo `topics` classification (4 classes, chance 0.25, rows of {budget.seq_len + 1} tokens, 4096 "
        f"train / 256 eval examples); model: the tiny 2-layer attention classifier (d_model 64).",
        f"Both optimizers: SAM perturbation radius rho = {rho:g}, constant step-size schedule, no momentum, "
        f"weight decay or gradient clipping. SAM-Polyak: f* = 0, c = 1, cap {polyak_cap:g} (not tuned).",
        "final_train_loss: mean logged train loss over the last 20% of steps; eval_loss / eval_accuracy: final "
        "eval over the whole eval split; eval_loss_spread: half the range over seeds. The tuned SAM learning "
        "rate is the one with the lowest mean eval loss (the eval split doubles as the selection set).",
        "polyak_step_end: median uncapped Polyak step of the trained SAM-Polyak model over fresh training "
        "minibatches (all seeds); capped_end: the fraction of those minibatches where it reaches the cap.",
    ]
