"""The GeoCoupling experiment's pieces (repro/geocoupling.py): the cells' configs, the bi-level training of the
learned coupling in trainer segments, generation and the fold-and-label metrics, the table and the figure.

A cell is one (role, seed), all trained by the shared trainer from preset `geocoupling` (objective
geocoupling_codesign, dataset fold_and_label) at one budget of steps:
    sync      train_times="sync": t_x = t_s (the diagonal); generates along the diagonal
    random    train_times="random": MultiFlow's independent times; generates along the diagonal (as MultiFlow)
    learned   train_times="band" around the current curve; every `update_every` steps the run stops (the
              trainer's stop_after, a checkpoint there), the upper level measures the loss surface of the model
              at that checkpoint, moves the curve to the DP geodesic of its GP posterior mean, and the run
              resumes with the new curve in its objective options; generates along the final curve
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.bio import geocoupling as geo
from icml26zoo.bio import geocoupling_toy as toy
from icml26zoo.configs import load_preset
from icml26zoo.repro.common import Experiment, seed_summary
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.loop import train

__all__ = ["ROLES", "TIMES", "cell_base", "cell_name", "curve_figure", "evaluate_cell", "role_rows",
           "structure_leading", "train_learned"]

ROLES = ("sync", "random", "learned")
TIMES = {"sync": "sync", "random": "random", "learned": "band"}
# Generator seeds the dataset's splits do not use: the upper level's batch and the evaluation's prior noise.
SURFACE_SEED, SAMPLE_SEED = 20_260_634, 20_260_635
TINY_MODEL = {"d_model": 16, "num_layers": 1, "num_heads": 2, "mlp_dim": 32}
TINY_EXAMPLES = {"train_examples": 64, "eval_examples": 8}


def cell_name(role: str, seed: int) -> str:
    return f"{role}_seed{seed}"


def cell_base(role: str, experiment: Experiment, *, tiny: bool) -> TrainConfig:
    """Preset `geocoupling` with the role's training times, data under the run directory, no periodic eval."""
    config = load_preset("geocoupling")
    steps = experiment.budget.steps
    objective = dict(config.objective_options) | {"train_times": TIMES[role]}
    data_options = dict(config.data.task_options)
    model = config.model
    if tiny:
        data_options |= TINY_EXAMPLES
        model = dataclasses.replace(model, **TINY_MODEL)
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "data"),
                               task_options=tuple(data_options.items()))
    warmup = config.optim.warmup_steps if config.optim.warmup_steps < steps else max(1, steps // 10)
    return dataclasses.replace(config, model=model, data=data, eval_every=0, log_every=max(1, steps // 25),
                               objective_options=tuple(objective.items()),
                               optim=dataclasses.replace(config.optim, warmup_steps=warmup))


def _with_curve(config: TrainConfig, logits: np.ndarray) -> TrainConfig:
    options = dict(config.objective_options) | {"curve": tuple(float(v) for v in np.ravel(logits))}
    return dataclasses.replace(config, objective_options=tuple(options.items()))


def _surface_batch(size: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    points, tokens, _ = toy.fold_and_label(size, np.random.default_rng(SURFACE_SEED))
    return jnp.asarray(points), jnp.asarray(tokens), jnp.ones(tokens.shape, jnp.float32)


def _upper_level(model, cfg: geo.GeoCouplingConfig, design: int, batch: int) -> dict[str, Any]:
    """Loss surface of `model` at a design × design grid (common random numbers), the GP/DP geodesic and the
    fitted curve's logits."""
    points = geo.design_points(design, cfg.min_t)
    x1, s1, mask = _surface_batch(batch)
    losses = np.asarray(geo.loss_surface(model, x1, s1, mask, jnp.asarray(points), jax.random.key(SURFACE_SEED),
                                         cfg))
    curve, found = geo.geodesic_update(points, losses, cfg)
    return {"logits": np.asarray(curve.logits).tolist(), "path": found["path"].tolist(),
            "losses": losses.tolist()}


def train_learned(experiment: Experiment, config: TrainConfig, seed: int, *, update_every: int, design: int,
                  surface_batch: int) -> list[list[list[float]]]:
    """Trains the learned-coupling cell in segments of `update_every` steps through the shared trainer, moving
    the curve between segments (module docstring); returns the curve logits [2, J] used by each segment and
    the final one (a resumed experiment reads the updates it stored)."""
    workdir = experiment.cell_dir(cell_name("learned", seed))
    steps, knots = config.num_steps, dict(config.objective_options)["knots"]
    base = dataclasses.replace(config, checkpoint_every=update_every, keep_checkpoints=1)
    cfg = geo.GeoCouplingConfig(knots=knots, update_every=update_every)
    logits = [np.zeros((2, knots)).tolist()]
    for end in range(update_every, steps + 1, update_every):
        segment = _with_curve(base, np.asarray(logits[-1]))
        if not (workdir / "summary.json").is_file():
            train(segment, workdir, stop_after=end, devices=jax.devices()[:1], allow_config_change=True,
                  final_eval=False)
        if end == steps:
            break

        def update(end=end) -> dict[str, Any]:
            model = load_run(workdir, step=end, devices=jax.devices()[:1])[1]
            return _upper_level(model, cfg, design, surface_batch)

        logits.append(stored(workdir / f"curve_{end}.json", {"step": end, "design": design}, update)["logits"])
    if steps % update_every:
        train(_with_curve(base, np.asarray(logits[-1])), workdir, devices=jax.devices()[:1],
              allow_config_change=True, final_eval=False)
    return logits


def structure_leading(logits: np.ndarray, points: int = 101) -> float:
    """Fraction of τ on a uniform grid where γ_x(τ) ≥ γ_s(τ) (structure ahead of, or level with, sequence)."""
    times = np.asarray(geo.CouplingCurve(logits)(jnp.linspace(0.0, 1.0, points)))
    return float(np.mean(times[:, 0] >= times[:, 1] - 1e-6))


def mean_lead(logits: np.ndarray, points: int = 101) -> float:
    """Mean over a uniform τ grid of γ_x(τ) − γ_s(τ) (> 0: structure denoised ahead of sequence; 0 on the
    diagonal)."""
    times = np.asarray(geo.CouplingCurve(logits)(jnp.linspace(0.0, 1.0, points)))
    return float(np.mean(times[:, 0] - times[:, 1]))


def evaluate_cell(experiment: Experiment, role: str, seed: int, logits: np.ndarray, *, samples: int,
                  steps: int) -> dict[str, float]:
    """consistency / validity / diversity of `samples` structures generated with `steps` steps along the curve
    `logits` by the cell's trained denoiser; kept in the cell's directory (samples.json)."""
    workdir = experiment.cell_dir(cell_name(role, seed))

    def measure() -> dict[str, float]:
        model = load_run(workdir, devices=jax.devices()[:1])[1]
        mask = jnp.ones((samples, toy.NUM_RESIDUES), jnp.float32)
        x, s, _ = jax.jit(lambda key: geo.sample(model, jnp.asarray(logits), key, steps, mask))(
            jax.random.key(SAMPLE_SEED + seed))
        result = toy.metrics(np.asarray(x), np.asarray(s))
        result["structure_leading"] = structure_leading(np.asarray(logits))
        result["lead"] = mean_lead(np.asarray(logits))
        return result

    key = {"samples": samples, "steps": steps, "logits": np.asarray(logits).tolist()}
    return stored(workdir / "samples.json", key, measure)


METRICS = ("consistency", "validity", "diversity", "rmsd", "structure_leading", "lead")


def role_rows(measured: Mapping[str, list[dict[str, float]]]) -> tuple[list[dict], list[str]]:
    """One row per role: each metric's mean over seeds, spread (max − min) and per-seed values."""
    rows = []
    for role, cells in measured.items():
        row: dict[str, Any] = {"role": role}
        for metric in METRICS:
            row[metric], row[f"{metric}_spread"], row[f"{metric}_per_seed"] = seed_summary([c[metric] for c in cells])
        rows.append(row)
    columns = ["role", *[f"{m}{suffix}" for m in METRICS for suffix in ("", "_spread", "_per_seed")]]
    return rows, columns


def curve_figure(curves: Sequence[np.ndarray]) -> Figure:
    """The learned couplings (t_x on x, t_s on y), one line per seed, against the diagonal."""
    figure = Figure(figsize=(4.5, 4.5), layout="constrained")
    axes = figure.subplots()
    tau = jnp.linspace(0.0, 1.0, 101)
    axes.plot([0, 1], [0, 1], color="gray", linestyle="--", label="synchronous (diagonal)")
    for index, logits in enumerate(curves):
        times = np.asarray(geo.CouplingCurve(logits)(tau))
        axes.plot(times[:, 0], times[:, 1], color=f"C{index}", label=f"learned, seed {index}")
    axes.set(xlabel="structure time t_x", ylabel="sequence time t_s", xlim=(0, 1), ylim=(0, 1),
             title="Learned coupling (below the diagonal: structure leads)")
    axes.title.set_fontsize(9)
    axes.legend(fontsize=8)
    return figure
