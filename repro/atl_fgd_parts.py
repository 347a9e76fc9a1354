"""The ATL-FGD experiment's pieces (repro/atl_fgd.py): the cells' configs, the evaluation of a trained designer on
fresh hairpins (recovery, pair complementarity, base-pair F1 of the Nussinov fold, last-layer gate AUROC on true
pair edges), the table and the figure.

A cell is one (role, seed): "knn" trains preset atl_fgd_knn (RDesign-style static kNN, k = 8), "atl" preset
atl_fgd_atl (learned gates over k_max = 24 candidates, ρ = 8/24), "fgd" preset atl_fgd_distill (ATL + the FiLM
teacher), all through the shared trainer. "fgd_plain" (not a default role) is the leak check: atl_fgd_distill with
the *plain* teacher (z_i from an unmasked pass, so it sees s_i), whose teacher path should come to recover
nearly every base, while the context teacher's stays near what the context predicts. "fgd_annealed" (not a default
role) is "fgd" with the spec's schedules, which the presets leave constant: λ_T cosine-annealed from 1 to 0 and the
gate temperature from 1.0 to 0.3 over the run (objective option anneal_steps = the budget's steps). Budget: steps,
batch_size and seeds as they are; seq_len is the longest structure (max_length).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.bio.rna_fold import base_pair_f1, design_metrics, nussinov, pair_edge_auroc
from icml26zoo.configs import load_preset
from icml26zoo.repro.common import Experiment, seed_summary
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data.rna_hairpins import HairpinOptions, generate

__all__ = ["DEFAULT_ROLES", "EVAL_SEED", "METRICS", "PRESETS", "ROLES", "cell_base", "cell_name", "evaluate_cell",
           "metric_figure", "native_fold_f1", "role_rows"]

ROLES = ("knn", "atl", "fgd", "fgd_plain", "fgd_annealed")
DEFAULT_ROLES = ROLES[:3]
PRESETS = {"knn": "atl_fgd_knn", "atl": "atl_fgd_atl", "fgd": "atl_fgd_distill", "fgd_plain": "atl_fgd_distill",
           "fgd_annealed": "atl_fgd_distill"}
# The spec's schedules (role fgd_annealed): λ_T cosine 1 -> 0 and the gate temperature 1.0 -> 0.3 over the run.
ANNEALED_TAU = (1.0, 0.3)
METRICS = ("recovery", "pair_complementarity", "bp_f1", "gate_auroc", "teacher_recovery")
# A generator seed the dataset's splits (SeedSequence([seed, split])) do not use: fresh evaluation structures.
EVAL_SEED = 20_261_207
# tiny=True (SMOKE): width 8, one layer each side, a few dozen structures, a teacher of 4 steps.
TINY_MODEL = {"d_model": 8, "num_layers": 1}
TINY_OPTIONS = {"n_dec": 1}
TINY_DATA = {"train_examples": 16, "eval_examples": 4, "teacher_corpus": 16, "teacher_steps": 2,
             "teacher_layers": 1}


def cell_name(role: str, seed: int) -> str:
    return f"{role}_seed{seed}"


def cell_base(role: str, experiment: Experiment, *, tiny: bool, train_examples: int | None = None) -> TrainConfig:
    """The role's preset sized by the budget: structures of 24 .. seq_len nucleotides, data under the run
    directory (shared by the cells), one final evaluation, ~20 logged losses."""
    config = load_preset(PRESETS[role])
    steps, length = experiment.budget.steps, experiment.budget.seq_len
    data_options = dict(config.data.task_options) | {"max_length": length}
    if train_examples is not None:
        data_options["train_examples"] = train_examples
    model_changes: dict[str, Any] = {"max_seq_len": length}
    options = dict(config.model.model_options)
    if role == "fgd_plain":
        data_options["teacher_plain"] = 1
        options["teacher_mode"] = "plain"
    if tiny:
        data_options |= {k: v for k, v in TINY_DATA.items() if k in data_options}
        model_changes |= TINY_MODEL
        options |= TINY_OPTIONS
    if role == "fgd_annealed":
        options["gate_tau"] = ANNEALED_TAU[1]
        objective = dict(config.objective_options) | {"anneal_steps": steps, "tau_start": ANNEALED_TAU[0]}
        config = dataclasses.replace(config, objective_options=tuple(objective.items()))
    model = dataclasses.replace(config.model, **model_changes, model_options=tuple(options.items()))
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "data"),
                               task_options=tuple(data_options.items()))
    warmup = config.optim.warmup_steps if config.optim.warmup_steps < steps else max(1, steps // 10)
    return dataclasses.replace(config, model=model, data=data, eval_every=0, log_every=max(1, steps // 20),
                               optim=dataclasses.replace(config.optim, warmup_steps=warmup))


def eval_structures(config: TrainConfig, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`count` fresh structures of the cell's data options (fixed seed): (points [E, M, 18], weights [E, M],
    targets [E, M, 2])."""
    options = HairpinOptions(**dict(config.data.task_options))
    return generate(options, count, np.random.SeedSequence(EVAL_SEED))


