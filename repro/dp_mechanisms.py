"""Reproduction: mixture-of-Gaussians and Spherical Generalized Gamma noise against the analytic Gaussian.

Papers: Liu, Selvi, Wiesemann, "Mind the Gap: Mixtures of Gaussians in Approximate Differential Privacy"
(arXiv 2605.28078); Wei, Bienstock, Polychroniadou, "Asymptotic Optimality of the High-Dimensional Gaussian
Mechanism and Improved Low-Dimensional Mechanisms for Differential Privacy" (arXiv 2606.08681). See
docs/papers/dp_mixture_mechanisms.md and docs/papers/sgg_mechanisms.md.

Three parts, all at sensitivity Δ = 1:
1. Scalar queries: at each (ε, δ), the analytic Gaussian's E|Z| and E Z² against the best calibrated MoG of the
   searched family (π_k ∝ e^{−λ|k|}, |k| ≤ 3, λ = ε·decay_factor, means k·m·Δ) — the claim "lower l1 and l2
   loss than the analytic Gaussian". Winners are re-verified on 256 shifts.
2. Vectors in low dimension T: per-coordinate MSE of every SGG member (a = a_ratio·T, p) calibrated at one
   (ε, δ), against the Gaussian (a = T, p = 2) and the ℓ2 mechanism (a = T, p = 1), and the ε after k
   releases of the Gaussian and the best member (PLD composition).
3. DP-SGD: softmax regression on a synthetic 4-class blobs task (8 features, 36 parameters), `budget.steps`
   steps of `budget.batch_size` examples; each example joins one batch per epoch, so it is released
   ⌈steps·batch/train_size⌉ times; Gaussian and ℓ2-mechanism noise both calibrated to (dp_eps, δ) over those
   releases (no amplification by subsampling is claimed), against non-private SGD. `budget.seq_len` is unused.

Example::

    from icml26zoo import repro
    results = repro.run("dp_mechanisms", "runs/dp", budget="quick")   # QUICK with QUICK_ARGS
"""

from __future__ import annotations

import concurrent.futures
import math
import multiprocessing
import os
import statistics
from collections.abc import Sequence

from matplotlib.figure import Figure

from icml26zoo.privacy import check_delta, check_epsilon
from icml26zoo.repro import dp_mechanisms_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, markdown_table
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.validation import check_int, check_positive

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=20, batch_size=50, seq_len=1, seeds=(0,))
FULL = Budget(steps=200, batch_size=50, seq_len=1, seeds=(0, 1, 2))
# What the notebook and `--quick` run: the whole pipeline on the smallest grids (about 10 CPU-seconds).
QUICK_ARGS = {"eps_values": (1.0, 4.0), "deltas": (1e-5,), "decay_factors": (1.0,), "spacings": (1.0,),
              "dims": (1, 2), "powers": (1.0, 2.0), "a_ratios": (1.0,), "compositions": (10,)}
# SMOKE: one (eps, delta) cell, one MoG candidate, the Gaussian and the l2 mechanism in T = 1, 2 DP-SGD steps.
SMOKE = Budget(steps=2, batch_size=50, seq_len=1, seeds=(0,))
SMOKE_ARGS = {"eps_values": (1.0,), "deltas": (1e-5,), "decay_factors": (1.0,), "spacings": (1.0,), "dims": (1,),
              "powers": (1.0, 2.0), "a_ratios": (1.0,), "compositions": (10,)}
TRAIN_SIZE = 2000
SGG_GRID = (500, 500)
MAIN_COLUMNS = ("eps", "delta", "gauss_sigma", "gauss_l1", "mog_l1", "l1_ratio", "gauss_l2", "mog_l2", "l2_ratio",
                "mog_l1_setting", "mog_l2_setting", "delta_check_l1", "delta_check_l2")


