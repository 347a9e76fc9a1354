"""Adam loss spikes from a decaying second moment (Bai et al., "Adaptive Preconditioners Trigger Loss Spikes in
Adam", arXiv 2506.04805): constant-learning-rate runs traced step by step, the five stages labelled, and the
gradient-directional-curvature predictor checked against every spike's onset.

Settings (pure JAX, no model zoo training: the shared trainer is not involved; each finished trace is kept in
`run_dir/cells/<setting>_seed<seed>.json` with the options it depends on, so `resume` reuses it):

- `quadratic`: L = ½ Σ h_i θ_i² (h geometric in [0.1, 1]) with N(0, noise²) gradient noise, probed on the
  exact loss; Adam β1 = 0 at `quadratic_lr`.
- `mlp`: a 4-16-16-1 tanh MLP fitting sin(wᵀx) on 128 points with random mini-batches, probed on the
  full-data loss (the fixed probe batch); Adam β1 = 0 at `mlp_lr`.

The `Budget` fields: `steps` = Adam steps per run, `batch_size` = the MLP's mini-batch rows (at most 128),
`seq_len` = the quadratic's dimension, `seeds` = the noise / data seeds. See `adam_spikes_parts` for the
trace and the stage detector.
"""

from __future__ import annotations

import math
import os

import jax
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.repro import adam_spikes_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.validation import check_int, check_interval, check_positive

__all__ = ["FULL", "QUICK", "SETTINGS", "SMOKE", "SMOKE_ARGS", "run", "summarise"]

QUICK = Budget(steps=1500, batch_size=32, seq_len=4, seeds=(0,))
FULL = Budget(steps=4000, batch_size=32, seq_len=4, seeds=(0, 1, 2))
# Every code path in a few CPU-seconds (compiling the two traces dominates): β2 = 0.9 and η = 0.05 make the
# 2-D quadratic decouple and spike within 200 steps (onset ~85), so the stage and lead summaries run too.
SMOKE = Budget(steps=200, batch_size=8, seq_len=2, seeds=(0,))
SMOKE_ARGS = {"b2": 0.9, "quadratic_lr": 0.05}

SETTINGS = ("quadratic", "mlp")
STAGE_COLORS = {1: "#ffffff", 2: "#cfe3f7", 3: "#fde3b3", 4: "#f7b6b0", 5: "#c9ebc4"}


def _check_args(b2: float, eps: float, noise: float, quadratic_lr: float, mlp_lr: float, power_iters: int,
                spike_factor: float, budget: Budget) -> None:
    check_interval("b2 (Adam's second-moment decay)", b2, 0, 1, closed="neither")
    check_interval("eps", eps, 0, 1, closed="neither")
    check_positive("noise (the quadratic's gradient noise)", noise, finite=True)
    check_positive("quadratic_lr", quadratic_lr, finite=True)
    check_positive("mlp_lr", mlp_lr, finite=True)
    check_int("power_iters", power_iters)
    check_interval("spike_factor (loss / baseline at a spike onset)", spike_factor, 1, math.inf, closed="neither")
    if budget.seq_len > 1024:
        raise ValueError(f"budget.seq_len (the quadratic's dimension) must be <= 1024, got {budget.seq_len}")
    if budget.batch_size > 128:
        raise ValueError(f"budget.batch_size (the MLP mini-batch) must be <= 128 rows, got {budget.batch_size}")


def _stage2_start(stages: np.ndarray, before: int) -> int | None:
    """First step of the last run of stage 2 that ends before step `before` (None if there is none)."""
    index = np.flatnonzero(stages[:before] == 2)
    if index.size == 0:
        return None
    start = int(index[-1])
    while start > 0 and stages[start - 1] == 2:
        start -= 1
    return start