def native_fold_f1(config: TrainConfig, count: int) -> float:
    """Mean base-pair F1 of the Nussinov fold of the native sequences: the fold metric's ceiling here."""
    _, weights, targets = eval_structures(config, count)
    scores = []
    for row in range(count):
        length = int(np.sum(weights[row] > 0))
        native, partner = targets[row, :length, 0].astype(int), targets[row, :length, 1].astype(int)
        scores.append(base_pair_f1(nussinov(native), partner))
    return float(np.mean(scores))


def _measure(model: nnx.Module, points: np.ndarray, weights: np.ndarray, targets: np.ndarray, gated: bool
             ) -> dict[str, float]:
    graphdef, state = nnx.split(model)

    @jax.jit
    def forward(state, points, weights):
        model = nnx.merge(graphdef, state)
        logits, aux = model.forward_points(points, jnp.zeros(points.shape[:2] + (0,)), weights)  # evaluation
        return jnp.argmax(logits, -1), aux["gates"][-1], aux["nbr_idx"], aux["nbr_mask"], aux["sequential"]

    designed, gates, nbr_idx, nbr_mask, sequential = (np.asarray(a) for a in forward(state, points, weights))
    native, partner = targets[..., 0].astype(int), targets[..., 1].astype(int)
    result = design_metrics(designed, native, partner, weights)
    result["gate_auroc"] = (pair_edge_auroc(gates, nbr_idx, nbr_mask, sequential, partner) if gated
                            else float("nan"))
    return result


def evaluate_cell(experiment: Experiment, role: str, seed: int, config: TrainConfig, *, structures: int
                  ) -> dict[str, float]:
    """{metric: value} of the trained cell on `structures` fresh hairpins (evaluation mode: no gate noise, no
    teacher); kept in the cell's directory (design.json), so a resumed run does not reopen the model."""
    def measure() -> dict[str, float]:
        model = load_run(experiment.cell_dir(cell_name(role, seed)), devices=jax.devices()[:1])[1]
        gated = dict(config.model.model_options).get("gate_kind", "concrete") != "none"
        return _measure(model, *eval_structures(config, structures), gated)

    path = experiment.cell_dir(cell_name(role, seed)) / "design.json"
    return stored(path, {"structures": structures}, measure)


def _summary(values: Sequence[float]) -> tuple[float | None, float | None, str]:
    if any(np.isnan(v) for v in values):
        return None, None, "-"
    return seed_summary(values)


def role_rows(measured: Mapping[str, list[dict[str, float]]]) -> tuple[list[dict], list[str]]:
    """One row per role: each metric's mean over seeds, spread (max - min) and per-seed values."""
    rows = []
    for role, cells in measured.items():
        row: dict[str, Any] = {"role": role, "preset": PRESETS[role]}
        for metric in METRICS:
            row[metric], row[f"{metric}_spread"], row[f"{metric}_per_seed"] = _summary([c[metric] for c in cells])
        rows.append(row)
    columns = ["role", "preset"] + [f"{m}{suffix}" for m in METRICS for suffix in ("", "_spread", "_per_seed")]
    return rows, columns


def metric_figure(rows: Sequence[Mapping[str, Any]], seeds: int) -> Figure:
    """Bars per role of recovery, pair complementarity and base-pair F1 (mean over seeds; bars: min and max)."""
    figure = Figure(figsize=(7.0, 3.8), layout="constrained")
    axes = figure.subplots()
    shown = METRICS[:3]
    width = 0.8 / len(rows)
    for index, row in enumerate(rows):
        per_seed = np.array([[float(v) for v in row[f"{m}_per_seed"].split(", ")] for m in shown])
        mean = per_seed.mean(axis=1)
        error = np.stack([mean - per_seed.min(axis=1), per_seed.max(axis=1) - mean])
        axes.bar(np.arange(len(shown)) + index * width, mean, width, yerr=error, capsize=3, color=f"C{index}",
                 label=f"{row['role']} ({row['preset']})")
    axes.set_xticks(np.arange(len(shown)) + width * (len(rows) - 1) / 2, list(shown))
    axes.set(ylim=(0, 1), ylabel="mean over fresh hairpins", title=f"RNA inverse folding, {seeds} seed(s)")
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=8)
    return figure
