"""Target update periods in Q-learning ("The Role of Target Update Frequencies in Q-Learning", Weissmann et
al., ICML 2026, arXiv 2602.03911): constant periods K against the adaptive K_n = min(K_max, ⌈K_0 γ^{−2n/3}⌉).

Two parts:

- **tabular** — periodic Q-learning (`icml26zoo.rl.tabular`) on the 10-state, 3-action random MDP (γ = 0.9,
  uniform behaviour distribution, inner step α_k = 1/(1 + k/k_0) restarted at each sync), measured against the
  exact Q*: samples after which ‖Q̄ − Q*‖_∞ stays ≤ ε (the latest seed) for ε in `eps`, and the **exponent
  fit**, the slope of log(samples) against log(1/ε), for the adaptive schedule and for the best constant
  period at each ε. The theory predicts 1/ε² (slope 2) for the adaptive schedule and log(1/ε)/ε² for the best
  constant one (slope 2 plus the log factor's local slope over these ε, recorded as `theory_slope`).
- **cartpole** — DQN (`icml26zoo.rl.cartpole_dqn`) on gymnax's CartPole-v1 (γ = 0.99, replay buffer,
  ε-greedy) with constant periods and the adaptive schedule from K_0 = `cartpole_k0`: the mean return of the
  last 10 training episodes and the greedy return of the final network.

Q-learning is not LM training: the shared trainer is not used, so its checkpoints do not apply. Each
(schedule, seed) is a cell whose result is stored as JSON under ``run_dir/cells/<cell>/result.json`` and
reused on a rerun (resumable at the cell level). The `Budget` fields name RL sizes: `steps` = CartPole
environment steps per cell, `batch_size` = DQN minibatch, `seq_len` = tabular samples per cell in thousands,
`seeds` = seeds of both parts.

    from icml26zoo import repro
    results = repro.run("target_update", "runs/target_update", budget="quick")

From a shell (needs the `rl` extra): `python -m icml26zoo.repro target_update [--smoke | --quick] --out DIR
[tabular_periods=300,3000] [adaptive_k0=30] [cartpole_periods=100,500] [cartpole_k0=100] [eps=0.3,0.1]
[decay_k0=30] [eval_episodes=10]`.
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo.repro import target_update_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment
from icml26zoo.rl.cartpole_dqn import DQNConfig
from icml26zoo.rl.envs import random_mdp, value_iteration
from icml26zoo.rl.schedules import GeometricTargetSchedule, adaptive_schedule, constant_schedule
from icml26zoo.validation import check_int, check_interval, check_positive

__all__ = ["FULL", "QUICK", "SCHEDULES", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=400, batch_size=16, seq_len=20, seeds=(0,))
FULL = Budget(steps=20_000, batch_size=64, seq_len=2000, seeds=(0, 1, 2))
# Both parts and both schedule families at the smallest size: one constant period and the adaptive schedule,
# 2,000 tabular samples (γ = 0.5, so that ε = 0.3 and 0.1 are reached and the fit has points) and 40 CartPole
# steps (minibatch 4) per cell, one seed, one greedy episode.
SMOKE = Budget(steps=40, batch_size=4, seq_len=2, seeds=(0,))
SMOKE_ARGS = {"tabular_periods": (100,), "cartpole_periods": (10,), "cartpole_k0": 10, "eval_episodes": 1,
              "tabular_gamma": 0.5}

SCHEDULES = ("constant", "adaptive")
K_MAX = 100_000


def _check_periods(field: str, periods: tuple[int, ...]) -> tuple[int, ...]:
    if not isinstance(periods, tuple) or not periods:
        raise ValueError(f"{field} must be a non-empty tuple of integers >= 1, got {periods!r}")
    for k in periods:
        check_int(f"{field}: every period", k)
    if len(set(periods)) != len(periods):
        raise ValueError(f"{field} must not repeat a period, got {periods!r}")
    return periods


def _check_args(eps: tuple[float, ...], decay_k0: float, eval_episodes: int, mdp_seed: int) -> None:
    if not isinstance(eps, tuple) or len(eps) < 2:
        raise ValueError(f"eps must be a tuple of at least two thresholds in (0, 1) for the fit, got {eps!r}")
    for e in eps:
        check_interval("eps: every threshold", e, 0, 1, closed="neither")
    if len(set(eps)) != len(eps):
        raise ValueError(f"eps must not repeat a threshold, got {eps!r}")
    check_positive("decay_k0 (k_0 of the inner step 1/(1 + k/k_0))", decay_k0, finite=True)
    check_int("eval_episodes", eval_episodes)
    check_int("mdp_seed", mdp_seed, minimum=0)


def _check_gamma(field: str, gamma: float) -> float:
    return check_interval(f"{field} (the discount γ)", gamma, 0, 1, closed="neither")


def _schedules(names: tuple[str, ...], periods: tuple[int, ...], k0: int,
               gamma: float) -> list[tuple[str, GeometricTargetSchedule]]:
    out = [(f"constant_K={k}", constant_schedule(k)) for k in periods] if "constant" in names else []
    if "adaptive" in names:
        out.append((f"adaptive_K0={k0}", adaptive_schedule(k0, gamma, k_max=K_MAX)))
    return out


def _dqn_config(budget: Budget, gamma: float) -> DQNConfig:
    """The CartPole DQN at this budget: learning starts after a tenth of the steps (at most 1000)."""
    steps = budget.steps
    return DQNConfig(num_steps=steps, batch_size=budget.batch_size, buffer_size=min(10_000, steps),
                     learning_starts=min(1_000, steps // 10), gamma=gamma)


@register_experiment("target_update", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/target_update.md", extras=("rl",))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, schedules: tuple[str, ...] = SCHEDULES,
        tabular_periods: tuple[int, ...] = (100, 1000, 3000, 10000, 30000), adaptive_k0: int = 30,
        cartpole_periods: tuple[int, ...] = (100, 500), cartpole_k0: int = 100,
        eps: tuple[float, ...] = (0.3, 0.1, 0.03), decay_k0: float = 30.0, eval_episodes: int = 10,
        mdp_seed: int = 0, tabular_gamma: float = 0.9, cartpole_gamma: float = 0.99,
        resume: bool = False) -> Results:
    """Runs (or reuses) every tabular and CartPole cell, fits the exponents and writes table and figures.

    schedules: which families run, of SCHEDULES ("constant" periods, the "adaptive" schedule; both are needed
    for the best-constant fit); tabular_periods / cartpole_periods: the constant periods K compared;
    adaptive_k0 / cartpole_k0: K_0 of the adaptive schedule (ratio γ^{−2/3}, cap 1e5); eps: the thresholds of
    the sample counts and the fit; decay_k0: k_0 of the tabular inner step size; eval_episodes: greedy
    CartPole episodes per cell; mdp_seed: the random MDP; tabular_gamma / cartpole_gamma: the discounts (the
    adaptive ratio is γ^{−2/3}); resume: require run_dir to exist (finished cells are reused either way).
    """
    schedules = check_names("schedules", schedules, SCHEDULES)
    tabular_gamma = _check_gamma("tabular_gamma", tabular_gamma)
    cartpole_gamma = _check_gamma("cartpole_gamma", cartpole_gamma)
    _check_periods("tabular_periods", tabular_periods)
    _check_periods("cartpole_periods", cartpole_periods)
    _check_periods("adaptive_k0", (adaptive_k0,))
    _check_periods("cartpole_k0", (cartpole_k0,))
    _check_args(eps, decay_k0, eval_episodes, mdp_seed)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    tab_rows, tab_curves, fit = _tabular(experiment, schedules, tabular_periods, adaptive_k0, eps, decay_k0,
                                            mdp_seed, tabular_gamma)
    cp_rows, cp_curves = _cartpole(experiment, schedules, cartpole_periods, cartpole_k0, eval_episodes,
                                  cartpole_gamma)
    columns = ("part", "schedule", "syncs", "final_error",
               *[f"samples_eps={e}" for e in eps], "train_return", "greedy_return")
    rows = [{c: row.get(c) for c in columns} for row in tab_rows + cp_rows]
    notes = [
        f"Tabular: random MDP (seed {mdp_seed}, 10 states, 3 actions, γ = {tabular_gamma:g}), "
        f"{budget.seq_len * 1000:,} samples per cell, inner step 1/(1 + k/{decay_k0:g}); final_error = "
        "‖Q̄ − Q*‖_∞ at the end, samples_eps = samples after which it stays ≤ ε (the latest seed; - = never); "
        "both the worst over seeds.",
        f"Exponent fit (slope of log samples vs log 1/ε over ε = {list(eps)}): adaptive "
        f"{_fmt(fit['adaptive'])} (theory {fit['theory']['adaptive']:.2f}), best constant period per ε "
        f"{_fmt(fit['best_constant'])} (theory with the log factor {fit['theory']['constant']:.2f}).",
        f"CartPole-v1 DQN (gymnax): {budget.steps:,} environment steps per cell, batch {budget.batch_size}, "
        f"γ = {cartpole_gamma:g}; train_return = mean return of the last 10 training episodes, greedy_return = "
        f"greedy policy over {eval_episodes} episodes (max 500); both averaged over seeds; syncs = seed 0's.",
    ]
    figures = {"tabular_error": _error_figure(tab_curves), "sample_complexity": _fit_figure(fit, eps),
               "cartpole_returns": _return_figure(cp_curves)}
    return experiment.write(rows, columns=columns, title="Target update periods: constant vs adaptive",
                            notes=notes, figures=figures, extra={"fit": fit})


def _fmt(value: float | None) -> str:
    return "- (fewer than two ε reached)" if value is None else f"{value:.2f}"


def _tabular(experiment: Experiment, names: tuple[str, ...], periods: tuple[int, ...], k0: int,
             eps: tuple[float, ...], decay_k0: float, mdp_seed: int, gamma: float) -> tuple[list[dict], dict, dict]:
    mdp = random_mdp(mdp_seed, gamma=gamma)
    q_star = value_iteration(mdp)
    num_steps = experiment.budget.seq_len * 1000
    rows, curves, by_label = [], {}, {}
    for label, schedule in _schedules(names, periods, k0, mdp.gamma):
        results = []
        for seed in experiment.budget.seeds:
            settings = {"schedule": [schedule.k0, schedule.ratio, schedule.k_max], "seed": seed,
                        "num_steps": num_steps, "eps": list(eps), "decay_k0": decay_k0, "mdp_seed": mdp_seed}
            results.append(parts.cached_cell(
                experiment, f"tabular_{label}_seed{seed}", settings,
                lambda s=schedule, sd=seed: parts.tabular_cell(mdp, q_star, s, sd, num_steps, eps, decay_k0)))
        by_label[label] = [parts.worst_steps(results, e) for e in eps]
        row = {"part": "tabular", "schedule": label, "syncs": results[0]["syncs"],
               "final_error": max(r["final_error"] for r in results)}
        row.update({f"samples_eps={e}": s for e, s in zip(eps, by_label[label], strict=True)})
        rows.append(row)
        curves[label] = (results[0]["curve_steps"], np.max([r["curve_error"] for r in results], axis=0).tolist())
    constant = [label for label in by_label if label.startswith("constant")]
    best = []
    for i in range(len(eps)):
        reached = [by_label[label][i] for label in constant if by_label[label][i] is not None]
        best.append(min(reached) if reached else None)
    adaptive = by_label.get(f"adaptive_K0={k0}", [None] * len(eps))
    fit = {"adaptive": parts.fit_exponent(eps, adaptive), "best_constant": parts.fit_exponent(eps, best),
           "theory": parts.theory_slopes(eps), "eps": list(eps), "adaptive_samples": adaptive,
           "best_constant_samples": best}
    return rows, curves, fit


def _cartpole(experiment: Experiment, names: tuple[str, ...], periods: tuple[int, ...], k0: int,
              eval_episodes: int, gamma: float) -> tuple[list[dict], dict]:
    config = _dqn_config(experiment.budget, gamma)
    rows, curves = [], {}
    for label, schedule in _schedules(names, periods, k0, gamma):
        results = []
        for seed in experiment.budget.seeds:
            settings = {"schedule": [schedule.k0, schedule.ratio, schedule.k_max], "seed": seed,
                        "config": config._asdict(), "eval_episodes": eval_episodes}
            results.append(parts.cached_cell(
                experiment, f"cartpole_{label}_seed{seed}", settings,
                lambda s=schedule, sd=seed: parts.cartpole_cell(s, sd, config, eval_episodes)))
        train = [r["train_return"] for r in results if r["train_return"] is not None]
        rows.append({"part": "cartpole", "schedule": label, "syncs": results[0]["syncs"],
                     "train_return": float(np.mean(train)) if train else None,
                     "greedy_return": float(np.mean([r["greedy_return"] for r in results]))})
        binned = np.array([[np.nan if v is None else v for v in r["bin_returns"]] for r in results])
        with np.errstate(invalid="ignore"):
            curves[label] = (results[0]["bin_centres"], np.nanmean(binned, axis=0) if binned.size else binned)
    return rows, curves


def _error_figure(curves: dict) -> Figure:
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for label, (steps, error) in curves.items():
        adaptive = label.startswith("adaptive")
        axes.plot(steps, error, label=label, linewidth=2.0 if adaptive else 1.0, linestyle="-" if adaptive else "--")
    axes.set(xscale="log", yscale="log", xlabel="samples (gradient steps)", ylabel="‖Q̄ − Q*‖∞ (worst seed)",
             title="Tabular periodic Q-learning")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def _fit_figure(fit: dict, eps: tuple[float, ...]) -> Figure:
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    inv = np.array([1.0 / e for e in eps])
    for key, name, marker in (("adaptive_samples", "adaptive", "o"), ("best_constant_samples", "best constant", "s")):
        pts = [(x, s) for x, s in zip(inv, fit[key], strict=True) if s is not None]
        slope = fit["adaptive" if key == "adaptive_samples" else "best_constant"]
        if pts:
            xs, ys = np.array(pts).T
            axes.plot(xs, ys, marker=marker, linestyle="-", label=f"{name} (slope {_fmt(slope)})")
    anchor = next((s for s in fit["adaptive_samples"] if s is not None), None)
    if anchor is not None:
        i = fit["adaptive_samples"].index(anchor)
        axes.plot(inv, anchor * (inv / inv[i]) ** 2, color="gray", linestyle=":", label="slope 2 (1/ε²)")
    axes.set(xscale="log", yscale="log", xlabel="1/ε", ylabel="samples until ‖Q̄ − Q*‖∞ stays ≤ ε",
             title="Sample complexity exponent")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def _return_figure(curves: dict) -> Figure:
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for label, (centres, returns) in curves.items():
        axes.plot(centres, returns, marker="o", markersize=3, label=label,
                  linewidth=2.0 if label.startswith("adaptive") else 1.0)
    axes.set(xlabel="environment steps", ylabel="episode return (mean over seeds)", title="CartPole-v1 DQN")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure
