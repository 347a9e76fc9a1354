"""Reproduction: the circulation knob α and blend β, with the Hopfield stability measures per layer through training.

Paper: Cho, Han, Jin, "Balancing Fidelity and Diversity in Diffusion Models via Symmetric Attention
Decomposition: Hopfield Perspective" (ICML 2026, arXiv 2605.27476). Attention logits are split into a
symmetric part M_sym (an energy landscape) and a skew part M_skew (energy-neutral "circulation"); the knob
ℓ_α = M_sym + α·M_skew with a blend H_org + β(H_α − H_org) trades fidelity for diversity, and the paper
reads the trade through three stability measures of the retrieved patterns: the energy E, the instability
fraction r and the alignment Align (the design notes, section 3).

The paper perturbs a pretrained diffusion UNet at sampling time. The zoo has no such model, so this
experiment trains the zoo's tiny causal byte LM (`circulation_tiny`: 2 layers, width 64, 4 query heads on
2 KV heads) with the knob on from the start, over a grid of (α, β) settings, and records per layer, at
evenly spaced checkpoints, E (mean, min, 5th percentile over channels), r, Align, η_M and the symmetry
balance on a fixed batch of held-out rows (`CirculationAttention.stability`). The grid's final eval
bits per byte shows what the knob costs or gains as a training-time architecture choice.

Every α = 1 setting is the baseline exactly (c₂ = 0 makes H_α = H_org, so the blend is the identity for any
β), so one α = 1 cell (at β = 1) stands for α = 1 in every β column. The causal mask is the zoo's
extension: the measures use the unmasked S = ½(A + Aᵀ) of each head and the causally retrieved patterns.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from icml26zoo.configs import load_preset
from icml26zoo.repro.circulation_parts import (
    MEASURES,
    fixed_rows,
    loss_figure,
    mean_std,
    measure_checkpoints,
    measures_figure,
)
from icml26zoo.repro.common import Budget, Experiment, Results, line_figure, metric_series
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train.config import apply_overrides
from icml26zoo.validation import check_finite, check_int

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

# QUICK: the baseline and α = 1.2, β = 3; 24 steps, one seed, two measure points (the notebook, ~30 CPU-s).
QUICK = Budget(steps=24, batch_size=4, seq_len=32, seeds=(0,))
QUICK_ARGS = {"alphas": (1.0, 1.2), "betas": (3.0,), "measure_points": 2}
# SMOKE: one cell (α = 1.2, β = 3), 2 steps of 2 x 16 bytes, one measure point (plus the initialization).
SMOKE = Budget(steps=2, batch_size=2, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"alphas": (1.2,), "betas": (3.0,), "measure_points": 1, "measure_rows": 2}
# FULL: the default grid (5 distinct cells) x 3 seeds at the tiny preset's batch shape.
FULL = Budget(steps=240, batch_size=8, seq_len=64, seeds=(0, 1, 2))


@register_experiment("circulation", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/circulation.md")
def run(
    run_dir: str | os.PathLike,
    *,
    budget: Budget = FULL,
    alphas: Sequence[float] = (0.9, 1.0, 1.2),
    betas: Sequence[float] = (1.0, 3.0),
    measure_points: int = 6,
    measure_rows: int = 8,
    resume: bool = False,
) -> Results:
    """Trains the (α, β) grid and measures every layer at `measure_points` evenly spaced checkpoints.

    Args:
      run_dir: the run directory (cells, results.md/json, figures).
      budget: steps, batch shape and seeds per cell (SMOKE, QUICK, FULL or your own).
      alphas: the circulation knobs (finite; QUICK_ARGS: (1.0, 1.2)).
      betas: the blend factors (finite, >= 0; QUICK_ARGS: (3.0,)); α = 1 is trained once (see the module).
      measure_points: checkpoints per cell at which the measures are taken (plus the initialization);
        1 <= measure_points <= budget.steps (QUICK_ARGS: 2).
      measure_rows: held-out rows of `budget.seq_len` bytes in the fixed measurement batch (1 to 64).
      resume: continue in an existing run_dir (FileNotFoundError when it does not exist).
    """
    alphas = _check_values("alphas", alphas)
    betas = _check_values("betas", betas, minimum=0.0)
    points = measure_points
    _check_count("measure_points", points, budget.steps)
    _check_count("measure_rows", measure_rows, 64)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    base = apply_overrides(load_preset("circulation_tiny"), [f"data.data_dir={experiment.run_dir / 'tfds'}",
                                                             "eval_batches=4", "log_every=5"])
    tokens = fixed_rows(base.data, measure_rows, budget.seq_len)
    settings = _settings(alphas, betas)
    trained: dict[tuple[float, float], list[dict[str, Any]]] = {}
    for alpha, beta in settings:
        trained[(alpha, beta)] = [
            _train_and_measure(experiment, base, alpha, beta, seed, points, tokens) for seed in budget.seeds
        ]
    rows = _rows(alphas, betas, trained)
    curves = {f"α={a:g}, β={b:g}": _mean_curve(experiment, [c["cell"] for c in cells])
              for (a, b), cells in trained.items()}
    return experiment.write(
        rows,
        columns=("alpha", "beta", "layer", "bits_per_byte", "bpb_std", "energy_mean", "instability_mean",
                 "alignment_mean", "eta_m"),
        title="Circulation attention: (α, β) grid, final eval bits per byte and per-layer stability measures",
        notes=[
            f"Tiny causal byte LM (circulation_tiny) on pystdlib; bits_per_byte = final eval, mean over seeds "
            f"{budget.seeds} (bpb_std: their std). Measures at the last step on {measure_rows} fixed held-out rows, "
            f"mean over seeds; α = 1 is the baseline for every β (trained once, at β = 1).",
        ],
        figures={
            "measures": measures_figure(trained),
            "loss_vs_alpha": loss_figure(alphas, betas, trained),
            "loss_curves": _loss_curves(curves),
        },
        extra={"alphas": list(alphas), "betas": list(betas), "measure_points": points,
               "measure_rows": measure_rows, "measures": MEASURES,
               "cells": [cell for cells in trained.values() for cell in cells]},
    )


def _check_values(field: str, values: Sequence[float], minimum: float | None = None) -> tuple[float, ...]:
    """`values` as a tuple of distinct finite floats, each >= minimum; ValueError otherwise."""
    values = tuple(values)
    if not values:
        raise ValueError(f"{field} must hold at least one number, got none")
    for value in values:
        check_finite(f"{field}: each value", value)
        if minimum is not None and value < minimum:
            raise ValueError(f"{field}: each value must be >= {minimum:g}, got {value!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{field} must not repeat a value, got {list(values)}")
    return tuple(float(v) for v in values)


def _check_count(field: str, value: Any, maximum: int) -> None:
    """ValueError naming `field` unless `value` is an integer in [1, maximum]."""
    check_int(field, value)
    if value > maximum:
        raise ValueError(f"{field} must be an integer in [1, {maximum}], got {value!r}")


def _settings(alphas: tuple[float, ...], betas: tuple[float, ...]) -> list[tuple[float, float]]:
    """The distinct (α, β) cells: every α ≠ 1 with every β, and α = 1 once at β = 1 (the exact baseline)."""
    settings = [(1.0, 1.0)] if 1.0 in alphas else []
    return settings + [(a, b) for a in alphas if a != 1.0 for b in betas]


def _cell_of(alphas_betas: tuple[float, float]) -> tuple[float, float]:
    """The trained setting that stands for (α, β): α = 1 maps to the β = 1 baseline."""
    alpha, beta = alphas_betas
    return (1.0, 1.0) if alpha == 1.0 else (alpha, beta)


def _train_and_measure(experiment: Experiment, base: Any, alpha: float, beta: float, seed: int, points: int,
                       tokens: np.ndarray) -> dict[str, Any]:
    """Trains one cell with a checkpoint every steps/points steps (all kept) and measures each of them."""
    name = f"a{alpha:g}_b{beta:g}_s{seed}"
    config = apply_overrides(base, [f"model.mixer_options=(('alpha', {alpha!r}), ('beta', {beta!r}))"])
    config = experiment.cell_config(config, seed=seed)
    every = max(1, math.ceil(experiment.budget.steps / points))
    config = dataclasses.replace(config, checkpoint_every=every, keep_checkpoints=points + 1)
    # One device: the tiny model gains nothing from a data-parallel mesh, and any batch size then works.
    devices = jax.devices()[:1]
    summary = experiment.train_cell(name, config, devices=devices)
    # The measures are kept next to the cell (for its measurement batch), so a resumed run reuses them.
    steps, layers = stored(experiment.cell_dir(name) / "measures.json", {"measure_rows": int(tokens.shape[0])},
                           lambda: measure_checkpoints(experiment.cell_dir(name), config, tokens, devices=devices))
    return {"cell": name, "alpha": alpha, "beta": beta, "seed": seed, "bits_per_byte": summary["eval/bits_per_byte"],
            "steps": steps, "layers": layers}


def _rows(alphas: tuple[float, ...], betas: tuple[float, ...],
          trained: dict[tuple[float, float], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (α, β, layer): final bits per byte (mean, std over seeds) and last-step measures."""
    rows = []
    for alpha in alphas:
        for beta in betas:
            cells = trained[_cell_of((alpha, beta))]
            bpb, bpb_std = mean_std([c["bits_per_byte"] for c in cells])
            for layer in range(len(cells[0]["layers"])):
                row = {"alpha": alpha, "beta": beta, "layer": layer, "bits_per_byte": bpb, "bpb_std": bpb_std}
                for measure in ("energy_mean", "instability_mean", "alignment_mean", "eta_m"):
                    row[measure] = mean_std([c["layers"][layer][measure][-1] for c in cells])[0]
                rows.append(row)
    return rows


def _mean_curve(experiment: Experiment, cells: list[str]) -> tuple[list[int], list[float]]:
    """Training loss vs step, averaged over the seeds' cells (steps they all logged)."""
    series = [dict(zip(*metric_series(experiment.cell_dir(c) / "metrics.jsonl", "train/loss"), strict=True))
              for c in cells]
    steps = sorted(set.intersection(*(set(s) for s in series)))
    return steps, [float(np.mean([s[step] for s in series])) for step in steps]


def _loss_curves(curves: dict[str, tuple[list[int], list[float]]]) -> Any:
    """Training loss vs step, a line per (α, β)."""
    return line_figure(curves, xlabel="step", ylabel="train loss (nats per byte)", markers=False,
                       title="Training loss per (α, β), mean over seeds")
