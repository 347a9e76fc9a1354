"""APT's discretisation convergence (invariant 3 of its page), measured for docs/papers/apt.md.

One smooth input field a(x) on [0, 1]² is sampled on point sets of growing size N, either uniformly (weights 1)
or adaptively (half the points from a Gaussian cluster, like an AMR refinement), the adaptive sets with the
quadrature weights w_i = 1 / ρ(x_i) (ρ the sampling density) or, as the control the spec's pitfall describes,
with w = 1. Sixteen fixed query nodes are part of every set; their outputs are compared with those on the
regular 64 x 64 grid (the reference quadrature). With correct weights the relative difference shrinks as N
grows, whatever the sampling; with w = 1 the adaptive sets converge to another operator (the refined region
counts more). The model is untrained (the property is architectural) and its neighbour cap is set above the
densest neighbourhood (about 250 nodes within r = 0.08 at N = 2048): a cap truncates the kernel integral.

    python -m icml26zoo.geometric.apt_checks [--symmetry] [--run LABEL=WORKDIR ...] [--figure PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.geometric.apt import compiled_forward, duplicate_nodes, equivariance_errors
from icml26zoo.models import ModelConfig, build_model

SIZES = (256, 512, 1024, 2048)
GRID = 64
QUERIES = 16
CLUSTER_CENTRE, CLUSTER_WIDTH = np.array([0.6, 0.4]), 0.12


def input_field(points: np.ndarray) -> np.ndarray:
    """Three smooth channels a(x) [N, 3] (a pressure-like field, a permeability-like field, a well)."""
    x, y = points[:, 0], points[:, 1]
    return np.stack([np.sin(2 * np.pi * x) * np.cos(np.pi * y), 1.0 + 0.5 * np.tanh(4 * (x - y)),
                     np.exp(-np.sum((points - CLUSTER_CENTRE) ** 2, axis=1) / 0.02)], axis=1).astype(np.float32)


def query_points() -> np.ndarray:
    axis = (np.arange(4) + 0.5) / 4
    return np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(QUERIES, 2).astype(np.float32)


def cluster_density(points: np.ndarray) -> np.ndarray:
    """Density on [0, 1]² of the adaptive sampler: half uniform, half a Gaussian cluster (the ~0.1% of its mass
    outside the square is rejected by the sampler and ignored here)."""
    squared = np.sum((points - CLUSTER_CENTRE) ** 2, axis=1)
    return 0.5 + 0.5 * np.exp(-squared / (2 * CLUSTER_WIDTH**2)) / (2 * np.pi * CLUSTER_WIDTH**2)


def sample_points(rng: np.random.Generator, size: int, adaptive: bool) -> np.ndarray:
    """size - QUERIES random points (uniform, or half from the cluster kept inside the square) after the queries."""
    count = size - QUERIES
    if not adaptive:
        extra = rng.uniform(size=(count, 2))
    else:
        clustered = []
        while len(clustered) < count // 2:
            candidate = rng.normal(CLUSTER_CENTRE, CLUSTER_WIDTH, size=(count, 2))
            clustered.extend(candidate[np.all((candidate >= 0) & (candidate <= 1), axis=1)])
        extra = np.concatenate([rng.uniform(size=(count - count // 2, 2)), np.array(clustered[: count // 2])])
    return np.concatenate([query_points(), extra]).astype(np.float32)


def build_probe_model(max_neighbours: int) -> nnx.Module:
    """An untrained APT of the preset's width (d_model 64, 2 GNO layers, 4 heads, 32 latents)."""
    options = (("num_outputs", 1), ("feature_dim", 3), ("radius", 0.08), ("max_neighbours", max_neighbours))
    cfg = ModelConfig(name="apt", d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, model_options=options)
    return build_model(cfg, rngs=nnx.Rngs(0))