@register_experiment("dp_mechanisms", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/dp_mixture_mechanisms.md", extras=("privacy",))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, eps_values: Sequence[float] = (0.5, 1.0, 2.0, 4.0, 8.0),
        deltas: Sequence[float] = (1e-5, 1e-6), decay_factors: Sequence[float] = (0.5, 1.0, 1.5),
        spacings: Sequence[float] = (0.5, 1.0, 2.0), dims: Sequence[int] = (1, 2, 5, 10),
        powers: Sequence[float] = (0.5, 1.0, 1.5, 2.0, 3.0), a_ratios: Sequence[float] = (0.5, 1.0, 2.0),
        sgg_eps: float = 1.0, sgg_delta: float = 1e-5, compositions: Sequence[int] = (10, 100),
        dp_eps: float = 1.0, dp_delta: float = 1e-5, resume: bool = False, workers: int = 1) -> Results:
    """Runs the three parts and writes results.md/json and the figures mog_loss.png, sgg_mse.png.

    Args: the (ε, δ) grid and MoG search (decay factors λ/ε, spacings m) of part 1; the dimensions, shapes p
    (must include 1 and 2) and a/T ratios (must include 1) and the (ε, δ) of part 2, with the numbers of
    composed releases; the DP-SGD target (dp_eps, dp_delta) of part 3; `workers` processes for the
    calibrations of parts 1 and 2 (1: in this process). Bad values raise ValueError naming them.
    """
    eps_values = tuple(check_epsilon(e, "eps_values[i]") for e in _nonempty("eps_values", eps_values))
    deltas = tuple(check_delta(d, "deltas[i]") for d in _nonempty("deltas", deltas))
    _positive_all("decay_factors", decay_factors)
    _positive_all("spacings", spacings)
    _positive_all("powers", powers)
    _positive_all("a_ratios", a_ratios)
    if 1.0 not in powers or 2.0 not in powers or 1.0 not in a_ratios:
        raise ValueError(f"powers must include 1 and 2 and a_ratios must include 1 (the l2 mechanism and the "
                         f"Gaussian), got powers={tuple(powers)}, a_ratios={tuple(a_ratios)}")
    for name, values in (("dims", dims), ("compositions", compositions)):
        for value in _nonempty(name, values):
            check_int(f"{name}[i]", value)
    check_epsilon(sgg_eps, "sgg_eps"), check_delta(sgg_delta, "sgg_delta")
    check_epsilon(dp_eps, "dp_eps"), check_delta(dp_delta, "dp_delta")
    check_int("workers", workers)
    experiment = Experiment(run_dir, budget=budget, resume=resume)

    # Each part's result is kept under cells/ with the options it depends on: a resumed run reuses it.
    cells = experiment.run_dir / "cells"
    floats = lambda values: [float(v) for v in values]  # noqa: E731
    with _pool(workers) as pool:
        scalar = stored(cells / "mog.json", {"eps_values": floats(eps_values), "deltas": floats(deltas),
                                             "decay_factors": floats(decay_factors), "spacings": floats(spacings)},
                        lambda: list(pool.map(parts.mog_row, *zip(*[(e, d, tuple(decay_factors), tuple(spacings))
                                                                     for d in deltas for e in eps_values],
                                                                    strict=True))))
        shapes = [(dim, p, ratio) for dim in dims for p in powers for ratio in a_ratios]
        sgg_key = {"sgg_eps": float(sgg_eps), "sgg_delta": float(sgg_delta), "dims": list(dims),
                   "powers": floats(powers), "a_ratios": floats(a_ratios)}
        calibrated = stored(cells / "sgg_members.json", sgg_key,
                            lambda: list(pool.map(parts.sgg_member,
                                                  *zip(*[(sgg_eps, sgg_delta, dim, p, ratio, SGG_GRID)
                                                         for dim, p, ratio in shapes], strict=True))))
    members = {dim: [m for m in calibrated if m["dim"] == dim] for dim in dims}
    vector = stored(cells / "sgg_summary.json", sgg_key | {"compositions": list(compositions)},
                    lambda: [parts.sgg_summary(sgg_eps, sgg_delta, dim, members[dim], SGG_GRID, compositions)
                             for dim in dims])
    training = stored(cells / "dpsgd.json", {"steps": budget.steps, "batch_size": budget.batch_size,
                                             "seeds": list(budget.seeds), "dp_eps": float(dp_eps),
                                             "dp_delta": float(dp_delta)},
                      lambda: _dpsgd_rows(budget, dp_eps, dp_delta))

    notes = _notes(budget, sgg_eps, sgg_delta, dp_eps, dp_delta)
    notes += ["", f"**SGG in dimension T at (eps, delta) = ({sgg_eps:g}, {sgg_delta:g})** (per-coordinate MSE; "
                  "eps_kx_*: eps after k releases at that delta):", ""]
    notes += markdown_table(vector, tuple(vector[0]))
    notes += ["", f"**DP-SGD on blobs, (eps, delta) = ({dp_eps:g}, {dp_delta:g})** (eval accuracy, mean over "
                  f"seeds {budget.seeds}):", ""]
    notes += markdown_table(training, tuple(training[0]))
    notes += ["", "**Scalar queries: analytic Gaussian vs the best MoG of the searched family**:"]
    figures = {"mog_loss": _mog_figure(scalar), "sgg_mse": _sgg_figure(vector)}
    return experiment.write(scalar, columns=MAIN_COLUMNS, title="Mixture-of-Gaussians and SGG noise vs the "
                            "analytic Gaussian", notes=notes, figures=figures,
                            extra={"sgg_members": members, "sgg": vector, "dpsgd": training})


