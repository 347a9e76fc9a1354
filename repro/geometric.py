"""What the five geometric experiments share: a family's model preset against its set_transformer baseline preset.

The five geometric papers (platonic, sola, pace, spikenet, apt; their experiments are repro/platonic.py,
repro/sola.py, repro/pace.py, repro/spikenet.py and repro/apt.py) each report one model preset against a
set_transformer baseline preset of about the same size (configs/geo_*.py, trained by `python -m
icml26zoo.train`). `train_family` trains both presets through the shared trainer, once per seed of the budget,
in cells of one run directory; `family_rows` turns the final evaluations into a table of means and spreads over
seeds; `training_figure` draws the training losses and the final metric per seed.

The budget maps onto the presets: `steps`, `batch_size` and seeds as they are; `seq_len` is the points per row
(the clouds' and spheres' `num_points` follow it; digits have 16 patches and the Darcy meshes up to 224 nodes,
which it must hold). `tiny=True` (the SMOKE and QUICK runs) shrinks every model to one layer of width 16
(platonic: 48 = 24 frames x 2 channels) and the generated datasets to a few dozen examples.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.configs import load_preset
from icml26zoo.geometric.spikenet_eval import accuracy
from icml26zoo.models import ModelConfig
from icml26zoo.repro.common import Budget, Experiment, check_names, parameter_count, spread
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import DataConfig, TrainConfig
from icml26zoo.train.data.point_sets import ShapesDataset, generate
from icml26zoo.validation import check_bool, check_int

__all__ = ["EVAL_SEED", "FAMILIES", "ROLES", "Family", "cell_base", "cell_name", "check_common", "family_rows",
           "metric_names", "open_model", "shapes_accuracy", "shapes_eval_sets", "train_family", "training_figure"]

# The shapes splits are seeded SeedSequence([config.seed, split index]); this single-entropy seed is another stream.
EVAL_SEED = 20_260_409
ROLES = ("model", "baseline")
TINY_WIDTH = {"d_model": 16, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "mlp_dim": 32}
TINY_EXAMPLES = (("train_examples", 32), ("eval_examples", 8))


@dataclasses.dataclass(frozen=True)
class Family:
    """One geometric paper's comparison.

    Attributes:
      name: the experiment name (also the family module under icml26zoo.geometric for most).
      model: the model's preset (configs/<model>.py); baseline: the set_transformer baseline's preset.
      page: the paper page reporting the FULL run.
      task: "classification" (eval accuracy, higher is better) or "regression" (eval relative L2, lower).
      points_option: the data option the budget's seq_len sets (None: the dataset's point count is fixed).
      tiny_model / tiny_baseline: ModelConfig changes of `tiny=True` (model_options merged into the preset's).
      tiny_data: task options of `tiny=True` (the examples counts are always shrunk too, where the dataset has them).
      min_points: the smallest seq_len the dataset allows at the FULL and tiny sizes.
    """

    name: str
    model: str
    baseline: str
    page: str
    task: str
    points_option: str | None = "num_points"
    tiny_model: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tiny_baseline: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tiny_data: tuple[tuple[str, Any], ...] = TINY_EXAMPLES
    min_points: tuple[int, int] = (1, 1)


FAMILIES = {
    "platonic": Family(
        "platonic", "geo_platonic_shapes", "geo_shapes_baseline", "docs/papers/platonic_transformer.md",
        "classification", tiny_model={"d_model": 48, "num_layers": 1, "num_heads": 24},
        tiny_baseline=TINY_WIDTH),
    "sola": Family(
        "sola", "geo_sola_sphere", "geo_sphere_baseline", "docs/papers/sola.md", "regression",
        tiny_model=TINY_WIDTH | {"model_options": (("neighbours", 4),)}, tiny_baseline=TINY_WIDTH,
        min_points=(17, 5)),
    "pace": Family(
        "pace", "geo_pacenet_digits", "geo_digits_baseline", "docs/papers/pace_attention.md", "classification",
        points_option=None, tiny_model=TINY_WIDTH | {"model_options": (("sketch_rank", 8),)},
        tiny_baseline=TINY_WIDTH, tiny_data=(), min_points=(16, 16)),
    "spikenet": Family(
        "spikenet", "geo_spikenet_shapes", "geo_shapes_baseline", "docs/papers/spikenet.md", "classification",
        tiny_model=TINY_WIDTH | {"model_options": (("num_neighbors", 4), ("downsample", 2))},
        tiny_baseline=TINY_WIDTH, min_points=(16, 8)),
    "apt": Family(
        "apt", "geo_apt_darcy", "geo_darcy_baseline", "docs/papers/apt.md", "regression", points_option=None,
        tiny_model=TINY_WIDTH | {"model_options": (("num_latents", 4), ("latent_layers", 1), ("fourier_features", 8),
                                                   ("radius", 0.5))},
        tiny_baseline=TINY_WIDTH,
        tiny_data=(("grid", 12), ("coarse", 12), ("near_well", 6), ("high_gradient", 6), *TINY_EXAMPLES),
        min_points=(224, 24)),
}


def metric_names(family: Family) -> tuple[str, ...]:
    """The trainer's final eval metrics a family reports: accuracy and loss, or the relative L2 (eval/loss)."""
    return ("eval/accuracy", "eval/loss") if family.task == "classification" else ("eval/loss",)


def check_budget(family: Family, budget: Budget, *, tiny: bool) -> None:
    """ValueError when budget.seq_len cannot hold the family's points (named, with the bound)."""
    least = family.min_points[1 if tiny else 0]
    if budget.seq_len < least:
        size = "tiny" if tiny else "preset"
        raise ValueError(f"budget.seq_len (the points per row) must be >= {least} for {family.name} at the {size} "
                         f"size, got {budget.seq_len}")


def _merge_options(base: tuple[tuple[str, Any], ...], changes: Sequence[tuple[str, Any]]) -> tuple:
    merged = dict(base)
    merged.update(dict(changes))
    return tuple(merged.items())


def _resize(model: ModelConfig, changes: Mapping[str, Any]) -> ModelConfig:
    changes = dict(changes)
    options = changes.pop("model_options", ())
    return dataclasses.replace(model, **changes, model_options=_merge_options(model.model_options, options))


def cell_base(family: Family, role: str, experiment: Experiment, *, tiny: bool) -> TrainConfig:
    """The preset of `role` ("model" or "baseline") sized by the budget (see the module docstring), its data
    under the run directory, one final evaluation, ~25 logged losses."""
    config = load_preset(family.model if role == "model" else family.baseline)
    budget = experiment.budget
    options: list[tuple[str, Any]] = list(config.data.task_options)
    if family.points_option is not None:
        options.append((family.points_option, budget.seq_len))
    if tiny:
        options += list(family.tiny_data)
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "data"),
                               task_options=_merge_options((), options))
    model = config.model
    if tiny:
        model = _resize(model, family.tiny_model if role == "model" else family.tiny_baseline)
    steps = budget.steps
    # The preset's warmup (30 steps) when the run is longer, else a tenth of it.
    warmup = config.optim.warmup_steps if config.optim.warmup_steps < steps else max(1, steps // 10)
    return dataclasses.replace(config, model=model, data=data, eval_every=0, log_every=max(1, steps // 25),
                               optim=dataclasses.replace(config.optim, warmup_steps=warmup))


def cell_name(family: Family, role: str, seed: int) -> str:
    return f"{role}_seed{seed}"


def train_family(family: Family, experiment: Experiment, *, roles: Sequence[str] = ROLES,
                 tiny: bool = False) -> dict[str, dict[str, Any]]:
    """Trains (or reads back) every (role, seed) cell; returns {role: {"config", "params", "summaries"}}."""
    roles = check_names("roles", roles, ROLES)
    # One device: the models are small, and a batch need not divide a (possibly virtual) device count.
    devices = jax.devices()[:1]
    trained = {}
    for role in roles:
        base = cell_base(family, role, experiment, tiny=tiny)
        summaries = []
        for seed in experiment.budget.seeds:
            config = experiment.cell_config(base, seed=seed, checkpoints=1)
            summaries.append(experiment.train_cell(cell_name(family, role, seed), config, devices=devices))
        trained[role] = {"config": base, "params": parameter_count(base.model), "summaries": summaries}
    return trained


def open_model(experiment: Experiment, family: Family, role: str, seed: int) -> nnx.Module:
    """The trained model of cell (role, seed), reopened from its checkpoint."""
    return load_run(experiment.cell_dir(cell_name(family, role, seed)), devices=jax.devices()[:1])[1]


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values)



def family_rows(family: Family, trained: Mapping[str, Mapping[str, Any]],
                extra: Mapping[str, Mapping[str, list[float]]] | None = None) -> tuple[list[dict], list[str]]:
    """One row per role: preset, model name, parameters, each metric's mean over seeds, its spread (max − min;
    None with one seed) and the per-seed values; `extra` {role: {column: per-seed values}} adds columns the same
    way. Returns (rows, columns)."""
    rows, columns = [], ["role", "preset", "model", "params"]
    for role, result in trained.items():
        config = result["config"]
        row = {"role": role, "preset": family.model if role == "model" else family.baseline,
               "model": config.model.name, "params": result["params"]}
        per_metric = {metric.split("/")[-1] if family.task == "classification" else "relative_l2":
                      [float(s[metric]) for s in result["summaries"]] for metric in metric_names(family)}
        per_metric |= dict((extra or {}).get(role, {}))
        for column, values in per_metric.items():
            row |= {column: _mean(values), f"{column}_spread": spread(values),
                    f"{column}_per_seed": ", ".join(f"{v:.4f}" for v in values)}
        rows.append(row)
    for column in rows[0]:
        if column not in columns:
            columns.append(column)
    return rows, columns


def training_figure(experiment: Experiment, family: Family, trained: Mapping[str, Mapping[str, Any]],
                    rows: Sequence[Mapping[str, Any]], metric: str, *, ylabel: str) -> Figure:
    """Left: training loss against step (mean over seeds) per role; right: the final `metric` per seed (dots) and
    its mean (bar) per role."""
    figure = Figure(figsize=(11.0, 3.8), layout="constrained")
    left, right = figure.subplots(1, 2)
    for role, result in trained.items():
        curves = [experiment.metrics(cell_name(family, role, seed), "train/loss") for seed in experiment.budget.seeds]
        length = min(len(steps) for steps, _ in curves)
        if length:
            left.plot(curves[0][0][:length], np.mean([values[:length] for _, values in curves], axis=0),
                      label=f"{role}: {result['config'].model.name}")
    left.set(xlabel="step", ylabel="train loss, mean over seeds", yscale="log", title=f"{family.name}: training")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    for index, row in enumerate(rows):
        values = [float(v) for v in str(row[f"{metric}_per_seed"]).split(", ")]
        right.bar(index, row[metric], color=f"C{index}", alpha=0.5)
        right.scatter([index] * len(values), values, color=f"C{index}", zorder=3)
    right.set_xticks(range(len(rows)), [f"{r['role']}\n{r['model']}" for r in rows])
    right.set(ylabel=ylabel, title=f"final eval, {len(experiment.budget.seeds)} seed(s)")
    right.grid(True, axis="y", alpha=0.3)
    return figure


def shapes_eval_sets(data: DataConfig, num_examples: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"canonical": (points [E, P, 3], labels [E]), "rotated": the same clouds, each randomly rotated}, drawn by
    the zoo_shapes generator of `data`'s options from a seed the splits do not use."""
    check_int("num_examples", num_examples)
    options = ShapesDataset().options(data)
    seed = np.random.SeedSequence(EVAL_SEED)
    return {pose: generate(options, num_examples, seed, rotate=pose == "rotated") for pose in ("canonical", "rotated")}


def shapes_accuracy(experiment: Experiment, family: Family, trained: Mapping[str, Mapping[str, Any]], *,
                    eval_clouds: int, batch: int) -> dict[str, dict[str, list[float]]]:
    """{role: {"accuracy_canonical": per seed, "accuracy_rotated": per seed}} of every trained shapes cell on the
    same `eval_clouds` fresh clouds, canonical and rotated (the trainer's own eval is the rotated split). Kept in
    each cell's directory (poses.json), so a resumed run does not reopen finished cells."""
    out: dict[str, dict[str, list[float]]] = {}
    data = next(iter(trained.values()))["config"].data
    sets: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for role in trained:
        for seed in experiment.budget.seeds:
            def measure(role: str = role, seed: int = seed) -> dict[str, float]:
                if not sets:
                    sets.update(shapes_eval_sets(data, eval_clouds))
                model = open_model(experiment, family, role, seed)
                return {f"accuracy_{pose}": accuracy(model, points, labels, min(batch, eval_clouds))
                        for pose, (points, labels) in sets.items()}

            path = experiment.cell_dir(cell_name(family, role, seed)) / "poses.json"
            for column, value in stored(path, {"eval_clouds": eval_clouds, "batch": batch}, measure).items():
                out.setdefault(role, {}).setdefault(column, []).append(value)
    return out


def check_common(budget: Budget, family: Family, *, tiny: bool, eval_clouds: int | None = None) -> None:
    """The checks every family's `run` makes before writing anything."""
    check_bool("tiny", tiny)
    check_budget(family, budget, tiny=tiny)
    if eval_clouds is not None:
        check_int("eval_clouds", eval_clouds)


def common_notes(family: Family, budget: Budget, trained: Mapping[str, Mapping[str, Any]], *, tiny: bool) -> list[str]:
    """The notes every family's results.md starts with: what was trained and what the columns mean."""
    models = ", ".join(f"{role} `{r['config'].model.name}` ({r['params']:,} parameters)" for role, r in trained.items())
    size = ("tiny=True: every model shrunk to one layer of width 16 (platonic 48) and the generated data to a few "
            "dozen examples, a check of the pipeline, not a result" if tiny else "the presets' sizes")
    lines = [f"Presets `{family.model}` against `{family.baseline}` ({family.page}): {models}; {size}. Trained by "
             f"the shared trainer ({budget.steps} steps of {budget.batch_size} rows of at most {budget.seq_len} "
             f"points, seeds {list(budget.seeds)}); one final evaluation on the whole eval split."]
    if family.task == "classification":
        lines.append("accuracy / loss: the trainer's final eval accuracy and cross-entropy on the eval split; "
                     "*_spread = max - min over seeds (- with one seed); *_per_seed: the values.")
    else:
        lines.append("relative_l2: the trainer's final eval loss, the quadrature-weighted relative L2 error of "
                     "the per-point prediction (0 = exact, 1 = predicting zero); *_spread = max - min over seeds "
                     "(- with one seed); *_per_seed: the values.")
    return lines
