"""The pieces of the target-update reproduction: resumable JSON cells, the two cell kinds, the exponent fit.

Cells are not trained by the shared trainer (Q-learning is not LM training), so they are cached here the same
way the harness caches trainer cells: ``<run_dir>/cells/<cell>/result.json`` holds the cell's settings and its
result; a finished cell is read back, and one stored with other settings is an error rather than a mix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence

import jax
import numpy as np

from icml26zoo.repro.common import Experiment
from icml26zoo.rl.cartpole_dqn import DQNConfig, episode_returns, greedy_returns, train_cartpole_dqn
from icml26zoo.rl.envs import FiniteMDP
from icml26zoo.rl.schedules import GeometricTargetSchedule
from icml26zoo.rl.tabular import periodic_q_learning, steps_to_reach

CURVE_POINTS = 120  # log-spaced samples of each error curve kept for the figures
RETURN_BINS = 20  # environment-step bins of the CartPole return curves


def cached_cell(experiment: Experiment, cell: str, settings: dict, compute: Callable[[], dict]) -> dict:
    """`compute()` for `cell`, or the stored result of a finished cell with the same `settings` (JSON-able)."""
    path = experiment.cell_dir(cell) / "result.json"
    settings = json.loads(json.dumps(settings))
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored["settings"] != settings:
            raise ValueError(f"cell {cell!r} in {str(experiment.run_dir)!r} was run with other settings "
                             f"({path}); use a new run_dir, or delete the cell to rerun it")
        return stored["result"]
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"settings": settings, "result": result}))
    tmp.replace(path)  # atomic: an interrupted cell leaves no half-written result behind
    return result


def log_grid(num_steps: int, points: int = CURVE_POINTS) -> np.ndarray:
    """Distinct 1-based step counts, log-spaced in [1, num_steps] (int64)."""
    return np.unique(np.geomspace(1, num_steps, points).astype(np.int64))


def tabular_cell(mdp: FiniteMDP, q_star: np.ndarray, schedule: GeometricTargetSchedule, seed: int, num_steps: int,
                 eps: Sequence[float], decay_k0: float) -> dict:
    """One periodic Q-learning run: final ‖Q̄ − Q*‖_∞, samples after which it stays ≤ ε, a log-sampled curve."""
    trace = periodic_q_learning(mdp, schedule, jax.random.key(seed), num_steps, q_star, step_size=1.0,
                                decay_k0=decay_k0)
    error = np.asarray(trace.target_error, np.float64)
    grid = log_grid(num_steps)
    return {"final_error": float(error[-1]), "syncs": int(np.asarray(trace.synced).sum()),
            "steps_to": {str(e): steps_to_reach(error, e) for e in eps},
            "curve_steps": grid.tolist(), "curve_error": error[grid - 1].tolist()}


def cartpole_cell(schedule: GeometricTargetSchedule, seed: int, config: DQNConfig, eval_episodes: int) -> dict:
    """One CartPole DQN run: mean return of the last 10 training episodes, greedy return, binned curve."""
    trace = jax.device_get(train_cartpole_dqn(schedule, jax.random.key(seed), config))
    ends, returns = episode_returns(trace)
    greedy = greedy_returns(trace.params, jax.random.key(10_000 + seed), hidden=config.hidden,
                            episodes=eval_episodes)
    edges = np.linspace(0, config.num_steps, RETURN_BINS + 1)
    bins = np.digitize(ends, edges[1:-1])
    curve = [float(returns[bins == b].mean()) if np.any(bins == b) else None for b in range(RETURN_BINS)]
    return {"train_return": float(returns[-10:].mean()) if returns.size else None,
            "episodes": int(returns.size), "greedy_return": float(greedy.mean()),
            "syncs": int(np.asarray(trace.synced).sum()), "bin_centres": ((edges[1:] + edges[:-1]) / 2).tolist(),
            "bin_returns": curve}


def fit_exponent(eps: Sequence[float], samples: Sequence[float | None]) -> float | None:
    """Least-squares slope of log(samples) against log(1/ε) over the ε reached (None where not);
    None with fewer than two points. Samples ∝ ε^{−p} gives p."""
    points = [(math.log(1.0 / e), math.log(s)) for e, s in zip(eps, samples, strict=True) if s is not None]
    if len(points) < 2:
        return None
    x, y = np.asarray(points).T
    return float(np.polyfit(x, y, 1)[0])


def theory_slopes(eps: Sequence[float]) -> dict[str, float]:
    """The slopes the bounds predict over these ε: 1/ε² -> 2 (adaptive); log(1/ε)/ε² -> 2 plus the local
    slope of the log factor (best constant period)."""
    log_factor = [math.log(1.0 / e) for e in eps]
    constant = fit_exponent(eps, [f / e**2 for f, e in zip(log_factor, eps, strict=True)])
    return {"adaptive": 2.0, "constant": float(constant) if constant is not None else 2.0}


def worst_steps(results: Sequence[dict], e: float) -> int | None:
    """Samples after which every seed stays ≤ ε (the latest seed), None if a seed never does."""
    steps = [r["steps_to"][str(e)] for r in results]
    return None if any(s is None for s in steps) else max(steps)