def query_outputs(forward: Callable[..., jax.Array], points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The outputs [QUERIES, 1] of a compiled forward at the query nodes of one point set."""
    outputs = forward(jnp.asarray(points)[None], jnp.asarray(input_field(points))[None], jnp.asarray(weights)[None])
    return np.asarray(outputs[0, :QUERIES])


def convergence_table(seeds: int = 3) -> list[dict[str, float]]:
    """Per N: mean over seeds of ‖out − out_grid‖ / ‖out_grid‖ at the queries for the three samplings."""
    forward = compiled_forward(build_probe_model(max_neighbours=320))
    axis = np.linspace(0.0, 1.0, GRID)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2).astype(np.float32)
    grid = np.concatenate([query_points(), grid])
    reference = query_outputs(forward, grid, np.ones(len(grid), np.float32))
    relative = lambda out: float(np.linalg.norm(out - reference) / np.linalg.norm(reference))
    rows = []
    for size in SIZES:
        errors = {"uniform": [], "adaptive_quadrature": [], "adaptive_unweighted": []}
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            uniform = sample_points(rng, size, adaptive=False)
            errors["uniform"].append(relative(query_outputs(forward, uniform, np.ones(size, np.float32))))
            adaptive = sample_points(rng, size, adaptive=True)
            quadrature = (1.0 / cluster_density(adaptive)).astype(np.float32)
            errors["adaptive_quadrature"].append(relative(query_outputs(forward, adaptive, quadrature)))
            errors["adaptive_unweighted"].append(relative(query_outputs(forward, adaptive, np.ones(size, np.float32))))
        rows.append({"nodes": size, **{name: float(np.mean(values)) for name, values in errors.items()}})
    return rows


def symmetry_rows(meshes: int = 4) -> dict[str, dict[str, float]]:
    """equivariance_errors of the untrained geo_apt_darcy model (both local operators; with the preset's cap
    kept too) and of the geo_darcy_baseline on the first `meshes` validation meshes of zoo_darcy_amr (built by
    the trainer on first use)."""
    from icml26zoo.configs import geo_apt_darcy, geo_darcy_baseline
    from icml26zoo.train.data.features import open_rows

    train_config = geo_apt_darcy.get_config()
    rows = open_rows(train_config.data, train_config.data.eval_split, train_config.seq_len)
    inputs = tuple(jnp.asarray(array[:meshes]) for array in (rows.points, rows.features, rows.weights))
    results = {}
    for operator in ("attention", "kernel"):
        cfg = dataclasses.replace(train_config.model, model_options=(*train_config.model.model_options,
                                                                     ("local_operator", operator)))
        model = build_model(cfg, rngs=nnx.Rngs(0))
        results[operator] = equivariance_errors(model, *inputs, jax.random.key(0))
        results[operator]["duplication_with_cap"] = capped_duplication_error(model, *inputs)
    baseline = build_model(geo_darcy_baseline.get_config().model, rngs=nnx.Rngs(0))
    results["set_transformer"] = equivariance_errors(baseline, *inputs, jax.random.key(0))
    return results


def capped_duplication_error(model: nnx.Module, points: jax.Array, features: jax.Array, weights: jax.Array) -> float:
    """The in-group duplication error (half the nodes, weights halved) with the model's own neighbour cap."""
    forward = compiled_forward(model)
    num_nodes = points.shape[1]
    chosen = jnp.arange(num_nodes // 2)
    duplicated = forward(*duplicate_nodes(points, features, weights, chosen, halve=True))
    padding = (jnp.zeros_like(points[:, chosen]), jnp.zeros_like(features[:, chosen]),
               jnp.zeros_like(weights[:, chosen]))
    reference = forward(*(jnp.concatenate([x, pad], axis=1) for x, pad in zip((points, features, weights),
                                                                               padding, strict=True)))
    return float(jnp.max(jnp.abs(duplicated[:, :num_nodes] - reference[:, :num_nodes])))


def read_metrics(workdir: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of metric `key` in a trainer run's metrics.jsonl."""
    steps, values = [], []
    with open(os.path.join(workdir, "metrics.jsonl")) as handle:
        for line in handle:
            record = json.loads(line)
            if key in record:
                steps.append(record["step"])
                values.append(record[key])
    return steps, values


def save_figure(rows: list[dict[str, float]], runs: dict[str, str], path: str) -> None:
    """Left: training loss (relative L2) of trainer runs {label: workdir}; right: the convergence table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, workdir in runs.items():
        left.plot(*read_metrics(workdir, "train/loss"), label=label)
    left.set(xlabel="step", ylabel="train relative L2 (increment)", yscale="log", title="zoo_darcy_amr, one step")
    left.legend(fontsize=8)
    nodes = [row["nodes"] for row in rows]
    for name, label in (("uniform", "uniform, w = 1"), ("adaptive_quadrature", "adaptive, w = 1/ρ"),
                        ("adaptive_unweighted", "adaptive, w = 1")):
        right.plot(nodes, [row[name] for row in rows], marker="o", label=label)
    right.set(xlabel="nodes N", ylabel="rel. difference to 64² grid", xscale="log", yscale="log",
              title="discretisation convergence (untrained)")
    right.set_xticks(nodes, [str(size) for size in nodes], minor=False)
    right.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", default=[], metavar="LABEL=WORKDIR",
                        help="a trainer run to plot (repeatable)")
    parser.add_argument("--figure", help="write the PNG here")
    parser.add_argument("--symmetry", action="store_true", help="also print the symmetry table on zoo_darcy_amr")
    args = parser.parse_args()
    if args.symmetry:
        for name, errors in symmetry_rows().items():
            print(name, {key: f"{value:.2g}" for key, value in errors.items()})
    with jax.default_matmul_precision("highest"):
        rows = convergence_table()
    print("| nodes N | uniform, w = 1 | adaptive, w = 1/ρ | adaptive, w = 1 (no quadrature) |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['nodes']} | {row['uniform']:.4f} | {row['adaptive_quadrature']:.4f} | "
              f"{row['adaptive_unweighted']:.4f} |")
    if args.figure:
        save_figure(rows, dict(run.rsplit("=", 1) for run in args.run), args.figure)


if __name__ == "__main__":
    main()
