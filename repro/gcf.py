"""GCF layer ("Universal Representation of Generalized Convex Functions and their Gradients", M. Nehzati, arXiv
2509.04477, ICML 2026): the finitely convex layer (icml26zoo.convex) on its two applications with known answers.

- `ot`: quadratic-cost transport N(0, 1) → N(1, 0.5²); the learned Monge map's RMS error against the closed form
  x ↦ 1 + x/2 on a held-out sample of μ, its monotonicity, and the dual on held-out samples against their optimal
  cost (weak duality) and W₂² = 1.25. Methods `gcf` (the layer with J candidates at ν's quantiles, semi-discrete
  dual) and `mlp` (an unconstrained MLP potential with a c-transform: the neural-dual baseline).
- `auction`: one buyer, two goods uniform on [0, 1]²; the revenue of the learned menu (hard mode, on a grid) against
  Manelli and Vincent's optimum (≈ 0.549, recomputed here from their menu on the same grid). Methods `gcf` (J items
  and the outside option: IC and IR by construction), `separate` (each good at 1/2) and `bundle` (the bundle at
  √(2/3)), the best menus of two simple classes.

Each fit is a small optax loop (icml26zoo.convex.fitting; why not the shared trainer: the data are drawn inside the
step from analytic distributions). Nothing is resumable: `resume` only requires `run_dir` to exist and everything is
recomputed. Budget fields: `steps` Adam steps per fit, `batch_size` samples per step, `seq_len` = J (candidates,
menu items), `seeds` one fit per seed per method.

    from icml26zoo import repro
    results = repro.run("gcf", "runs/gcf", budget="quick")

From a shell: `python -m icml26zoo.repro gcf [--smoke | --quick] --out DIR [tasks=ot,auction]`.
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo.convex import FitConfig
from icml26zoo.repro import gcf_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int, check_positive

__all__ = ["FULL", "QUICK", "SMOKE", "TASKS", "run"]

FULL = Budget(steps=1000, batch_size=512, seq_len=200, seeds=(0, 1, 2))
QUICK = Budget(steps=300, batch_size=256, seq_len=100, seeds=(0, 1, 2))
SMOKE = Budget(steps=4, batch_size=32, seq_len=8, seeds=(0,))
SMOKE_ARGS = {"mlp_width": 8, "eval_points": 64, "revenue_grid": 8}
TASKS = ("ot", "auction")


def ot_rows(budget: Budget, ot_learning_rate: float, mlp_learning_rate: float, mlp_width: int,
            eval_points: int) -> list[dict]:
    """One row per OT method: the metrics over seeds."""
    gcf_config, mlp_config = fit_config(budget, ot_learning_rate), fit_config(budget, mlp_learning_rate)
    fits = {"gcf": lambda seed: parts.fit_ot_gcf(budget.seq_len, gcf_config, seed, eval_points),
            "mlp": lambda seed: parts.fit_ot_mlp(mlp_width, mlp_config, seed, eval_points)}
    rows = []
    for method, run_fit in fits.items():
        per_seed = [run_fit(seed) for seed in budget.seeds]
        rows.append({"task": "ot", "method": method, **spread("map_rmse", per_seed), **spread("dual", per_seed),
                     "sample_cost": mean_of("sample_cost", per_seed), "reference": per_seed[0]["W2_squared"],
                     "monotone": f"{sum(r['monotone'] for r in per_seed)}/{len(per_seed)}",
                     "revenue": "-", "revenue_sd": "-"})
    return rows


def auction_rows(budget: Budget, auction_learning_rate: float, auction_temp: float, grid: int) -> list[dict]:
    """One row per auction method; the references are computed on the same grid."""
    menus = parts.reference_menus()
    optimum = parts.fixed_menu_revenue(*menus["manelli_vincent"], grid)
    config = fit_config(budget, auction_learning_rate)
    learned = [parts.fit_auction_gcf(budget.seq_len, config, seed, auction_temp, grid) for seed in budget.seeds]
    rows = [{"method": "gcf", **spread("revenue", learned)}]
    for name in ("separate", "bundle"):
        rows.append({"method": name, "revenue": parts.fixed_menu_revenue(*menus[name], grid), "revenue_sd": 0.0})
    return [{"task": "auction", **row, "map_rmse": "-", "map_rmse_sd": "-", "dual": "-", "dual_sd": "-",
             "sample_cost": "-", "monotone": "-", "reference": optimum} for row in rows]


def fit_config(budget: Budget, learning_rate: float) -> FitConfig:
    return FitConfig(steps=budget.steps, learning_rate=learning_rate, batch_size=budget.batch_size)


def spread(key: str, per_seed: list[dict]) -> dict:
    """{key: mean, key_sd: standard deviation} over seeds (ddof 0; 0 for one seed)."""
    values = np.array([row[key] for row in per_seed], np.float64)
    return {key: float(values.mean()), f"{key}_sd": float(values.std())}


def mean_of(key: str, per_seed: list[dict]) -> float:
    return float(np.mean([row[key] for row in per_seed]))


def summary_figure(rows: list[dict]) -> Figure:
    """Left: OT map RMS error per method; right: revenue per method with the optimum as a line."""
    ot_rows_, auction_rows_ = [r for r in rows if r["task"] == "ot"], [r for r in rows if r["task"] == "auction"]
    panels = [p for p in (ot_rows_, auction_rows_) if p]
    figure = Figure(figsize=(5.0 * len(panels), 3.6), layout="constrained")
    axes = np.atleast_1d(figure.subplots(1, len(panels)))
    for axis, panel in zip(axes, panels, strict=True):
        key = "map_rmse" if panel[0]["task"] == "ot" else "revenue"
        names = [r["method"] for r in panel]
        axis.bar(names, [r[key] for r in panel], yerr=[r[f"{key}_sd"] for r in panel], capsize=4, color="tab:blue")
        if key == "revenue":
            axis.axhline(panel[0]["reference"], color="black", linestyle="--", label="Manelli–Vincent optimum")
            axis.set_ylim(0.45, 0.58)
            axis.legend(fontsize=8)
        axis.set(title="OT map error (lower is better)" if key == "map_rmse" else "auction revenue", ylabel=key)
        axis.grid(True, axis="y", alpha=0.3)
    return figure


@register_experiment("gcf", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/gcf_layer.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, tasks: tuple[str, ...] = TASKS,
        ot_learning_rate: float = 0.1, mlp_learning_rate: float = 0.01, mlp_width: int = 64,
        auction_learning_rate: float = 0.01, auction_temp: float = 50.0, eval_points: int = 4096,
        revenue_grid: int = 200, resume: bool = False) -> Results:
    """Fits every method of each task once per seed; writes results.md/json and the figure `summary`.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      tasks: a subset of TASKS ("ot", "auction").
      ot_learning_rate: Adam's initial rate on the GCF potential's intercepts (cosine-decayed to 1% of it).
      mlp_learning_rate: the same for the MLP potential.
      mlp_width: hidden width of the MLP potential.
      auction_learning_rate: the same for the menu's items and prices.
      auction_temp: the menu's base softmax temperature (the adaptive temperature sharpens it per type).
      eval_points: held-out samples of μ (and of ν) on which the map and the dual are measured.
      revenue_grid: points per axis of the grid of buyer types on which revenue is measured.
      resume: require `run_dir` to exist (everything is recomputed).
    """
    tasks = check_names("tasks", tasks, TASKS)
    for name, value in (("ot_learning_rate", ot_learning_rate), ("mlp_learning_rate", mlp_learning_rate),
                        ("auction_learning_rate", auction_learning_rate), ("auction_temp", auction_temp)):
        check_positive(name, value, finite=True)
    for name, value in (("mlp_width", mlp_width), ("eval_points", eval_points), ("revenue_grid", revenue_grid)):
        check_int(name, value)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    rows = []
    if "ot" in tasks:
        rows += ot_rows(budget, ot_learning_rate, mlp_learning_rate, mlp_width, eval_points)
    if "auction" in tasks:
        rows += auction_rows(budget, auction_learning_rate, auction_temp, revenue_grid)
    notes = [
        "OT: N(0, 1) → N(1, 0.5²), quadratic cost. map_rmse: RMS of the learned map minus x ↦ 1 + x/2 on "
        f"{eval_points} held-out points of μ (mean and sd over seeds); dual: the Kantorovich dual of the learned "
        "potential on held-out samples with its c-transform over them, never above sample_cost (their optimal "
        "coupling's cost); reference: W₂² = 1.25. gcf: J = seq_len candidates at ν's quantiles (map resolution "
        "limited by J in the tails); mlp: unconstrained MLP potential, map x − ½u'(x).",
        f"Auction: revenue of the menu in hard mode on a {revenue_grid} × {revenue_grid} grid of types; reference: "
        "Manelli–Vincent's optimal menu on the same grid (≈ 0.549). separate / bundle: the best menus of those "
        "classes (no training).",
    ]
    return experiment.write(
        rows, columns=("task", "method", "map_rmse", "map_rmse_sd", "monotone", "dual", "dual_sd", "sample_cost",
                       "revenue", "revenue_sd", "reference"),
        title="GCF layer: optimal transport and a two-good auction with known answers", notes=notes,
        figures={"summary": summary_figure(rows)}, extra={"tasks": list(tasks)})