def summarise(setting: str, seed: int, learning_rate: float, record: dict[str, np.ndarray], stages: np.ndarray,
              episodes: list[parts.Episode]) -> dict:
    """One table row: spike count, the first spike's onset, the predictor's lead over every onset, the v decay
    before the first spike, and how many steps the predictor fired outside spikes."""
    leads = [e.onset - e.predicted for e in episodes if e.predicted is not None]
    first = episodes[0] if episodes else None
    row = {"setting": setting, "seed": seed, "lr": learning_rate, "spikes": len(episodes),
           "missed": sum(e.predicted is None for e in episodes),
           "first_onset": first.onset if first else None, "first_predicted": first.predicted if first else None,
           "first_lead": leads[0] if first and first.predicted is not None else None,
           "min_lead": min(leads) if leads else None, "peak_over_base": None, "v_drop": None,
           "decoupled_steps": None}
    if first is not None:
        base = float(np.median(record["loss"][max(0, first.onset - 50):first.onset]))
        row["peak_over_base"] = float(record["loss"][first.peak] / base)
        start4 = first.onset if first.predicted is None else first.predicted
        start2 = _stage2_start(stages, start4)
        if start2 is not None:
            row["v_drop"] = float(record["v_max"][start2] / record["v_max"][start4])
            row["decoupled_steps"] = start4 - start2
    in_spike = np.isin(stages, (4, 5))
    row["fires_outside"] = int(np.sum((record["directional"] > 2) & ~in_spike))
    row["stage_counts"] = "/".join(str(int(np.sum(stages == s))) for s in range(1, 6))
    return row


def trace_figure(title: str, record: dict[str, np.ndarray], stages: np.ndarray) -> Figure:
    """Four stacked panels against the step, shaded by stage: probe loss, v (median and max), η λ_max and η λ_dir
    against 2, and the decoupling ratio Σg²/Σv_{t−1}."""
    figure = Figure(figsize=(7.5, 8.0), layout="constrained")
    axes = figure.subplots(4, 1, sharex=True)
    steps = np.arange(stages.size)
    panels = [
        ({"probe loss": record["loss"]}, "log", "loss"),
        ({"v median": record["v_median"], "v max": record["v_max"]}, "log", "second moment v"),
        ({"η λ_max(PH)": record["sharpness"], "η λ_dir": record["directional"]}, "linear", "η × curvature"),
        ({"Σg² / Σv_(t−1)": np.clip(record["ratio"], 1e-12, 1e6)}, "log", "decoupling ratio"),
    ]
    for panel, (series, scale, label) in zip(axes, panels, strict=True):
        _shade(panel, stages)
        for name, values in series.items():
            panel.plot(steps, values, linewidth=1, label=name)
        panel.set(yscale=scale, ylabel=label)
        panel.grid(True, alpha=0.3)
        panel.legend(fontsize=7, loc="upper left")
    axes[2].axhline(2.0, color="black", linestyle="--", linewidth=1)
    axes[2].set_ylim(0, max(3.0, min(6.0, float(np.nanmax(record["sharpness"])) * 1.1)))
    axes[3].axhline(0.1, color="gray", linestyle=":", linewidth=1)
    axes[-1].set_xlabel("step")
    legend = " | ".join(f"{s}: {name}" for s, name in parts.STAGE_NAMES.items())
    axes[0].set_title(f"{title}\nshading = stage ({legend})", fontsize=9)
    return figure


def _shade(panel, stages: np.ndarray) -> None:
    change = np.flatnonzero(np.diff(stages)) + 1
    bounds = np.concatenate([[0], change, [stages.size]])
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        if stages[start] != 1:
            panel.axvspan(start - 0.5, end - 0.5, color=STAGE_COLORS[int(stages[start])], linewidth=0)


