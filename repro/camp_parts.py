"""The CAMP experiment's pieces (repro/camp.py): the cells' configs, the evaluation of a trained classifier on
fresh test data at several missing rates, the table and the figure.

A cell is one (task, role, seed), trained by the shared trainer:
    task  "complementary" (zoo_complementary, class (z1 + z2) mod 3) or "digits" (zoo_digit_halves)
    role  "camp"           CAMP with the OT alignment (objective camp, λ_OT = 0.1)
          "camp_no_ot"     the same without the OT term (λ_OT = 0)
          "concat_mlp"     late fusion: one hidden layer of 64 ReLU on the concatenated embeddings (camp_concat)
          "concat_linear"  late fusion: a linear classifier on the concatenated embeddings (camp_concat, hidden 0)
Every cell trains with 30% of the modalities missing (the presets' data) and is then evaluated on test data with
each of the experiment's missing rates (same samples at every rate).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.configs import load_preset
from icml26zoo.models.config import ModelConfig
from icml26zoo.multimodal.camp_align import ot_alignment
from icml26zoo.multimodal.camp_regularisers import explain
from icml26zoo.repro.common import Experiment, parameter_count, seed_summary
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data.camp_data import ComplementaryOptions, complementary_examples, digit_halves

__all__ = ["EVAL_SEED", "ROLES", "TASKS", "accuracy_figure", "cell_base", "cell_name", "evaluate_cell", "rows_of"]

TASKS = ("complementary", "digits")
ROLES = ("camp", "camp_no_ot", "concat_mlp", "concat_linear")
PRESETS = {"complementary": "camp", "digits": "camp_digits"}
# A generator seed the datasets' splits do not use: fresh complementary test samples (and digits missingness).
EVAL_SEED = 20_261_206
EVAL_SAMPLES = 1024
# tiny=True (SMOKE): D = 16, J = 2, a few dozen samples; a check of the pipeline, not a result.
TINY_EXAMPLES = {"train_examples": 64, "eval_examples": 16}


def cell_name(task: str, role: str, seed: int) -> str:
    return f"{task}_{role}_seed{seed}"


def _role_config(config: TrainConfig, role: str) -> TrainConfig:
    options = dict(config.model.model_options)
    if role == "camp":
        return config
    if role == "camp_no_ot":
        objective = dict(config.objective_options) | {"ot_weight": 0.0}
        return dataclasses.replace(config, objective_options=tuple(objective.items()))
    concat = (("feature_dims", options["feature_dims"]), ("num_classes", options["num_classes"]),
              ("hidden", 64 if role == "concat_mlp" else 0))
    model = ModelConfig(name="camp_concat", d_model=config.model.d_model, num_layers=1, num_heads=1,
                        num_kv_heads=1, model_options=concat)
    return dataclasses.replace(config, model=model, objective="set_classification", objective_options=())


def cell_base(task: str, role: str, experiment: Experiment, *, tiny: bool) -> TrainConfig:
    """The task's preset for `role`, data under the run directory, one final evaluation, ~25 logged losses."""
    config = load_preset(PRESETS[task])
    data_options = dict(config.data.task_options)
    if tiny:
        data_options |= TINY_EXAMPLES
        options = dict(config.model.model_options) | {"prototypes": 2}
        config = dataclasses.replace(config, model=dataclasses.replace(config.model, d_model=16,
                                                                       model_options=tuple(options.items())))
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "data"),
                               task_options=tuple(data_options.items()))
    config = dataclasses.replace(config, data=data, eval_every=0, log_every=max(1, experiment.budget.steps // 25))
    return _role_config(config, role)


def eval_data(config: TrainConfig, missing_rate: float, *, tiny: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points [E, 2, F], present [E, 2], labels [E]) of the cell's task at `missing_rate`: fresh complementary
    samples (EVAL_SEED), or the digits' held-out split with missingness drawn from EVAL_SEED."""
    options = dict(config.data.task_options)
    if config.data.name == "zoo_complementary":
        count = 64 if tiny else EVAL_SAMPLES
        return complementary_examples(ComplementaryOptions(**options), count, np.random.SeedSequence(EVAL_SEED),
                                      missing_rate=missing_rate)
    return digit_halves("validation", 64 if tiny else None, missing_rate, EVAL_SEED)


def _measure(model: nnx.Module, config: TrainConfig, missing_rates: Sequence[float], *, tiny: bool
             ) -> dict[str, Any]:
    graphdef, state = nnx.split(model)
    is_camp = config.model.name == "camp"

    @jax.jit
    def predict(state, points, present):
        model = nnx.merge(graphdef, state)
        features = jnp.zeros(points.shape[:2] + (0,), jnp.float32)
        if not is_camp:
            return model(points, features, present), jnp.zeros(points.shape[:1], jnp.float32)
        out = model.evidence(*model.unpack(points, present))
        predicted = jnp.argmax(out.logits, axis=-1)
        top = explain(out.similarities, out.present, 1).classes[..., 0]  # [B, M]
        # Explanation agreement: the present modalities' most similar prototype is of the predicted class.
        agree = jnp.sum((top == predicted[:, None]).astype(jnp.float32) * out.present, 1) / jnp.sum(out.present, 1)
        return out.logits, agree

    measured: dict[str, Any] = {"accuracy": [], "agreement": []}
    for rate in missing_rates:
        points, present, labels = eval_data(config, rate, tiny=tiny)
        logits, agree = predict(state, jnp.asarray(points), jnp.asarray(present))
        measured["accuracy"].append(float(np.mean(np.argmax(np.asarray(logits), -1) == labels)))
        measured["agreement"].append(float(np.mean(np.asarray(agree))) if is_camp else None)
    if is_camp:
        prototypes = model.prototypes()
        measured["ot"] = float(ot_alignment(prototypes))
        measured["beta"] = [float(b) for b in model.beta()]
        measured["norm_error"] = float(jnp.max(jnp.abs(jnp.linalg.norm(prototypes, axis=-1) - 1.0)))
    return measured


def evaluate_cell(experiment: Experiment, name: str, config: TrainConfig, missing_rates: Sequence[float], *,
                  tiny: bool) -> dict[str, Any]:
    """{"accuracy": [per missing rate], "agreement": [...], and for CAMP "ot", "beta", "norm_error"} of the
    trained cell; kept in the cell's directory (missing.json), so a resumed run does not reopen the model."""
    def measure() -> dict[str, Any]:
        model = load_run(experiment.cell_dir(name), devices=jax.devices()[:1])[1]
        return _measure(model, config, missing_rates, tiny=tiny)

    return stored(experiment.cell_dir(name) / "missing.json", {"missing_rates": list(missing_rates)}, measure)


def rows_of(measured: Mapping[tuple[str, str], list[dict[str, Any]]], missing_rates: Sequence[float],
            configs: Mapping[tuple[str, str], TrainConfig]) -> tuple[list[dict], list[str]]:
    """One row per (task, role, test missing rate): accuracy mean over seeds, spread (max − min), per seed; the
    explanation agreement (CAMP), the final L_OT of the prototypes (CAMP) and the parameter count."""
    rows = []
    for (task, role), cells in measured.items():
        params = parameter_count(configs[task, role].model)
        for index, rate in enumerate(missing_rates):
            mean, width, per_seed = seed_summary([c["accuracy"][index] for c in cells])
            row = {"task": task, "role": role, "test_missing": rate, "accuracy": mean, "accuracy_spread": width,
                   "accuracy_per_seed": per_seed, "agreement": None, "L_OT": None, "params": params}
            if cells[0]["agreement"][index] is not None:
                row["agreement"] = statistics.fmean(c["agreement"][index] for c in cells)
                row["L_OT"] = statistics.fmean(c["ot"] for c in cells)
            rows.append(row)
    columns = ["task", "role", "test_missing", "accuracy", "accuracy_spread", "accuracy_per_seed", "agreement",
               "L_OT", "params"]
    return rows, columns


def accuracy_figure(rows: Sequence[Mapping[str, Any]], seeds: int) -> Figure:
    """Test accuracy against the test missing rate, one panel per task, a line per role (bars: min and max)."""
    tasks = list(dict.fromkeys(row["task"] for row in rows))
    figure = Figure(figsize=(5.0 * len(tasks), 4.0), layout="constrained")
    for axes, task in zip(np.atleast_1d(figure.subplots(1, len(tasks))), tasks, strict=True):
        for index, role in enumerate(dict.fromkeys(row["role"] for row in rows if row["task"] == task)):
            mine = [row for row in rows if row["task"] == task and row["role"] == role]
            per_seed = np.array([[float(v) for v in row["accuracy_per_seed"].split(", ")] for row in mine])
            mean = per_seed.mean(axis=1)
            error = np.stack([mean - per_seed.min(axis=1), per_seed.max(axis=1) - mean])
            axes.errorbar([row["test_missing"] for row in mine], mean, yerr=error, marker="o", capsize=3,
                          color=f"C{index}", label=role)
        axes.set(xlabel="test missing rate (per modality)", ylabel="test accuracy",
                 title=f"{task}, {seeds} seed(s)")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    return figure
