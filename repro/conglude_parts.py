"""The ConGLUDe experiment's pieces (repro/conglude.py): cell configs, the evaluation set (fresh proteins and a
ligand library), the evaluation of a trained model on the four tasks, the table and the figure.

A cell is one (role, seed): role "conglude" trains preset `conglude` (VN-EGNN), role "baseline" preset
`conglude_baseline` (no message passing, no coordinates), both through the shared trainer. Budget: steps,
batch_size and seeds as they are; seq_len is the largest protein (proteins have 2/3·seq_len .. seq_len residues).
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

from icml26zoo.bio import conglude_data as data
from icml26zoo.bio import conglude_metrics as metrics
from icml26zoo.configs import load_preset
from icml26zoo.repro.common import Experiment, seed_summary
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig

__all__ = ["EVAL_SEED", "METRICS", "PRESETS", "ROLES", "EvalSet", "cell_base", "cell_name", "evaluate_cell",
           "eval_set", "metric_figure", "role_rows"]

ROLES = ("conglude", "baseline")
PRESETS = {"conglude": "conglude", "baseline": "conglude_baseline"}
EVAL_SEED = 20_261_207  # not a dataset split's seed: fresh proteins and ligands
METRICS = ("dcc_success", "vs_auroc", "vs_ef1", "fishing_rank", "fishing_top1", "selection")
TINY_MODEL = {"d_model": 8, "num_layers": 1}
TINY_EXAMPLES = {"train_examples": 8, "eval_examples": 4}
FISHING_PANEL = 16  # the true protein and up to 15 proteins without a pocket of the ligand's type


def cell_name(role: str, seed: int) -> str:
    return f"{role}_seed{seed}"


def cell_base(role: str, experiment: Experiment, *, tiny: bool) -> TrainConfig:
    """The role's preset sized by the budget (proteins of 2/3·seq_len .. seq_len residues), data under the run
    directory, one final evaluation."""
    config = load_preset(PRESETS[role])
    steps, length = experiment.budget.steps, experiment.budget.seq_len
    options = dict(config.data.task_options) | {"min_length": max(24, 2 * length // 3), "max_length": length}
    changes: dict[str, Any] = {"max_seq_len": length}
    if tiny:
        options |= TINY_EXAMPLES
        changes |= TINY_MODEL
    model = dataclasses.replace(config.model, **changes)
    data_config = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "data"),
                                      task_options=tuple(options.items()))
    warmup = config.optim.warmup_steps if config.optim.warmup_steps < steps else max(1, steps // 10)
    return dataclasses.replace(config, model=model, data=data_config, eval_every=0, log_every=max(1, steps // 25),
                               optim=dataclasses.replace(config.optim, warmup_steps=warmup))


@dataclasses.dataclass(frozen=True)
class EvalSet:
    """Fresh proteins (padded arrays, their Protein records) and a ligand library (vectors [L, 136], types [L],
    −1 for decoys)."""

    points: np.ndarray
    features: np.ndarray
    weights: np.ndarray
    proteins: list
    ligands: np.ndarray
    ligand_types: np.ndarray


def eval_set(config: TrainConfig, proteins: int, actives_per_type: int, decoys: int) -> EvalSet:
    """`proteins` fresh proteins of the cell's sizes (half with two pockets) and a library of actives_per_type
    ligands per pocket type plus `decoys` decoys, from EVAL_SEED."""
    options = dict(config.data.task_options)
    rng = np.random.default_rng(EVAL_SEED)
    size = options["max_length"]
    records = [data.protein(int(rng.integers(options["min_length"], size + 1)), 1 + index % 2, rng)
               for index in range(proteins)]
    points = np.zeros((proteins, size, 3), np.float32)
    features = np.zeros((proteins, size, data.RESIDUE_FEATURES), np.float32)
    weights = np.zeros((proteins, size), np.float32)
    for index, record in enumerate(records):
        length = len(record.coordinates)
        points[index, :length], features[index, :length], weights[index, :length] = (
            record.coordinates, record.features, 1.0)
    types = np.concatenate([np.repeat(np.arange(data.NUM_POCKET_TYPES), actives_per_type), -np.ones(decoys, int)])
    return EvalSet(points, features, weights, records, data.ligands(types, rng), types)


def _forward(model: nnx.Module, evaluation: EvalSet) -> dict[str, np.ndarray]:
    graphdef, state = nnx.split(model)

    @jax.jit
    def run(state, points, features, weights, ligands):
        model = nnx.merge(graphdef, state)
        out = model(points, features, weights)
        ell_p, ell_b = model.encode_ligands(ligands)
        return {"vn_positions": out.vn_positions, "confidence": out.confidence, "pockets": out.pockets,
                "protein": out.protein, "ell_p": ell_p, "ell_b": ell_b}

    arrays = (evaluation.points, evaluation.features, evaluation.weights, evaluation.ligands)
    return {key: np.asarray(value) for key, value in run(state, *map(jnp.asarray, arrays)).items()}


def measure(model: nnx.Module, evaluation: EvalSet) -> dict[str, float]:
    """The six METRICS of a model on an evaluation set (docs/papers/conglude.md defines each)."""
    out = _forward(model, evaluation)
    merged = [metrics.merge_virtual_nodes(out["vn_positions"][i], out["confidence"][i], out["pockets"][i])
              for i in range(len(evaluation.proteins))]
    protein_scores = out["protein"] @ out["ell_p"].T  # [proteins, ligands]
    found, aurocs, efs, ranks, selections = [], [], [], [], []
    for index, record in enumerate(evaluation.proteins):
        found.extend(metrics.dcc_success(merged[index], record.centres).tolist())
        active = np.isin(evaluation.ligand_types, record.types)
        aurocs.append(metrics.auroc(protein_scores[index], active))
        efs.append(metrics.enrichment_factor(protein_scores[index], active))
        kind = int(record.types[0])
        others = [j for j, other in enumerate(evaluation.proteins) if kind not in other.types][: FISHING_PANEL - 1]
        panel = [index, *others]
        for ligand in np.flatnonzero(evaluation.ligand_types == kind):
            ranks.append(metrics.target_rank(protein_scores[panel, ligand], 0))
        if len(record.types) == 2:
            for pocket, pocket_type in enumerate(record.types):
                for ligand in np.flatnonzero(evaluation.ligand_types == pocket_type):
                    selections.append(metrics.pocket_selection(merged[index], out["ell_b"][ligand],
                                                               record.centres[pocket]))
    return {"dcc_success": float(np.mean(found)), "vs_auroc": float(np.mean(aurocs)), "vs_ef1": float(np.mean(efs)),
            "fishing_rank": float(np.mean(ranks)), "fishing_top1": float(np.mean(np.asarray(ranks) == 1)),
            "selection": float(np.mean(selections)) if selections else float("nan")}


def evaluate_cell(experiment: Experiment, role: str, seed: int, evaluation: EvalSet, sizes: Mapping[str, int]
                  ) -> dict[str, float]:
    """METRICS of the trained cell on the evaluation set, kept in the cell's directory (tasks.json)."""
    def compute() -> dict[str, float]:
        model = load_run(experiment.cell_dir(cell_name(role, seed)), devices=jax.devices()[:1])[1]
        return measure(model, evaluation)

    return stored(experiment.cell_dir(cell_name(role, seed)) / "tasks.json", dict(sizes), compute)


