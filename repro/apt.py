"""Reproduction: APT (local GNO + global Perceiver, gated fusion) against its set_transformer baseline on Darcy AMR.

Paper: Ju et al., "Adaptive Physics Transformer with Fused Global-Local Attention for Subsurface Energy Systems"
(ICML 2026, arXiv 2602.11208); docs/papers/apt.md. Three parts:
  1. training: the presets `geo_apt_darcy` and `geo_darcy_baseline` (same data, objective and recipe) trained by
     the shared trainer on zoo_darcy_amr (one-step pressure increments on adaptively refined nodes), once per
     seed; the trainer's final eval relative L2 error;
  2. symmetry: `apt.equivariance_errors` of the untrained model (both local operators; and the in-group
     duplication with the model's own neighbour cap, `apt_checks.capped_duplication_error`) and of the baseline
     on the first validation meshes;
  3. discretisation convergence (invariant 3): an untrained APT's outputs at 16 fixed query nodes on random node
     sets of growing size N (uniform; adaptive with quadrature weights w = 1/ρ; adaptive with w = 1, the
     pitfall), relative to those on a regular grid (`zoo/geometric/apt_checks.py`).

    python -m icml26zoo.repro apt --out runs/repro/apt                 # FULL: 300 steps per cell, 3 seeds
    python -m icml26zoo.repro apt --quick                              # tiny models, 30 steps
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from icml26zoo.geometric.apt import compiled_forward, equivariance_errors
from icml26zoo.geometric.apt_checks import (
    QUERIES,
    build_probe_model,
    capped_duplication_error,
    cluster_density,
    query_outputs,
    query_points,
    sample_points,
)
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.repro import geometric
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, markdown_table
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train.config import DataConfig
from icml26zoo.train.data.darcy_amr import DarcyOptions
from icml26zoo.train.data.features import open_rows
from icml26zoo.validation import check_int

__all__ = ["FULL", "OPERATORS", "QUICK", "QUICK_ARGS", "SAMPLINGS", "SMOKE", "SMOKE_ARGS", "convergence_table", "run",
           "symmetry_rows"]

FAMILY = geometric.FAMILIES["apt"]
# The page's runs: the presets' 300 steps of 8 meshes of up to 224 nodes, now 3 seeds.
FULL = Budget(steps=300, batch_size=8, seq_len=224, seeds=(0, 1, 2))
QUICK = Budget(steps=30, batch_size=8, seq_len=24, seeds=(0,))
QUICK_ARGS = {"tiny": True, "convergence_sizes": (64, 128, 256), "convergence_draws": 2, "grid": 16}
# One cell (the model; the baseline runs the same code) of 2 steps at the tiny size, the smallest probes.
SMOKE = Budget(steps=2, batch_size=4, seq_len=24, seeds=(0,))
# (The convergence set of 32 nodes has the shape of the 4 x 4 reference grid plus its 16 queries: one compile.)
SMOKE_ARGS = {"roles": ("model",), "tiny": True, "operators": ("attention",), "convergence_sizes": (32,),
              "convergence_draws": 1, "grid": 4, "meshes": 2}
OPERATORS = ("attention", "kernel")
SAMPLINGS = {"uniform": "uniform, w = 1", "adaptive_quadrature": "adaptive, w = 1/ρ",
             "adaptive_unweighted": "adaptive, w = 1 (no quadrature)"}
# The probe's neighbour cap: above the densest neighbourhood (about 250 nodes within r = 0.08 at N = 2048).
PROBE_CAP = 320


@register_experiment("apt", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page=FAMILY.page)
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, roles: Sequence[str] = geometric.ROLES,
        tiny: bool = False, operators: Sequence[str] = OPERATORS,
        convergence_sizes: Sequence[int] = (256, 512, 1024, 2048), convergence_draws: int = 3, grid: int = 64,
        meshes: int = 4, resume: bool = False) -> Results:
    """Trains the apt and baseline presets per seed, measures symmetry and convergence; writes results.md/json,
    training.png and convergence.png.

    Args:
      run_dir: the experiment's directory (cells, the generated dataset, results).
      budget: steps, batch size, nodes per row (seq_len, >= the meshes' node count: 224, tiny 24) and seeds.
      roles: which of "model" (geo_apt_darcy) and "baseline" (geo_darcy_baseline) to train and measure.
      tiny: shrink the models, the data and the convergence probe (the smoke and quick runs).
      operators: APT's local operators ("attention", the preset's, and "kernel") in the symmetry table.
      convergence_sizes: node counts N of the convergence sets (increasing, each > 16, the query nodes).
      convergence_draws: random node sets per N and sampling (>= 1); the table gives their mean.
      grid: the reference's regular grid is grid x grid nodes (>= 2).
      meshes: validation meshes of the symmetry table (1 .. the eval split's: 64, tiny 8).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    roles = check_names("roles", roles, geometric.ROLES)
    operators = check_names("operators", operators, OPERATORS)
    geometric.check_common(budget, FAMILY, tiny=tiny)
    sizes = tuple(convergence_sizes)
    for size in sizes:
        check_int("convergence_sizes[i]", size, minimum=QUERIES + 1)
    if not sizes or list(sizes) != sorted(set(sizes)):
        raise ValueError(f"convergence_sizes must be strictly increasing node counts > {QUERIES}, got {list(sizes)}")
    check_int("convergence_draws", convergence_draws)
    check_int("grid", grid, minimum=2)
    # The symmetry table reads validation meshes: at most the split's (the tiny data's, or the preset's).
    split = dict(FAMILY.tiny_data)["eval_examples"] if tiny else DarcyOptions().eval_examples
    check_int("meshes", meshes, maximum=split)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    trained = geometric.train_family(FAMILY, experiment, roles=roles, tiny=tiny)
    rows, columns = geometric.family_rows(FAMILY, trained)
    data = next(iter(trained.values()))["config"].data
    models = {role: result["config"].model for role, result in trained.items()}
    # The probes of untrained models, kept in the run directory: a resumed run reuses them as it reuses cells.
    symmetry = stored(
        experiment.run_dir / "symmetry.json", {"roles": roles, "operators": operators, "meshes": meshes, "tiny": tiny,
                                                "seq_len": budget.seq_len},
        lambda: symmetry_rows(models, data, seq_len=budget.seq_len, meshes=meshes, operators=operators))
    probe = dict(FAMILY.tiny_model) if tiny else {}

    def measure() -> list[dict]:
        with jax.default_matmul_precision("highest"):
            return convergence_table(sizes, draws=convergence_draws, grid=grid, probe=probe)

    convergence = stored(
        experiment.run_dir / "convergence.json",
        {"sizes": sizes, "draws": convergence_draws, "grid": grid, "tiny": tiny}, measure)
    notes = geometric.common_notes(FAMILY, budget, trained, tiny=tiny) + [
        "", f"## Symmetry (untrained models, first {meshes} validation meshes; max |output change|)", "",
        "duplication: half the nodes duplicated at half weight (in the group), measured with the neighbour cap "
        "lifted; duplication_with_cap: the same with the model's own cap (near the well the cap truncates the "
        "neighbourhood); out_of_group: the duplicated half kept at full weight.", "",
        *markdown_table(symmetry, ("model", "permutation", "duplication", "duplication_with_cap", "out_of_group")),
        "", "## Discretisation convergence (untrained APT, relative difference to the grid at 16 query nodes)", "",
        f"Mean over {convergence_draws} draw(s) of ‖out − out_grid‖ / ‖out_grid‖, the reference on the regular "
        f"{grid} x {grid} grid; neighbour cap {PROBE_CAP} (no neighbourhood truncated); "
        + ("tiny probe (width 16, one layer)." if tiny else "the preset's width (d_model 64, 2 GNO layers)."), "",
        *markdown_table(convergence, ("nodes", *SAMPLINGS)),
    ]
    figures = {"training": geometric.training_figure(experiment, FAMILY, trained, rows, "relative_l2",
                                                     ylabel="eval relative L2"),
               "convergence": _convergence_figure(convergence)}
    return experiment.write(rows, columns=columns, notes=notes, figures=figures,
                            extra={"symmetry": symmetry, "convergence": convergence},
                            title="APT vs set_transformer on zoo_darcy_amr, symmetry and discretisation convergence")


def symmetry_rows(models: dict[str, ModelConfig], data: DataConfig, *, seq_len: int, meshes: int,
                  operators: Sequence[str] = OPERATORS) -> list[dict]:
    """`equivariance_errors` of the untrained models on the first `meshes` validation meshes of `data`: the APT
    (role "model") with each local operator of `operators`, plus its in-group duplication with its own neighbour
    cap; the baseline (role "baseline") as is."""
    rows_ = open_rows(data, data.eval_split, seq_len)
    if meshes > len(rows_):
        raise ValueError(f"meshes must be at most the {len(rows_)} validation meshes, got {meshes}")
    inputs = tuple(jnp.asarray(array[:meshes]) for array in (rows_.points, rows_.features, rows_.weights))
    out = []
    if "model" in models:
        cfg = models["model"]
        for operator in operators:
            options = (*(o for o in cfg.model_options if o[0] != "local_operator"), ("local_operator", operator))
            model = build_model(dataclasses.replace(cfg, model_options=options), rngs=nnx.Rngs(0))
            errors = equivariance_errors(model, *inputs, jax.random.key(0))
            out.append({"model": f"apt, local_operator {operator}", **{k: float(v) for k, v in errors.items()},
                        "duplication_with_cap": capped_duplication_error(model, *inputs)})
    if "baseline" in models:
        model = build_model(models["baseline"], rngs=nnx.Rngs(0))
        errors = equivariance_errors(model, *inputs, jax.random.key(0))
        out.append({"model": "set_transformer baseline", **{k: float(v) for k, v in errors.items()},
                    "duplication_with_cap": float(errors["duplication"])})
    return out


def convergence_table(sizes: Sequence[int], *, draws: int, grid: int, probe: dict | None = None) -> list[dict]:
    """Per N in `sizes`: the mean over `draws` seeds of ‖out − out_grid‖ / ‖out_grid‖ at the query nodes for the
    three samplings of SAMPLINGS; `probe` resizes the untrained APT (ModelConfig changes, model_options added)."""
    probe = dict(probe or {})
    options = tuple(probe.pop("model_options", ()))
    sizing = {key: probe[key] for key in ("d_model", "num_layers", "num_heads") if key in probe}
    forward = compiled_forward(build_probe_model(PROBE_CAP, model_options=options, **sizing))
    axis = np.linspace(0.0, 1.0, grid)
    nodes = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2).astype(np.float32)
    nodes = np.concatenate([query_points(), nodes])
    reference = query_outputs(forward, nodes, np.ones(len(nodes), np.float32))

    def relative(out: np.ndarray) -> float:
        return float(np.linalg.norm(out - reference) / np.linalg.norm(reference))

    rows = []
    for size in sizes:
        errors: dict[str, list[float]] = {name: [] for name in SAMPLINGS}
        for seed in range(draws):
            rng = np.random.default_rng(seed)
            uniform = sample_points(rng, size, adaptive=False)
            errors["uniform"].append(relative(query_outputs(forward, uniform, np.ones(size, np.float32))))
            adaptive = sample_points(rng, size, adaptive=True)
            quadrature = (1.0 / cluster_density(adaptive)).astype(np.float32)
            errors["adaptive_quadrature"].append(relative(query_outputs(forward, adaptive, quadrature)))
            errors["adaptive_unweighted"].append(relative(query_outputs(forward, adaptive, np.ones(size, np.float32))))
        rows.append({"nodes": size, **{name: float(np.mean(values)) for name, values in errors.items()}})
    return rows


def _convergence_figure(rows: list[dict]) -> Figure:
    figure = Figure(figsize=(6.0, 3.8), layout="constrained")
    axes = figure.add_subplot()
    nodes = [row["nodes"] for row in rows]
    for name, label in SAMPLINGS.items():
        axes.plot(nodes, [row[name] for row in rows], marker="o", label=label)
    axes.set(xlabel="nodes N", ylabel="rel. difference to the grid", xscale="log", yscale="log",
             title="discretisation convergence (untrained APT)")
    axes.set_xticks(nodes, [str(size) for size in nodes], minor=False)
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.legend(fontsize=8)
    return figure
