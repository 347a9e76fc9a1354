"""SURGE ("Approximation and Training Free Particle Filter for Diffusion Surrogate", ICML 2026): SMC over
diffusion paths with Girsanov weights against plain guidance and the exact Kalman filter, linear-Gaussian.

The surrogate forecaster is the exact score of a 4-D linear-Gaussian transition (`repro/surge_parts.py`), so the
Kalman filter of the discretised reverse chain's own transition is the exact filtering posterior. Each seed
simulates a trajectory and its observations and runs, for every guidance scale λ:

- `surge`: the zoo's SURGE (`icml26zoo.assimilation.surge_filter`, a reconstruction): guided proposal, twisted
  Girsanov weights, ESS-triggered systematic resampling, a resampling to equal weights after each cycle;
- `guidance`: the same guided paths with the weights dropped (DPS-style plain guidance, the biased baseline).

Rows aggregate the seeds (mean ± standard deviation over seeds); `kalman_chain` (the exact answer) and
`kalman_system` (the Kalman filter of the true A, Q: its distance to the exact one is the diffusion's
discretisation) are the references. Nothing is trained, so `resume` only requires `run_dir` to exist and the
run is recomputed. The `Budget` fields name the sizes: `steps` = assimilation cycles, `batch_size` =
particles N, `seq_len` = reverse-diffusion steps K, `seeds` = seeds.

    from icml26zoo import repro
    results = repro.run("surge", "runs/surge", budget="quick")

From a shell: `python -m icml26zoo.repro surge [--smoke | --quick] --out DIR [methods=surge,guidance]
[guidance_scales=0,0.5,1,2] [ess_threshold=0.5] [inflation=1.0]`.
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo import assimilation as da
from icml26zoo.repro import surge_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_interval, check_non_negative

__all__ = ["FULL", "METHODS", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=100, batch_size=1024, seq_len=25, seeds=(0, 1, 2))
QUICK = Budget(steps=30, batch_size=256, seq_len=20, seeds=(0, 1, 2))
# Both methods at one λ, 3 cycles of 64 particles through 4 diffusion steps, one seed.
SMOKE = Budget(steps=3, batch_size=64, seq_len=4, seeds=(0,))
SMOKE_ARGS = {"guidance_scales": (1.0,)}

METHODS = parts.METHODS
SCORES = ("err_kalman", "var_ratio", "rmse_truth", "ess_min", "logZ_err")
COLUMNS = ("method", "lambda", *SCORES)


def _spread(values: list[float]) -> str:
    """mean ± standard deviation over seeds (± 0 for one seed), "-" when undefined (NaN)."""
    if not values or np.any(np.isnan(values)):
        return "-"
    return f"{np.mean(values):.4g} ± {np.std(values):.2g}"


def _row(method: str, lam: str, per_seed: list[dict[str, float]]) -> dict[str, str]:
    row = {"method": method, "lambda": lam}
    for score in SCORES:
        row[score] = _spread([scores[score] for scores in per_seed if score in scores]) if all(
            score in scores for scores in per_seed) else "-"
    return row


def error_figure(curves: dict[str, np.ndarray], ess: dict[str, np.ndarray]) -> Figure:
    """Left: RMS over coordinates of the standardised error to the Kalman mean per cycle (first seed); right:
    ESS_min / N per cycle (SURGE only)."""
    figure = Figure(figsize=(11, 4), layout="constrained")
    error_panel, ess_panel = figure.subplots(1, 2)
    for label, values in curves.items():
        error_panel.plot(np.arange(1, len(values) + 1), values, label=label,
                         linestyle="-" if label.startswith("surge") else "--")
    error_panel.set(xlabel="assimilation cycle", ylabel="(mean − Kalman mean) / Kalman std, RMS",
                    yscale="log", title="error to the exact posterior mean")
    for label, values in ess.items():
        ess_panel.plot(np.arange(1, len(values) + 1), values, label=label)
    ess_panel.set(xlabel="assimilation cycle", ylabel="ESS_min / N", ylim=(0, 1.05), title="SURGE weight health")
    for panel in (error_panel, ess_panel):
        panel.grid(True, alpha=0.3)
        panel.legend(fontsize=8)
    return figure


@register_experiment("surge", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/surge.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, methods: tuple[str, ...] = METHODS,
        guidance_scales: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0), ess_threshold: float = 0.5, inflation: float = 1.0,
        resume: bool = False) -> Results:
    """Filters each seed's linear-Gaussian trajectory with every method and λ; writes results.md/json and the
    figure `errors`.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      methods: a subset of METHODS ("surge", "guidance").
      guidance_scales: the guidance scales λ >= 0 to run each method at.
      ess_threshold: SURGE resamples after a diffusion step whose ESS < ess_threshold · N.
      inflation: c in the guidance's variance inflation r_k² = c σ_k² / (α_k² + σ_k²).
      resume: require `run_dir` to exist (everything is recomputed).
    """
    methods = check_names("methods", methods, METHODS)
    if not guidance_scales:
        raise ValueError("guidance_scales must name at least one λ >= 0, got none")
    for lam in guidance_scales:
        check_non_negative("guidance_scales[i]", lam, finite=True)
    check_interval("ess_threshold", ess_threshold, 0.0, 1.0)
    check_non_negative("inflation", inflation, finite=True)
    config = da.SurgeConfig(num_particles=budget.batch_size, num_steps=budget.seq_len, ess_threshold=ess_threshold,
                            inflation=inflation)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    per_seed: dict[tuple[str, str], list[dict[str, float]]] = {}
    curves, ess_curves = {}, {}
    for seed in budget.seeds:
        task = parts.make_task(seed, cycles=budget.steps, config=config)
        for name, scores in parts.kalman_rows(task).items():
            per_seed.setdefault((name, "-"), []).append(scores)
        for method in methods:
            for lam in guidance_scales:
                trace = parts.run_particles(task, method, lam, seed=seed, config=config)
                scores = parts.particle_scores(task, trace)
                if method == "guidance":  # dropped weights: no evidence estimate, no weight health
                    scores = {k: v for k, v in scores.items() if k not in ("ess_min", "logZ_err")}
                per_seed.setdefault((method, f"{lam:g}"), []).append(scores)
                if seed == budget.seeds[0]:
                    label = f"{method} λ={lam:g}"
                    curves[label] = np.sqrt(np.mean(parts.standardised_errors(task, trace) ** 2, axis=1))
                    if method == "surge":
                        ess_curves[label] = np.asarray(trace.ess_min)
    rows = [_row(method, lam, scores) for (method, lam), scores in per_seed.items()]
    notes = [
        f"Linear-Gaussian 4-D system (two damped rotations, coordinates 1 and 3 observed with noise std "
        f"{parts.OBSERVATION_STD}); exact-score diffusion surrogate; mean ± std over seeds {budget.seeds}. "
        "err_kalman: RMS of (posterior mean − exact Kalman mean) / Kalman std over cycles and coordinates "
        "(Monte-Carlo error alone gives about 1/√ESS); var_ratio: particle over Kalman variance; rmse_truth: "
        "RMS error to the true state; ess_min: smallest ESS/N of any cycle; logZ_err: mean per-cycle "
        "log-evidence error. kalman_chain is the exact answer (the Kalman filter of the discretised chain's own "
        "transition); kalman_system uses the true (A, Q). SURGE is the zoo's reconstruction (no official code).",
    ]
    return experiment.write(
        rows, columns=COLUMNS, title="SURGE: Girsanov-weighted SMC over diffusion paths vs plain guidance vs Kalman",
        notes=notes, figures={"errors": error_figure(curves, ess_curves)},
        extra={"per_seed": {f"{m} λ={lam}": s for (m, lam), s in per_seed.items()}, "ess_threshold": ess_threshold,
               "inflation": inflation, "guidance_scales": list(guidance_scales)})
