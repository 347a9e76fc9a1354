"""Reproduction: Diag-CFM (zero-anchored flow matching) against standard CFM for inverse design.

Paper: de Campos, Krebs, Gottschalk, "Generative Inverse Design with Abstention via Diagonal Flow Matching"
(ICML 2026, arXiv 2603.15925). See docs/papers/diag_cfm.md.

The claims tested: standard CFM for inverse problems, which pairs (y, noise) with the design x, depends on the
ordering of the design coordinates, and Diag-CFM, which pairs x with noise and y with 0, does not; Diag-CFM's
Self-Consistency (SC) and Zero-Deviation (ZD) scores pick better candidates (best-of-N), rank targets for
abstention, and flag out-of-distribution targets. Task: `flows.SmoothBenchmark` (x ~ N(0, I_P), L smooth
nonlinear labels, each reading two coordinates) at several P, with the label coordinates first ("aligned",
where standard CFM puts the labels) or in one fixed random order ("shuffled"). Each cell trains a velocity MLP
with the pairing's CFM loss (an optax loop, `flows.fit_velocity`: the shared trainer is built for token
batches) and scores `candidates` designs per target with the true simulator's round-trip error RT.

Budget fields: `steps` Adam steps of `batch_size` pairs per cell, one cell per seed; `seq_len` is unused
(flows have no sequence) and must be 1.

Example::

    from icml26zoo import repro
    results = repro.run("diag_cfm", "runs/diag_cfm", budget="quick")   # QUICK with QUICK_ARGS
    print(results.markdown)
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from icml26zoo.flows import PAIRINGS, FitConfig
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.diag_cfm_parts import (
    COVERAGES,
    OOD_LEVEL,
    CellSpec,
    abstention_curve,
    abstention_figure,
    auroc,
    best_of,
    evaluate_cell,
    mean_over,
    round_trip_figure,
)
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int

__all__ = ["DIMS", "FULL", "ORDERS", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=100, batch_size=64, seq_len=1, seeds=(0,))
FULL = Budget(steps=3000, batch_size=256, seq_len=1, seeds=(0, 1))
QUICK_ARGS = {"dims": (4,), "train_pairs": 1000, "targets": 8, "candidates": 4, "ode_steps": 10, "width": 32,
              "depth": 2}
# SMOKE: both pairings at P = 2 (one label), the shuffled order, 20 steps of a width-8 MLP, 4 targets x 3
# candidates: every code path in seconds.
SMOKE = Budget(steps=20, batch_size=16, seq_len=1, seeds=(0,))
SMOKE_ARGS = {"dims": (2,), "orders": ("shuffled",), "n_labels": 1, "train_pairs": 64, "targets": 4,
              "candidates": 3, "ode_steps": 4, "width": 8, "depth": 1}
DIMS = (4, 16, 64)
ORDERS = ("aligned", "shuffled")
COLUMNS = ("pairing", "P", "order", "final_loss", "rt_single", "rt_best_sc", "rt_best_zd", "rt_best_oracle",
           "sc_in", "zd_in", "sc_ood", "zd_ood", "auroc_sc", "auroc_zd")


@register_experiment("diag_cfm", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/diag_cfm.md", extras=("flows",))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, pairings: Sequence[str] = PAIRINGS,
        dims: Sequence[int] = DIMS, orders: Sequence[str] = ORDERS, n_labels: int = 2, train_pairs: int = 20000,
        targets: int = 128, candidates: int = 16, ode_steps: int = 50, width: int = 128, depth: int = 4,
        resume: bool = False) -> Results:
    """Trains every (pairing, P, order, seed) cell, scores it, and writes the comparison.

    Args:
      run_dir: the experiment's directory (cells/*.json, results.md/json, round_trip.png, abstention.png).
      budget: Adam steps, batch size and seeds of every cell (seq_len must be 1).
      pairings: from PAIRINGS ("diag", "standard"); orders: from ORDERS ("aligned", "shuffled").
      dims: design dimensions P (integers >= 2 n_labels, distinct); n_labels: labels L >= 1.
      train_pairs: training set size; targets: in-distribution and OOD targets each; candidates: designs N
        sampled per target; ode_steps: Heun steps of every integration; width, depth: the velocity MLP.
      resume: require run_dir to exist; finished cells are reused either way.
    """
    pairings, orders = check_names("pairings", pairings, PAIRINGS), check_names("orders", orders, ORDERS)
    dims = _check_dims(dims, n_labels)
    for name, value in (("train_pairs", train_pairs), ("targets", targets), ("candidates", candidates),
                        ("ode_steps", ode_steps)):
        check_int(name, value)
    if budget.seq_len != 1:
        raise ValueError(f"budget.seq_len must be 1 (flows have no sequence), got {budget.seq_len}")
    fit = FitConfig(width=width, depth=depth, steps=budget.steps, batch_size=budget.batch_size,
                    log_every=_log_every(budget.steps))
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    outcomes = {}
    for pairing in pairings:
        for p in dims:
            for order in orders:
                outcomes[(pairing, p, order)] = [
                    evaluate_cell(CellSpec(pairing, p, n_labels, order, seed), fit, train_pairs=train_pairs,
                                  targets=targets, candidates=candidates, ode_steps=ode_steps,
                                  cache_dir=experiment.run_dir / "cells")
                    for seed in budget.seeds]
    rows = [_row(key, records) for key, records in outcomes.items()]
    figures = {"round_trip": round_trip_figure(rows)}
    middle = dims[len(dims) // 2]
    curves = {_label(pairing, order, by): _mean_curve(outcomes[(pairing, middle, order)], by)
              for pairing in pairings for order in orders for by in (("sc", "zd") if pairing == "diag" else ("sc",))}
    figures["abstention"] = abstention_figure(curves, middle)
    return experiment.write(
        rows, columns=COLUMNS, title="Diag-CFM vs standard CFM: inverse design on the smooth analytic benchmark",
        notes=_notes(n_labels, train_pairs, targets, candidates, ode_steps, width, depth), figures=figures,
        extra={"abstention_p": middle, "coverages": list(COVERAGES), "abstention": curves,
               "loss_curves": {"_".join(map(str, k)): [r["curve"] for r in v] for k, v in outcomes.items()}})


def _check_dims(dims: Sequence[int], n_labels: int) -> tuple[int, ...]:
    check_int("n_labels", n_labels)
    dims = tuple(dims)
    if not dims or len(set(dims)) != len(dims):
        raise ValueError(f"dims must name at least one design dimension, without repeats, got {list(dims)}")
    for p in dims:
        check_int("dims[i] (at least 2 n_labels)", p, minimum=2 * n_labels)
    return dims


def _log_every(steps: int) -> int:
    """The largest divisor of steps that is at most steps / 20 (about 20 logged points)."""
    return max(d for d in range(1, max(1, steps // 20) + 1) if steps % d == 0)


def _row(key: tuple[str, int, str], records: list[dict]) -> dict:
    pairing, p, order = key
    diag = pairing == "diag"
    per_in = [r["in"] for r in records]
    per_ood = [r["ood"] for r in records]
    mean_score = lambda scores, by: float(np.mean(scores[by]))
    return {
        "pairing": "Diag-CFM" if diag else "standard CFM", "P": p, "order": order,
        "final_loss": mean_over(records, lambda r: r["curve"][-1][1]),
        "rt_single": mean_over(per_in, lambda s: mean_score(s, "rt")),
        "rt_best_sc": mean_over(per_in, lambda s: best_of(s, "sc")),
        "rt_best_zd": mean_over(per_in, lambda s: best_of(s, "zd")) if diag else None,
        "rt_best_oracle": mean_over(per_in, lambda s: best_of(s, "rt")),
        "sc_in": mean_over(per_in, lambda s: mean_score(s, "sc")),
        "zd_in": mean_over(per_in, lambda s: mean_score(s, "zd")) if diag else None,
        "sc_ood": mean_over(per_ood, lambda s: mean_score(s, "sc")),
        "zd_ood": mean_over(per_ood, lambda s: mean_score(s, "zd")) if diag else None,
        "auroc_sc": mean_over(records, lambda r: _target_auroc(r, "sc")),
        "auroc_zd": mean_over(records, lambda r: _target_auroc(r, "zd")) if diag else None,
    }


def _target_auroc(record: dict, by: str) -> float:
    """AUROC of the per-target mean score (over candidates) separating OOD from in-distribution targets."""
    return auroc(np.mean(record["in"][by], axis=1), np.mean(record["ood"][by], axis=1))


def _mean_curve(records: list[dict], by: str) -> list[float]:
    curves = np.asarray([abstention_curve(r["in"], by) for r in records])
    return [float(v) for v in curves.mean(axis=0)]


def _label(pairing: str, order: str, by: str) -> str:
    return f"{'Diag-CFM' if pairing == 'diag' else 'standard CFM'} {order}, by {by.upper()}"


def _notes(n_labels, train_pairs, targets, candidates, ode_steps, width, depth) -> list[str]:
    return [
        f"Benchmark: x ~ N(0, I_P), L = {n_labels} standardised labels s_l(x) = (x_a + sin(2 x_a)/2 + x_a x_b/2)/std; "
        f"{train_pairs} training pairs; 'aligned' puts the label coordinates first (where standard CFM's "
        f"labels sit), 'shuffled' uses one fixed random order of the design coordinates.",
        f"Velocity MLP: {depth} SiLU layers of width {width}, sinusoidal time features; Adam, cosine decay from "
        f"1e-3. Sampling and backward prediction: {ode_steps} Heun steps (diffrax).",
        f"Per cell: {targets} in-distribution targets (labels of held-out designs) and {targets} OOD targets "
        f"(+-{OOD_LEVEL} in every standardised label), {candidates} candidates each.",
        "rt_*: round-trip error RMS_l(s(x_hat) - y*) with the true simulator, mean over in-distribution targets: "
        "rt_single averages all candidates; rt_best_sc / rt_best_zd keep the candidate with the lowest SC / ZD; "
        "rt_best_oracle keeps the lowest true RT (the best any selection could do). sc_* / zd_*: mean scores; "
        "auroc_*: OOD detection by the per-target mean score. All values are means over seeds.",
    ]
