"""The probes of APT's discretisation convergence (invariant 3 of docs/papers/apt.md) and its capped duplication.

One smooth input field a(x) on [0, 1]² is sampled on point sets of growing size N, either uniformly (weights 1)
or adaptively (half the points from a Gaussian cluster, like an AMR refinement), the adaptive sets with the
quadrature weights w_i = 1 / ρ(x_i) (ρ the sampling density) or, as the control the spec's pitfall describes,
with w = 1. Sixteen fixed query nodes are part of every set; their outputs are compared with those on the
regular 64 x 64 grid (the reference quadrature). With correct weights the relative difference shrinks as N
grows, whatever the sampling; with w = 1 the adaptive sets converge to another operator (the refined region
counts more). The model is untrained (the property is architectural) and its neighbour cap is set above the
densest neighbourhood (about 250 nodes within r = 0.08 at N = 2048): a cap truncates the kernel integral.

The `apt` experiment (repro/apt.py) runs the measurement with these pieces.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.geometric.apt import compiled_forward, duplicate_nodes
from icml26zoo.models import ModelConfig, build_model

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


def build_probe_model(max_neighbours: int, *, d_model: int = 64, num_layers: int = 2, num_heads: int = 4,
                      model_options: tuple[tuple[str, object], ...] = ()) -> nnx.Module:
    """An untrained APT, by default of the preset's width (d_model 64, 2 GNO layers, 4 heads, 32 latents);
    `model_options` are added to the probe's own (3 features, radius 0.08, the neighbour cap)."""
    options = (("num_outputs", 1), ("feature_dim", 3), ("radius", 0.08), ("max_neighbours", max_neighbours),
               *model_options)
    cfg = ModelConfig(name="apt", d_model=d_model, num_layers=num_layers, num_heads=num_heads,
                      num_kv_heads=max(1, num_heads // 2), model_options=options)
    return build_model(cfg, rngs=nnx.Rngs(0))


def query_outputs(forward: Callable[..., jax.Array], points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The outputs [QUERIES, 1] of a compiled forward at the query nodes of one point set."""
    outputs = forward(jnp.asarray(points)[None], jnp.asarray(input_field(points))[None], jnp.asarray(weights)[None])
    return np.asarray(outputs[0, :QUERIES])


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
