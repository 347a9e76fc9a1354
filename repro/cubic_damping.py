"""Reproduction: mSGD vs cubic-damped SGD vs Adam vs cubic-damped Adam (and the adaptive-friction heavy ball).

Paper: Karoni, Rajpal, Leimkuhler, Stoltz, "Adaptive Momentum and Nonlinear Damping for Neural Network
Training" (ICML 2026, arXiv 2602.00334); the zoo's optimizers are reconstructions from its abstract and the
spec (`icml26zoo.optim.cubic_damping`, docs/papers/cubic_damping.md).

Two settings, every method with learning rates and damping coefficients fixed by rule before any run
(`cubic_damping_parts`; nothing is tuned per method):

- test problems (pure JAX, constant learning rate, `problem_steps` steps, one run per seed): a rotated
  quadratic with eigenvalues in [1/condition, 1] at η λ_max = 3 (past gradient descent's edge, inside the
  heavy ball's), the same with N(0, noise²) gradient noise, and Rosenbrock from (−1.2, 1);
- a tiny GPT (the 2-layer tiny llama preset at width `d_model`) on the byte corpus through the shared
  trainer (warmup-cosine schedule, gradient clipping at global norm 1, no weight decay), `budget` steps per
  cell, final eval bits/byte.

Example::

    from icml26zoo import repro
    results = repro.run("cubic_damping", "runs/cubic_damping", budget="quick")   # QUICK with QUICK_ARGS
    print(results.markdown)
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.repro import cubic_damping_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, parameter_count
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.presets import tiny_byte_lm
from icml26zoo.validation import check_int, check_interval, check_positive, check_unit_interval

__all__ = ["FULL", "METHODS", "PROBLEMS", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

METHODS = tuple(parts.METHODS)
PROBLEMS = parts.PROBLEMS
QUICK = Budget(steps=12, batch_size=4, seq_len=32, seeds=(0,))
FULL = Budget(steps=300, batch_size=8, seq_len=64, seeds=(0, 1))
# The QUICK run (notebook, `--quick`): a trainer cell costs ~10 CPU-seconds of compilation, so the tiny GPT
# compares only the two heavy-ball methods; the problems run every method, for fewer steps.
QUICK_ARGS = {"gpt_methods": ("msgd", "cd_sgd"), "problem_steps": 400, "d_model": 32}
# SMOKE: every method on the noisy quadratic for 20 steps, one CD-SGD GPT cell of 2 steps at width 16.
SMOKE = Budget(steps=2, batch_size=2, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"problems": ("noisy_quadratic",), "gpt_methods": ("cd_sgd",), "problem_steps": 20, "dim": 4,
              "d_model": 16}
METRIC = "eval/bits_per_byte"


@register_experiment("cubic_damping", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/cubic_damping.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, methods: Sequence[str] = METHODS,
        gpt_methods: Sequence[str] | None = None, problems: Sequence[str] = PROBLEMS, problem_steps: int = 3000,
        dim: int = 32, condition: float = 1e4, noise: float = 0.3, damping_multiple: float = 3.0,
        momentum: float = 0.9, gpt_sgd_lr: float = 0.3, gpt_adam_lr: float = 3e-3, d_model: int = 64,
        resume: bool = False) -> Results:
    """Runs every method on the test problems and trains the tiny GPT once per (method, seed); writes the table
    (results.md/json) and the figures `problems.png` and `gpt_loss.png` (when the GPT runs) into run_dir.

    Args:
      run_dir: the experiment's directory (GPT cells, datasets, results, figures).
      budget: the GPT cells' steps, batch size and sequence length; its seeds are also the problems' seeds.
      methods: names from `METHODS` run on the test problems ("msgd", "cd_sgd", "adam", "cd_adam", "af_sgd").
      gpt_methods: the methods trained on the GPT (None: the same as `methods`; (): no GPT).
      problems: names from `PROBLEMS` ("quadratic", "noisy_quadratic", "rosenbrock"); () skips them.
      problem_steps: constant-learning-rate steps per problem run.
      dim: the quadratics' dimension (>= 2).
      condition: the quadratics' condition number λ_max / λ_min (>= 1).
      noise: gradient noise std of `noisy_quadratic` (> 0).
      damping_multiple: k in v_ref = k · rms(start gradient), the one scale of every damping coefficient (> 0).
      momentum: the heavy-ball momentum μ of the SGD methods, and Adam's β1 (in [0, 1)).
      gpt_sgd_lr, gpt_adam_lr: peak learning rates of the GPT's SGD and Adam families (> 0).
      d_model: the GPT's width (a multiple of 8).
      resume: require run_dir to exist; finished GPT cells and problem runs are reused either way.
    """
    methods = check_names("methods", methods, METHODS)
    gpt_methods = methods if gpt_methods is None else (check_names("gpt_methods", gpt_methods, METHODS)
                                                       if tuple(gpt_methods) else ())
    problems = check_names("problems", problems, PROBLEMS) if tuple(problems) else ()
    if not problems and not gpt_methods:
        raise ValueError("problems and gpt_methods are both empty: there is nothing to run")
    _check_args(problem_steps, dim, condition, noise, damping_multiple, momentum, gpt_sgd_lr, gpt_adam_lr, d_model)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    rows, figures, extra = [], {}, {"per_seed": {}, "options": {}}
    curves: dict[str, dict[str, np.ndarray]] = {}
    for name in problems:
        problem = parts.make_problem(name, budget.seeds, dim=dim, condition=condition, noise=noise)
        curves[name] = {}
        for method in methods:
            options = parts.method_options(method, g_rms=problem.g_rms, damping_multiple=damping_multiple,
                                           momentum=momentum)
            lr = problem.learning_rates[0 if method in parts.SGD_FAMILY else 1]
            # Each run's loss curves are kept under cells/ (keyed by what they depend on): --resume reuses them.
            key = {"seeds": list(budget.seeds), "dim": dim, "condition": condition, "noise": noise, "lr": lr,
                   "options": options, "momentum": momentum, "steps": problem_steps}
            losses = np.asarray(stored(
                experiment.run_dir / "cells" / f"problem_{name}_{method}.json", key,
                lambda problem=problem, method=method, lr=lr, options=options: parts.problem_losses(
                    problem, parts.transform(method, lr, options, momentum=momentum), problem_steps)))
            curves[name][method] = losses
            rows.append(_row(name, method, lr, options, "final loss", losses[:, -1].tolist()))
            extra["per_seed"][f"{name}/{method}"] = losses[:, -1].tolist()
    if curves:
        figures["problems"] = _problem_figure(curves)
    if gpt_methods:
        gpt_rows, gpt_curves = _train_gpt(experiment, gpt_methods, d_model=d_model, momentum=momentum,
                                          damping_multiple=damping_multiple, sgd_lr=gpt_sgd_lr, adam_lr=gpt_adam_lr)
        rows += gpt_rows
        figures["gpt_loss"] = _gpt_figure(gpt_curves)
    return experiment.write(rows, columns=("task", "method", "lr", "options", "metric", "mean", "min", "max"),
                            title="Cubic damping: mSGD, CD-SGD, AF-SGD, Adam, CD-Adam",
                            notes=_notes(budget, problem_steps, dim, condition, noise, damping_multiple, d_model),
                            figures=figures, extra=extra)


def _check_args(problem_steps: int, dim: int, condition: float, noise: float, damping_multiple: float,
                momentum: float, gpt_sgd_lr: float, gpt_adam_lr: float, d_model: int) -> None:
    check_int("problem_steps", problem_steps)
    check_int("dim", dim, minimum=2)
    check_interval("condition (λ_max / λ_min)", condition, 1, math.inf, closed="left")
    check_positive("noise (gradient noise std)", noise, finite=True)
    check_positive("damping_multiple", damping_multiple, finite=True)
    check_unit_interval("momentum", momentum)
    check_positive("gpt_sgd_lr", gpt_sgd_lr, finite=True)
    check_positive("gpt_adam_lr", gpt_adam_lr, finite=True)
    check_int("d_model", d_model, minimum=8)
    if d_model % 8:
        raise ValueError(f"d_model must be a multiple of 8 (4 heads of an even width), got {d_model}")


def _row(task: str, method: str, lr: float, options: Mapping[str, float], metric: str,
         values: Sequence[float]) -> dict:
    finite = all(math.isfinite(v) for v in values)
    return {"task": task, "method": parts.LABELS[method], "lr": lr,
            "options": ", ".join(f"{k}={v:.3g}" for k, v in options.items()) or "-", "metric": metric,
            "mean": statistics.fmean(values) if finite else math.inf, "min": min(values), "max": max(values)}


def gpt_config(experiment: Experiment, method: str, *, d_model: int, momentum: float, damping_multiple: float,
               sgd_lr: float, adam_lr: float, seed: int) -> TrainConfig:
    """The GPT cell of `method`: the tiny byte-LM preset at width `d_model`, data under the run directory,
    no weight decay, Adam β2 0.999, the method's options from v_ref = k / √N (N parameters: at the start the
    gradient is clipped to global norm 1, so its rms is about 1 / √N)."""
    base = tiny_byte_lm("attention")
    model = dataclasses.replace(base.model, d_model=d_model)
    g_rms = 1.0 / math.sqrt(parameter_count(model))
    options = parts.method_options(method, g_rms=g_rms, damping_multiple=damping_multiple, momentum=momentum)
    budget = experiment.budget
    optim = dataclasses.replace(base.optim, name=parts.METHODS[method], b1=momentum, b2=0.999, weight_decay=0.0,
                                learning_rate=sgd_lr if method in parts.SGD_FAMILY else adam_lr,
                                warmup_steps=max(1, budget.steps // 10), options=tuple(options.items()))
    data = dataclasses.replace(base.data, data_dir=str(experiment.run_dir / "tfds"))
    config = dataclasses.replace(base, model=model, data=data, optim=optim, log_every=max(1, budget.steps // 30),
                                 eval_every=0, eval_batches=4)
    return experiment.cell_config(config, seed=seed, checkpoints=1 if budget.steps <= 50 else 2)


def _train_gpt(experiment: Experiment, methods: Sequence[str], **settings: float) -> tuple[list[dict], dict]:
    """Trains (method, seed) cells on one device; rows of final eval bits/byte and the train-loss curves."""
    devices = jax.devices()[:1]  # tiny models; batches need not divide a (possibly virtual) device count
    rows, curves = [], {}
    for method in methods:
        finals = []
        for seed in experiment.budget.seeds:
            config = gpt_config(experiment, method, seed=seed, **settings)
            cell = f"gpt_{method}_seed{seed}"
            finals.append(float(experiment.train_cell(cell, config, devices=devices)[METRIC]))
            curves.setdefault(method, []).append(experiment.metrics(cell, "train/loss"))
        rows.append(_row("gpt (byte corpus)", method, config.optim.learning_rate, dict(config.optim.options),
                         "eval bits/byte", finals))
    return rows, curves


def _problem_figure(curves: Mapping[str, Mapping[str, np.ndarray]]) -> Figure:
    """One panel per problem: loss vs step (log scale), the median over seeds per method, min-max shaded."""
    figure = Figure(figsize=(4.0 * len(curves), 3.6), layout="constrained")
    axes = figure.subplots(1, len(curves), squeeze=False)[0]
    for panel, (name, by_method) in zip(axes, curves.items(), strict=True):
        for method, losses in by_method.items():
            floor = np.maximum(losses, 1e-30)  # exact zeros on a log axis
            steps = np.arange(losses.shape[1])
            line, = panel.plot(steps, np.median(floor, axis=0), linewidth=1.2, label=parts.LABELS[method])
            if losses.shape[0] > 1:
                panel.fill_between(steps, floor.min(axis=0), floor.max(axis=0), color=line.get_color(), alpha=0.15)
        panel.set(yscale="log", xlabel="step", ylabel="loss", title=name)
        panel.grid(True, alpha=0.3)
        panel.legend(fontsize=7)
    return figure


def _gpt_figure(curves: Mapping[str, list[tuple[list[int], list[float]]]]) -> Figure:
    """Train loss vs step of the GPT cells, the mean over seeds per method (steps every seed logged)."""
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for method, runs in curves.items():
        common = sorted(set.intersection(*(set(steps) for steps, _ in runs)))
        means = [statistics.fmean(dict(zip(s, v, strict=True))[t] for s, v in runs) for t in common]
        axes.plot(common, means, marker="o", markersize=2, linewidth=1.2, label=parts.LABELS[method])
    axes.set(xlabel="step", ylabel="train loss (nats/byte)", title="tiny GPT on the byte corpus")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def _notes(budget: Budget, problem_steps: int, dim: int, condition: float, noise: float, damping_multiple: float,
           d_model: int) -> list[str]:
    return [
        f"Problems: {problem_steps} constant-lr steps, seeds {budget.seeds}; quadratics of dimension {dim}, "
        f"condition {condition:g} (eigenvalues in [1/condition, 1], random rotation), noisy_quadratic with "
        f"N(0, {noise:g}²) gradient noise; Rosenbrock from (-1.2, 1) + 0.1 N(0, I). The loss is the exact one.",
        f"Damping by rule, not tuned: v_ref = {damping_multiple:g} x rms(start gradient); CD-SGD c = 1/v_ref², "
        f"AF-SGD coupling = (1 - mu)/v_ref², temperature = v_ref²/4; CD-Adam c = 1/{damping_multiple:g}².",
        f"GPT: 2-layer tiny llama (attention) at d_model {d_model}, warmup-cosine lr, clip 1, no weight decay; "
        f"lr is the peak rate; mean/min/max over seeds.",
    ]
