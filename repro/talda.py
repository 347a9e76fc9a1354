"""TALDA ("From Lyapunov Analysis to Algorithm Design in two-sided PL Minimax Optimization", ICML 2026): the
idealised Lyapunov function traced for GDA, AGDA and TALDA-R on two-sided PL games.

The diagnostic is Yang, Kiyavash, He's (2020) V = [Φ(x) − Φ*] + λ [Φ(x) − f(x, y)], Φ(x) = max_y f(x, y)
(`icml26zoo.optim.minimax.lyapunov`: Φ by inner gradient ascent, Φ* at the known saddle), evaluated at every
iterate of each method on each game:

- `quadratic_B0`, `quadratic_B1`, `quadratic_B10`: f = ½xᵀAx + xᵀBy − ½yᵀCy, spectra of A and C in [0.1, 1],
  ‖B‖₂ = 0, 1, 10 (decoupled, moderate, strongly coupled); saddle at 0;
- `yang2020`: Yang et al.'s nonconvex-nonconcave 1-D example x² + 3 sin²x sin²y − 4y² − 10 sin²y.

Methods: `gda` (simultaneous) and `agda` (alternating) with steps 1/L; `agda_theory`, AGDA with Yang et al.'s
theory steps τ_y = 1/L, τ_x = μ_y²/(18 L³); `talda`, the zoo's TALDA-R (**a reconstruction, experimental**:
the paper's update rule was not available) with τ_x = τ_y = 1/L and the surrogate weights of
`minimax.pl_surrogate_weights`.

These are pure optimisation traces (no model, no data): the shared trainer is not involved, so the harness's
resumable-cell clause does not apply; `resume` only requires `run_dir` to exist and everything is recomputed.
The `Budget` fields name the sizes instead: `steps` = iterations per method, `batch_size` = random starting
points per game and seed, `seq_len` = d_x = d_y of the quadratic games, `seeds` = seeds of the random
quadratic matrices and starting points.

    from icml26zoo import repro
    results = repro.run("talda", "runs/talda", budget="quick")

From a shell: `python -m icml26zoo.repro talda [--smoke | --quick] --out DIR [games=quadratic_B10,yang2020]
[methods=gda,agda,agda_theory,talda] [lam=0.1] [inner_steps=200] [tolerance=1e-8]`.
"""

from __future__ import annotations

import math
import os

import jax
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.repro import talda_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int, check_interval, check_positive

__all__ = ["FULL", "GAMES", "METHODS", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=300, batch_size=2, seq_len=4, seeds=(0,))
FULL = Budget(steps=3000, batch_size=8, seq_len=10, seeds=(0, 1, 2))
# Every method on a quadratic and the nonconvex game, 3 iterations from one start, d = 2, Φ by 10 ascent steps.
SMOKE = Budget(steps=3, batch_size=1, seq_len=2, seeds=(0,))
SMOKE_ARGS = {"games": ("quadratic_B1", "yang2020"), "inner_steps": 10}

GAMES = ("quadratic_B0", "quadratic_B1", "quadratic_B10", "yang2020")
METHODS = parts.METHODS
PLOT_FLOOR = 1e-30  # V reaches exactly 0 in float32 on some runs; the log plot shows it at this floor


def make_game(name: str, seed: int, dim: int) -> parts.Game:
    """The game `name` (one of GAMES) with its random matrices drawn from `seed`."""
    if name == "yang2020":
        return parts.yang_game()
    coupling = float(name.removeprefix("quadratic_B"))
    return parts.quadratic_game(jax.random.PRNGKey(seed), dim=dim, coupling=coupling)


def _check_args(lam: float, inner_steps: int, tolerance: float) -> None:
    check_positive("lam (the Lyapunov weight λ)", lam, finite=True)
    check_int("inner_steps", inner_steps)
    check_interval("tolerance (V_t <= tolerance * V_0)", tolerance, 0, 1, closed="neither")


def iterations_to(values: np.ndarray, tolerance: float) -> np.ndarray:
    """First t with V_t <= tolerance * V_0 per run, -1 where never (or diverged). values [S, K+1] -> int [S]."""
    with np.errstate(invalid="ignore"):
        hit = values <= tolerance * values[:, :1]
    return np.where(hit.any(axis=1), np.argmax(hit, axis=1), -1)


def summarise(game: parts.Game, method: str, values: np.ndarray, tries: np.ndarray, tolerance: float) -> dict:
    """One table row: median V at the start and the end, iterations to tolerance, monotonicity, cost."""
    reached = iterations_to(values, tolerance)
    hits = reached[reached >= 0]
    with np.errstate(invalid="ignore"):
        steps_down = np.diff(values, axis=1) <= 0
    tau_x, tau_y = parts.step_sizes(game, method)
    final = float(np.median(_diverged_as_inf(values[:, -1])))
    return {
        "game": game.name, "method": method, "tau_x": tau_x, "tau_y": tau_y,
        "V0": float(np.median(values[:, 0])), "V_final": final if math.isfinite(final) else "diverged",
        "diverged": f"{int(np.sum(~np.isfinite(values[:, -1])))}/{values.shape[0]}",
        "iters_to_tol": int(np.median(hits)) if 2 * hits.size >= reached.size else None,
        "reached": f"{hits.size}/{reached.size}",
        "V_nonincreasing": float(np.mean(steps_down)),
        # GDA/AGDA: ∇_x and ∇_y once; TALDA-R per try: ∇_y, ∇_x and both partials at the candidate for W.
        "grads_per_iter": 2.0 if method != "talda" else 4.0 * float(np.mean(tries)),
    }


