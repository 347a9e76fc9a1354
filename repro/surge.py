"""SURGE ("Approximation and Training Free Particle Filter for Diffusion Surrogate", ICML 2026): SMC over
diffusion paths with Girsanov weights against plain guidance, the exact Kalman filter and the EnKF.

Two systems (`repro/surge_parts.py`), each with a diffusion surrogate whose score is analytic:

- `linear_gaussian`: a 4-D linear-Gaussian transition, so the Kalman filter of the discretised reverse chain's
  own transition is the exact filtering posterior (`kalman_chain`; `kalman_system` is the Kalman filter of the
  true A, Q, and its distance to the exact one is the diffusion's discretisation);
- `lorenz63`: Lorenz-63 with additive model noise, x observed; no exact answer, so the scores are RMSE to the
  truth, against the stochastic ensemble Kalman filter (`enkf`) with as many members as particles.

Each seed simulates a trajectory and its observations and runs, for every guidance scale λ:

- `surge`: the zoo's SURGE (`icml26zoo.assimilation.surge_filter`, a reconstruction): guided proposal, twisted
  Girsanov weights, ESS-triggered systematic resampling, a resampling to equal weights after each cycle;
- `guidance`: the same guided paths with the weights dropped (DPS-style plain guidance, the biased baseline).

Rows aggregate the seeds (mean ± standard deviation over seeds). Nothing is trained, so `resume` only requires
`run_dir` to exist and the run is recomputed. The `Budget` fields name the sizes: `steps` = assimilation
cycles, `batch_size` = particles N, `seq_len` = reverse-diffusion steps K, `seeds` = seeds.

    from icml26zoo import repro
    results = repro.run("surge", "runs/surge", budget="quick")

From a shell: `python -m icml26zoo.repro surge [--smoke | --quick] --out DIR [systems=linear_gaussian,lorenz63]
[methods=surge,guidance]
[guidance_scales=0,0.5,1,2] [ess_threshold=0.5] [inflation=1.0]`.
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo import assimilation as da
from icml26zoo.repro import surge_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, mean_std_text
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_interval, check_non_negative

__all__ = ["FULL", "METHODS", "QUICK", "SMOKE", "SMOKE_ARGS", "SYSTEMS", "run"]

FULL = Budget(steps=100, batch_size=1024, seq_len=100, seeds=(0, 1, 2))
QUICK = Budget(steps=30, batch_size=256, seq_len=20, seeds=(0, 1, 2))
# Both systems and methods at one λ, 3 cycles of 64 particles through 4 diffusion steps, one seed.
SMOKE = Budget(steps=3, batch_size=64, seq_len=4, seeds=(0,))
SMOKE_ARGS = {"guidance_scales": (1.0,)}

METHODS = parts.METHODS
SYSTEMS = ("linear_gaussian", "lorenz63")
SCORES = ("err_kalman", "var_ratio", "rmse_truth", "ess_min", "logZ_err")
COLUMNS = ("system", "method", "lambda", *SCORES)


def _spread(values: list[float]) -> str:
    """mean ± standard deviation over seeds (± 0 for one seed), "-" when undefined (NaN)."""
    if not values or np.any(np.isnan(values)):
        return "-"
    return mean_std_text(values)


def _row(system: str, method: str, lam: str, per_seed: list[dict[str, float]]) -> dict[str, str]:
    """One table row: each score as mean ± std over seeds, "-" where a method has no such score."""
    row = {"system": system, "method": method, "lambda": lam}
    for score in SCORES:
        present = all(score in scores for scores in per_seed)
        row[score] = _spread([scores[score] for scores in per_seed]) if present else "-"
    return row


def linear_gaussian_scores(seed: int, *, budget: Budget, methods: tuple[str, ...],
                           guidance_scales: tuple[float, ...], config: da.SurgeConfig,
                           curves: dict[str, np.ndarray] | None) -> dict[tuple[str, str], dict[str, float]]:
    """(method, λ) -> scores of one seed on the linear-Gaussian task, the two Kalman filters included; fills
    `curves` (label -> per-cycle error, and "ess " + label -> ESS_min / N) when given."""
    task = parts.make_task(seed, cycles=budget.steps, config=config)
    found = {(name, "-"): scores for name, scores in parts.kalman_rows(task).items()}
    for method in methods:
        for lam in guidance_scales:
            trace = parts.run_particles(task, method, lam, seed=seed, config=config)
            scores = parts.particle_scores(task, trace)
            if method == "guidance":  # dropped weights: no evidence estimate, no weight health
                scores = {k: v for k, v in scores.items() if k not in ("ess_min", "logZ_err")}
            found[(method, f"{lam:g}")] = scores
            if curves is not None:
                label = f"{method} λ={lam:g}"
                curves[label] = np.sqrt(np.mean(parts.standardised_errors(task, trace) ** 2, axis=1))
                if method == "surge":
                    curves["ess " + label] = np.asarray(trace.ess_min)
    return found


def lorenz_scores(seed: int, *, budget: Budget, methods: tuple[str, ...], guidance_scales: tuple[float, ...],
                  config: da.SurgeConfig) -> dict[tuple[str, str], dict[str, float]]:
    """(method, λ) -> {rmse_truth, ess_min} of one seed on Lorenz-63, the EnKF (same ensemble size) included."""
    task = parts.make_lorenz_task(seed, cycles=budget.steps, num_particles=budget.batch_size)
    runs = [("enkf", "-", 0.0)] + [(m, f"{lam:g}", lam) for m in methods for lam in guidance_scales]
    found = {}
    for method, label, lam in runs:
        means, ess = parts.run_lorenz(task, method, lam, seed=seed, config=config)
        scores = {"rmse_truth": float(np.sqrt(np.mean((means - task.truth) ** 2)))}
        if method == "surge":
            scores["ess_min"] = float(np.min(ess))
        found[(method, label)] = scores
    return found


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


def rmse_figure(rows: list[dict[str, str]]) -> Figure:
    """Bars of the mean RMSE to the truth per (system, method, λ) (used when no linear-Gaussian curves exist)."""
    figure = Figure(figsize=(8, 4), layout="constrained")
    panel = figure.subplots()
    labels = [f"{r['system']} {r['method']} {r['lambda']}" for r in rows]
    values = [float(r["rmse_truth"].split(" ± ")[0]) for r in rows]
    panel.barh(labels, values)
    panel.set(xlabel="RMSE to the true state (mean over seeds)")
    return figure


@register_experiment("surge", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/surge.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, systems: tuple[str, ...] = SYSTEMS,
        methods: tuple[str, ...] = METHODS, guidance_scales: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0),
        ess_threshold: float = 0.5, inflation: float = 1.0, resume: bool = False) -> Results:
    """Filters each seed's linear-Gaussian trajectory with every method and λ; writes results.md/json and the
    figure `errors`.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      systems: a subset of SYSTEMS ("linear_gaussian", "lorenz63").
      methods: a subset of METHODS ("surge", "guidance").
      guidance_scales: the guidance scales λ >= 0 to run each method at.
      ess_threshold: SURGE resamples after a diffusion step whose ESS < ess_threshold · N.
      inflation: c in the guidance's variance inflation r_k² = c σ_k² / (α_k² + σ_k²).
      resume: require `run_dir` to exist (everything is recomputed).
    """
    methods = check_names("methods", methods, METHODS)
    systems = check_names("systems", systems, SYSTEMS)
    if not guidance_scales:
        raise ValueError("guidance_scales must name at least one λ >= 0, got none")
    for lam in guidance_scales:
        check_non_negative("guidance_scales[i]", lam, finite=True)
    check_interval("ess_threshold", ess_threshold, 0.0, 1.0)
    check_non_negative("inflation", inflation, finite=True)
    config = da.SurgeConfig(num_particles=budget.batch_size, num_steps=budget.seq_len, ess_threshold=ess_threshold,
                            inflation=inflation)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    per_seed: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    curves: dict[str, np.ndarray] = {}
    options = {"budget": budget, "methods": methods, "guidance_scales": guidance_scales, "config": config}
    for seed in budget.seeds:
        found = {}
        if "linear_gaussian" in systems:
            first = curves if seed == budget.seeds[0] else None
            found |= {("linear_gaussian", *key): v for key, v in
                      linear_gaussian_scores(seed, curves=first, **options).items()}
        if "lorenz63" in systems:
            found |= {("lorenz63", *key): v for key, v in lorenz_scores(seed, **options).items()}
        for key, scores in found.items():
            per_seed.setdefault(key, []).append(scores)
    rows = [_row(*key, scores) for key, scores in per_seed.items()]
    notes = [
        f"linear_gaussian: a 4-D system (two damped rotations, coordinates 1 and 3 observed with noise std "
        f"{parts.OBSERVATION_STD}) with an exact-score diffusion surrogate. lorenz63: Lorenz-63 (RK4, dt 0.01, "
        f"0.1 time units per cycle) with model noise variance {parts.LORENZ_NOISE_VAR}, x observed with noise std "
        f"{parts.LORENZ_OBSERVATION_STD}, the analytic surrogate, the stochastic EnKF as baseline. Mean ± std over "
        f"seeds {budget.seeds}. err_kalman: RMS of (posterior mean − exact Kalman mean) / Kalman std over cycles "
        "and coordinates; var_ratio: particle over Kalman variance; rmse_truth: RMS error to the true state; "
        "ess_min: smallest ESS/N of any cycle; logZ_err: mean per-cycle log-evidence error. kalman_chain is the "
        "exact answer (the Kalman filter of the discretised chain's own transition); kalman_system uses the true "
        "(A, Q). SURGE is the zoo's reconstruction (no official code).",
    ]
    figures = {"errors": error_figure({k: v for k, v in curves.items() if not k.startswith("ess ")},
                                      {k[4:]: v for k, v in curves.items() if k.startswith("ess ")})} if curves else {}
    if not figures:
        figures = {"rmse": rmse_figure(rows)}
    return experiment.write(
        rows, columns=COLUMNS, title="SURGE: Girsanov-weighted SMC over diffusion paths vs plain guidance vs Kalman",
        notes=notes, figures=figures,
        extra={"per_seed": {" ".join(key): s for key, s in per_seed.items()}, "ess_threshold": ess_threshold,
               "inflation": inflation, "guidance_scales": list(guidance_scales)})