class _InProcess:
    """The `map` of a process pool, run in this process (workers = 1)."""

    def __enter__(self) -> _InProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        return None

    def map(self, fn, *iterables):
        return map(fn, *iterables)


def _pool(workers: int):
    """Calibrations are CPU-bound numpy: separate processes (spawned: the parent has initialised JAX)."""
    if workers == 1:
        return _InProcess()
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def _nonempty(name: str, values: Sequence) -> tuple:
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must hold at least one value, got none")
    return values


def _positive_all(name: str, values: Sequence[float]) -> None:
    for value in _nonempty(name, values):
        check_positive(f"{name}[i]", value, finite=True)


def _dpsgd_rows(budget: Budget, eps: float, delta: float) -> list[dict]:
    participations = math.ceil(budget.steps * budget.batch_size / TRAIN_SIZE)
    settings = parts.dpsgd_noise_settings(eps, delta, participations, 36, SGG_GRID)
    rows = []
    for noise, params in (("none (SGD)", None), ("gaussian", settings["gaussian"]), ("sgg", settings["sgg"])):
        accuracies = [parts.train_dpsgd(None if params is None else noise, params or {}, steps=budget.steps,
                                        batch_size=budget.batch_size, seed=seed, clip_norm=1.0, learning_rate=0.5,
                                        train_size=TRAIN_SIZE) for seed in budget.seeds]
        rows.append({"noise": "l2 mechanism (SGG a=T, p=1)" if noise == "sgg" else noise,
                     "noise_scale": None if params is None else params["scale"], "releases": participations,
                     "eval_accuracy": statistics.fmean(accuracies),
                     "accuracy_spread": (max(accuracies) - min(accuracies)) / 2})
    return rows


def _mog_figure(rows: list[dict]) -> Figure:
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for delta in sorted({r["delta"] for r in rows}, reverse=True):
        picked = [r for r in rows if r["delta"] == delta]
        eps = [r["eps"] for r in picked]
        axes.plot(eps, [r["l1_ratio"] for r in picked], marker="o", label=f"E|Z| ratio, delta={delta:g}")
        axes.plot(eps, [r["l2_ratio"] for r in picked], marker="s", linestyle="--",
                  label=f"E Z^2 ratio, delta={delta:g}")
    axes.axhline(1.0, color="gray", linewidth=1)
    axes.set(xscale="log", xlabel="epsilon", ylabel="best MoG / analytic Gaussian",
             title="Scalar noise: best calibrated MoG relative to the analytic Gaussian")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def _sgg_figure(rows: list[dict]) -> Figure:
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    dims = [r["dim"] for r in rows]
    axes.plot(dims, [r["best_vs_gauss"] for r in rows], marker="o", label="best SGG member of the sweep")
    axes.plot(dims, [r["l2mech_vs_gauss"] for r in rows], marker="s", label="l2 mechanism (a=T, p=1)")
    axes.axhline(1.0, color="gray", linewidth=1, label="Gaussian")
    axes.set(xscale="log", xlabel="dimension T", ylabel="per-coordinate MSE / Gaussian's",
             title="SGG noise at the same (eps, delta): MSE relative to the Gaussian")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def _notes(budget: Budget, sgg_eps: float, sgg_delta: float, dp_eps: float, dp_delta: float) -> list[str]:
    return [
        "Sensitivity 1 everywhere. Calibrations are the zoo's (zoo/privacy): MoG by exact interval masses over "
        f"{parts.CALIBRATION_SHIFTS} shifts in (0, 1] (winners re-checked on {parts.VERIFY_SHIFTS}: "
        "delta_check_*), SGG by 2-D quadrature on a 500 x 500 grid (the best member re-checked on 1200 x 1200).",
        f"MoG family (RECONSTRUCTION): pi_k ~ exp(-lambda |k|), |k| <= {parts.MOG_RADIUS}, means k m; ratios "
        "< 1 mean the MoG has the lower loss.",
        f"DP-SGD: softmax regression, {TRAIN_SIZE} training / 2000 eval examples, clip norm 1, lr 0.5, "
        f"{budget.steps} steps of {budget.batch_size}; noise calibrated so that every example's releases "
        f"compose to ({dp_eps:g}, {dp_delta:g}) (add/remove adjacency, no subsampling amplification).",
    ]