def _diverged_as_inf(values: np.ndarray) -> np.ndarray:
    """NaN (a run that overflowed) as +inf, so that medians rank a diverged run above every finite one."""
    return np.where(np.isnan(values), np.inf, values)


# Overlapping curves (several methods often coincide) stay visible: wide faint lines under thin dashed ones.
STYLES = {"gda": {"linewidth": 4, "alpha": 0.45}, "agda": {"linewidth": 2.5, "linestyle": "--"},
          "agda_theory": {"linewidth": 1.5}, "talda": {"linewidth": 1.5, "linestyle": ":", "color": "black"}}


def lyapunov_figure(curves: dict[str, dict[str, np.ndarray]], tolerance: float) -> Figure:
    """One panel per game: median V (log scale; a diverged run counts as +inf) against the iteration, one line
    per method."""
    count = len(curves)
    cols = min(count, 2)
    rows = math.ceil(count / cols)
    figure = Figure(figsize=(6.2 * cols, 4.0 * rows), layout="constrained")
    axes = np.atleast_1d(figure.subplots(rows, cols, squeeze=False)).ravel()
    for panel, (game, by_method) in zip(axes, curves.items(), strict=False):
        for method, values in by_method.items():
            median = np.median(_diverged_as_inf(values), axis=0)
            panel.plot(np.maximum(median, PLOT_FLOOR), label=method, **STYLES[method])
        v0 = float(np.median(next(iter(by_method.values()))[:, 0]))
        panel.axhline(tolerance * v0, linestyle="--", color="gray", linewidth=1, label="tolerance x V0")
        panel.set(yscale="log", xlabel="iteration", ylabel="Lyapunov V (median over starts)", title=game,
                  ylim=(PLOT_FLOOR / 10, None))
        panel.grid(True, alpha=0.3)
        panel.legend(fontsize=8)
    for panel in axes[count:]:
        panel.set_visible(False)
    return figure


@register_experiment("talda", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/talda.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, games: tuple[str, ...] = GAMES,
        methods: tuple[str, ...] = METHODS, lam: float = 0.1, inner_steps: int = 200, tolerance: float = 1e-8,
        resume: bool = False) -> Results:
    """Traces V for each method on each game; writes results.md/json and the figure `lyapunov`.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      games: a subset of GAMES.
      methods: a subset of METHODS ("gda", "agda", "agda_theory", "talda").
      lam: λ, the weight of Φ(x) − f(x, y) in V (Yang et al.'s potential uses 1/10).
      inner_steps: gradient-ascent steps (size 1/L_yy) that estimate Φ(x) = max_y f(x, y) at each iterate.
      tolerance: "iterations to tolerance" counts steps until V_t <= tolerance * V_0.
      resume: require `run_dir` to exist (the traces are recomputed).
    """
    games = check_names("games", games, GAMES)
    methods = check_names("methods", methods, METHODS)
    _check_args(lam, inner_steps, tolerance)
    if budget.seq_len > 256:
        raise ValueError(f"budget.seq_len (the quadratic games' dimension) must be <= 256, got {budget.seq_len}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    rows, curves = [], {}
    for name in games:
        per_method = {method: ([], []) for method in methods}
        for seed in budget.seeds:
            game = make_game(name, seed, budget.seq_len)
            x0, y0 = game.starts(jax.random.PRNGKey(10_000 + seed), budget.batch_size)
            for method in methods:
                xs, ys, tries = parts.method_trace(game, method, x0, y0, budget.steps)
                per_method[method][0].append(parts.lyapunov_trace(game, xs, ys, lam=lam, inner_steps=inner_steps))
                per_method[method][1].append(np.asarray(tries))
        curves[name] = {}
        for method, (values, tries) in per_method.items():
            values = np.concatenate(values)
            curves[name][method] = values
            rows.append(summarise(game, method, values, np.concatenate(tries), tolerance))
    notes = [
        "V = [Φ(x) − Φ*] + λ[Φ(x) − f(x, y)] (Yang et al. 2020), λ = " f"{lam:g}, Φ by {inner_steps} inner ascent "
        "steps; medians over starts and seeds. TALDA-R is the zoo's reconstruction (the paper's update rule was "
        "not available). iters_to_tol: median first t with V_t <= " f"{tolerance:g} V_0 over the runs that got there "
        "(- when fewer than half did); diverged: runs whose V overflowed; V_nonincreasing: fraction of steps "
        "with V_(t+1) <= V_t.",
    ]
    stride = max(1, budget.steps // 500)  # results.json keeps at most ~500 points per curve
    return experiment.write(
        rows, columns=("game", "method", "tau_x", "tau_y", "V0", "V_final", "diverged", "iters_to_tol", "reached",
                       "V_nonincreasing", "grads_per_iter"),
        title="TALDA: the idealised Lyapunov function along GDA, AGDA and TALDA-R", notes=notes,
        figures={"lyapunov": lyapunov_figure(curves, tolerance)},
        extra={"lam": lam, "inner_steps": inner_steps, "tolerance": tolerance,
               "median_curves": {g: {m: _finite_list(np.median(_diverged_as_inf(v), axis=0)[::stride])
                                     for m, v in by.items()} for g, by in curves.items()}})


def _finite_list(values: np.ndarray) -> list[float | None]:
    """`values` as a JSON-safe list: NaN and inf (a diverged run) become None."""
    return [float(v) if math.isfinite(v) else None for v in values]
