"""Constant vs adaptive (geometric, K_n = ⌈K_0 γ^{−2n/3}⌉) target-update periods, against the exact Q*.

Paper: "The Role of Target Update Frequencies in Q-Learning" (Weissmann et al., ICML 2026, arXiv 2602.03911).

    python scripts/rl_target_update.py [--out bench_out] [--seeds 2] [--tabular-steps 1000000] [--dqn-steps 20000]

Runs periodic tabular Q-learning and a small DQN on the 10-state, 3-action random MDP (γ = 0.9) with several
constant periods and the adaptive schedule; prints final ‖Q̄ − Q*‖_∞ (target table / network, worst over seeds)
and the samples after which the error stays below each threshold; fits log(samples) against log(1/ε) for the
adaptive schedule and for the best constant period per ε (the theory predicts 2). Writes rl_target_update.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
from collections.abc import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from icml26zoo.rl.dqn import DQNTrace, train_dqn  # noqa: E402
from icml26zoo.rl.envs import random_mdp, value_iteration  # noqa: E402
from icml26zoo.rl.schedules import GeometricTargetSchedule, adaptive_schedule, constant_schedule  # noqa: E402
from icml26zoo.rl.tabular import QLearningTrace, periodic_q_learning, steps_to_reach  # noqa: E402

TAB_EPS = (0.3, 0.1, 0.03, 0.01)
DQN_EPS = (1.0, 0.3, 0.2)


def run_family(
    name: str,
    schedules: list[tuple[str, GeometricTargetSchedule]],
    runner: Callable[[GeometricTargetSchedule, jax.Array], QLearningTrace | DQNTrace],
    seeds: int,
    eps_list: tuple[float, ...],
) -> tuple[list[dict], dict[str, np.ndarray]]:
    rows, curves = [], {}
    for label, sched in schedules:
        errs = np.stack([np.asarray(runner(sched, jax.random.key(seed)).target_error) for seed in range(seeds)])
        worst = errs.max(axis=0)  # a threshold counts as reached only when every seed is below it
        reach = {str(e): steps_to_reach(worst, e) for e in eps_list}
        rows.append({"family": name, "schedule": label, "final_error": float(worst[-1]), "steps_to_reach": reach})
        curves[label] = worst
        cells = "  ".join(f"{'—' if reach[str(e)] is None else reach[str(e)]:>9}" for e in eps_list)
        print(f"{name:8s} {label:22s} {worst[-1]:10.4f}  {cells}", flush=True)
    return rows, curves


def fit_exponent(rows: list[dict], label_filter: Callable[[str], bool], eps_list: tuple[float, ...]) -> float | None:
    """Slope of log(samples) vs log(1/ε) over the ε each candidate reaches (best candidate per ε)."""
    pts = []
    for e in eps_list:
        steps = [r["steps_to_reach"][str(e)] for r in rows if label_filter(r["schedule"])]
        steps = [s for s in steps if s is not None]
        if steps:
            pts.append((np.log(1 / e), np.log(min(steps))))
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--tabular-steps", type=int, default=1_000_000)
    ap.add_argument("--dqn-steps", type=int, default=20_000)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    mdp = random_mdp(0)
    q_star = value_iteration(mdp)
    print(f"random MDP S={mdp.num_states} A={mdp.num_actions} γ={mdp.gamma}; max|Q*| = {np.abs(q_star).max():.3f}")

    tab_scheds = [(f"constant K={k}", constant_schedule(k)) for k in (100, 300, 1000, 3000, 10000, 30000)]
    tab_scheds += [(f"adaptive K0={k}", adaptive_schedule(k, mdp.gamma)) for k in (30, 100)]
    print(f"\n{'':8s} {'schedule':22s} {'final err':>10s}  " + "  ".join(f"{'ε=' + str(e):>9s}" for e in TAB_EPS))

    def tab_runner(sched: GeometricTargetSchedule, key: jax.Array) -> QLearningTrace:
        return periodic_q_learning(mdp, sched, key, args.tabular_steps, q_star, step_size=1.0, decay_k0=30.0)

    tab_rows, tab_curves = run_family("tabular", tab_scheds, tab_runner, args.seeds, TAB_EPS)

    dqn_scheds = [(f"constant K={k}", constant_schedule(k)) for k in (10, 100, 500, 2000)]
    dqn_scheds += [(f"adaptive K0={k}", adaptive_schedule(k, mdp.gamma)) for k in (10, 100)]
    print(f"\n{'':8s} {'schedule':22s} {'final err':>10s}  " + "  ".join(f"{'ε=' + str(e):>9s}" for e in DQN_EPS))

    def dqn_runner(sched: GeometricTargetSchedule, key: jax.Array) -> DQNTrace:
        return train_dqn(mdp, sched, key, args.dqn_steps, q_star)

    dqn_rows, dqn_curves = run_family("dqn", dqn_scheds, dqn_runner, args.seeds, DQN_EPS)

    fit = {
        "best_constant": fit_exponent(tab_rows, lambda s: s.startswith("constant"), TAB_EPS[:3]),
        "adaptive_K0=30": fit_exponent(tab_rows, lambda s: s == "adaptive K0=30", TAB_EPS[:3]),
    }
    print("\nsample complexity: slope of log(samples to ε) vs log(1/ε), ε ∈ {0.3, 0.1, 0.03} "
          f"(1/ε² → 2): best constant {fit['best_constant']}, adaptive {fit['adaptive_K0=30']}")

    result = {"mdp": {"S": mdp.num_states, "A": mdp.num_actions, "gamma": mdp.gamma}, "seeds": args.seeds,
              "tabular_steps": args.tabular_steps, "dqn_steps": args.dqn_steps, "rows": tab_rows + dqn_rows,
              "fit_slope": fit}
    (out / "rl_target_update.json").write_text(json.dumps(result, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, curves, title in ((axes[0], tab_curves, "tabular periodic Q-learning"), (axes[1], dqn_curves, "DQN")):
        for label, curve in curves.items():
            stride = max(1, curve.size // 2000)
            t = np.arange(1, curve.size + 1)[::stride]
            ax.plot(t, curve[::stride], label=label, lw=2.0 if label.startswith("adaptive") else 1.0,
                    ls="-" if label.startswith("adaptive") else "--")
        ax.set(xscale="log", yscale="log", xlabel="gradient steps (samples)", ylabel="‖Q̄ − Q*‖∞ (worst seed)",
               title=title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "rl_target_update.png", dpi=120)
    print(f"wrote {out / 'rl_target_update.json'} and {out / 'rl_target_update.png'}")


if __name__ == "__main__":
    main()