@register_experiment("adam_spikes", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/adam_spikes.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, settings: tuple[str, ...] = SETTINGS,
        b2: float = 0.99, eps: float = 1e-8, noise: float = 1e-6, quadratic_lr: float = 1e-2, mlp_lr: float = 1e-3,
        power_iters: int = 5, spike_factor: float = 100.0, resume: bool = False) -> Results:
    """Traces Adam (β1 = 0) at a constant learning rate on each setting and seed; writes results.md/json and a
    `<setting>_trace` figure (the first seed) per setting.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      settings: a subset of SETTINGS.
      b2: Adam's β2 (the spike needs v to outlive the gradient: 0.99 here; see the paper page).
      eps: Adam's ε (outside the square root, as optax).
      noise: the quadratic's gradient-noise standard deviation.
      quadratic_lr, mlp_lr: the constant learning rates η.
      power_iters: warm-started power iterations per step for λ_max(P^{1/2} H P^{1/2}).
      spike_factor: a spike's onset is the first step whose probe loss exceeds this multiple of the median of
        the 50 steps before it.
      resume: require `run_dir` to exist (finished traces are reused).
    """
    settings = check_names("settings", settings, SETTINGS)
    _check_args(b2, eps, noise, quadratic_lr, mlp_lr, power_iters, spike_factor, budget)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    rows, figures, first_traces = [], {}, {}
    for setting in settings:
        for seed in budget.seeds:
            if setting == "quadratic":
                problem = parts.diagonal_quadratic(dim=budget.seq_len, noise=noise, learning_rate=quadratic_lr)
            else:
                problem = parts.mlp_regression(seed=seed, batch_size=budget.batch_size, learning_rate=mlp_lr)
            key = {"steps": budget.steps, "batch_size": budget.batch_size, "dim": budget.seq_len, "b2": b2,
                   "eps": eps, "noise": noise, "learning_rate": problem.learning_rate, "power_iters": power_iters}
            record = stored(experiment.cell_dir(f"{setting}_seed{seed}").with_suffix(".json"), key,
                            lambda problem=problem, seed=seed: parts.trace(
                                problem, steps=budget.steps, b2=b2, eps=eps, power_iters=power_iters,
                                key=jax.random.PRNGKey(seed)))
            record = {name: np.asarray(values, np.float64) for name, values in record.items()}
            stages, episodes = parts.detect_stages(record["loss"], record["ratio"], record["sharpness"],
                                                   record["directional"], spike_factor=spike_factor)
            rows.append(summarise(setting, seed, problem.learning_rate, record, stages, episodes))
            if seed == budget.seeds[0]:
                figures[f"{setting}_trace"] = trace_figure(
                    f"{setting}, Adam β1=0 β2={b2:g} η={problem.learning_rate:g}, seed {seed}", record, stages)
                first_traces[setting] = {"stages": stages.tolist(),
                                         "episodes": [e.__dict__ for e in episodes]}
    notes = [
        "Adam with β1 = 0 at a constant learning rate; every quantity is measured before each update on a fixed "
        "probe loss (the exact quadratic; the MLP's full 128-point loss). Spike: probe loss > "
        f"{spike_factor:g} × the median of the 50 steps before (onset), until it falls below 0.1 × its peak. "
        "first_predicted: first step of the uninterrupted run of η λ_dir > 2 reaching the onset (λ_dir: curvature "
        "of P^{1/2}HP^{1/2} along P^{1/2}g); lead = onset − that step (min_lead over all spikes); missed: spikes "
        "with η λ_dir <= 2 at the onset. v_drop: v_max at the start of the stage-2 run before the first spike / "
        "v_max when the predictor fires (decoupled_steps apart). fires_outside: steps with η λ_dir > 2 outside "
        "stages 4-5. stage_counts: steps in stages 1/2/3/4/5.",
    ]
    columns = ("setting", "seed", "lr", "spikes", "missed", "first_onset", "first_predicted", "first_lead",
               "min_lead", "peak_over_base", "v_drop", "decoupled_steps", "fires_outside", "stage_counts")
    return experiment.write(rows, columns=columns, title="Adam loss spikes at a constant learning rate",
                            notes=notes, figures=figures,
                            extra={"b2": b2, "eps": eps, "noise": noise, "power_iters": power_iters,
                                   "spike_factor": spike_factor, "first_seed": first_traces})