def role_rows(measured: Mapping[str, list[dict[str, float]]]) -> tuple[list[dict], list[str]]:
    """One row per role: each metric's mean over seeds, its spread (max − min) and per-seed values."""
    rows = []
    for role, cells in measured.items():
        row: dict[str, Any] = {"role": role}
        for name in METRICS:
            row[name], row[f"{name}_spread"], row[f"{name}_per_seed"] = seed_summary([cell[name] for cell in cells])
        rows.append(row)
    columns = ["role"] + [c for name in METRICS for c in (name, f"{name}_spread")]
    return rows, columns + [f"{name}_per_seed" for name in METRICS]


def metric_figure(rows: Sequence[Mapping[str, Any]]) -> Figure:
    """Per metric, each role's per-seed values (dots) and mean (bar)."""
    figure = Figure(figsize=(11.0, 3.0), layout="constrained")
    axes = figure.subplots(1, len(METRICS))
    for ax, name in zip(axes, METRICS, strict=True):
        for position, row in enumerate(rows):
            values = [float(v) for v in row[f"{name}_per_seed"].split(", ")]
            ax.bar(position, row[name], color=f"C{position}", alpha=0.5)
            ax.plot([position] * len(values), values, "k.")
        ax.set_xticks(range(len(rows)), [row["role"] for row in rows], fontsize=7)
        ax.set_title(name, fontsize=9)
    return figure
