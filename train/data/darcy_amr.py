"""`zoo_darcy_amr`: pressure diffusion with a well, sampled on adaptively refined node sets (APT).

Each example is one simulation of ∂p/∂t = ∇·(k ∇p) + q on [0, 1]² with explicit finite differences on a G x G
grid (G = `grid`, spacing h = 1 / (G − 1), p = 0 on the boundary, face conductivities the mean of the two
cells, time step dt = 0.2 h² / max k, inside the explicit scheme's stability bound h² / (4 max k)):
  * k: a binary channel field, exp of a thresholded Gaussian random field: 1 where the field (white noise
    smoothed at length 0.1) is positive, 1 / contrast elsewhere, contrast uniform in [10, 100];
  * q: a Gaussian well (width 0.05, peak SOURCE) at a uniform location in [0.2, 0.8]²;
  * p starts from a smooth random field (length 0.1, unit variance, 0 on the boundary) and runs `warmup`
    steps to the input state p_a, then `substeps` more steps to p_b.
The task is one-step prediction on an irregular node set: the target is the increment p_b − p_a at each node
(reconstruction: the spec predicts the next state; the increment is the same information without the
identity map dominating the relative error). Nodes are grid points chosen adaptively: `coarse` uniform over
the interior, `near_well` within radius 0.15 of the well and `high_gradient` among the 10% of interior nodes
with the largest |∇p_a| (duplicates merged, so examples have different node counts, padded to the sum with
weight 0). Each node's weight is its discrete Voronoi area (the grid points nearer to it than to any other
node), normalized so that an example's weights sum to its node count.

Batch fields (train.data.features): points [b, N, 2] in [0, 1]², features [b, N, 3] = (p_a, k, q / SOURCE),
weights [b, N], targets [b, N, 1]. Options go in data.task_options, e.g. (("grid", 32),).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import TaskOptions, check_option, make_config

SOURCE = 100.0
WELL_WIDTH = 0.05
WELL_RADIUS = 0.15
CORRELATION_LENGTH = 0.1
CONTRAST_RANGE = (10.0, 100.0)
GRADIENT_QUANTILE = 0.9
CFL = 0.2
FEATURE_DIM = 3


@dataclasses.dataclass(frozen=True)
class DarcyOptions(TaskOptions):
    """Darcy pressure diffusion on adaptively sampled nodes."""

    grid: int = 64
    warmup: int = 10
    substeps: int = 20
    coarse: int = 96
    near_well: int = 64
    high_gradient: int = 64
    train_examples: int = 512
    eval_examples: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("grid", self.grid, 8)
        check_option("warmup", self.warmup, 0)
        check_option("substeps", self.substeps, 1)
        check_option("coarse", self.coarse, 1, (self.grid - 2) ** 2)
        check_option("near_well", self.near_well, 0)
        check_option("high_gradient", self.high_gradient, 0)

    @property
    def max_nodes(self) -> int:
        return self.coarse + self.near_well + self.high_gradient


def darcy_step(p: np.ndarray, k: np.ndarray, q: np.ndarray, dt: float, h: float) -> np.ndarray:
    """One explicit step p + dt (∇·(k∇p) + q) on the grid [G, G]; boundary values are held at 0."""
    flux_x = 0.5 * (k[1:, :] + k[:-1, :]) * (p[1:, :] - p[:-1, :])
    flux_y = 0.5 * (k[:, 1:] + k[:, :-1]) * (p[:, 1:] - p[:, :-1])
    divergence = np.zeros_like(p)
    divergence[1:-1, :] += flux_x[1:, :] - flux_x[:-1, :]
    divergence[:, 1:-1] += flux_y[:, 1:] - flux_y[:, :-1]
    updated = p + dt * (divergence / (h * h) + q)
    updated[0, :] = updated[-1, :] = updated[:, 0] = updated[:, -1] = 0.0
    return updated


def smooth_field(rng: np.random.Generator, grid: int, length: float) -> np.ndarray:
    """White noise [G, G] smoothed by a Gaussian of `length` (in units of the unit square), unit variance."""
    frequencies = np.fft.fftfreq(grid, d=1.0 / (grid - 1))
    squared = frequencies[:, None] ** 2 + frequencies[None, :] ** 2
    field = np.fft.ifft2(np.fft.fft2(rng.normal(size=(grid, grid))) * np.exp(-2 * (np.pi * length) ** 2 * squared))
    field = field.real
    return (field - field.mean()) / field.std()


def voronoi_weights(nodes: np.ndarray, grid: int) -> np.ndarray:
    """Discrete Voronoi areas of node indices [n, 2] on the G x G grid, normalized to sum to n."""
    axis = np.arange(grid)
    cells = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)
    distances = np.sum((cells[:, None, :] - nodes[None, :, :]) ** 2, axis=-1)
    counts = np.bincount(np.argmin(distances, axis=1), minlength=len(nodes)).astype(np.float64)
    return counts * len(nodes) / counts.sum()


def _choose(rng: np.random.Generator, candidates: np.ndarray, count: int) -> np.ndarray:
    return rng.choice(candidates, size=min(count, len(candidates)), replace=False)


def simulate(options: DarcyOptions, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One simulation on the full grid: k, q, p_a, p_b [G, G] and the well position [2]."""
    grid = options.grid
    h = 1.0 / (grid - 1)
    contrast = rng.uniform(*CONTRAST_RANGE)
    k = np.where(smooth_field(rng, grid, CORRELATION_LENGTH) > 0, 1.0, 1.0 / contrast)
    well = rng.uniform(0.2, 0.8, 2)
    axis = np.linspace(0.0, 1.0, grid)
    squared = (axis[:, None] - well[0]) ** 2 + (axis[None, :] - well[1]) ** 2
    q = SOURCE * np.exp(-squared / (2 * WELL_WIDTH**2))
    p = smooth_field(rng, grid, CORRELATION_LENGTH)
    p[0, :] = p[-1, :] = p[:, 0] = p[:, -1] = 0.0
    dt = CFL * h * h / k.max()
    for _ in range(options.warmup):
        p = darcy_step(p, k, q, dt, h)
    p_a = p
    for _ in range(options.substeps):
        p = darcy_step(p, k, q, dt, h)
    return {"k": k, "q": q, "p_a": p_a, "p_b": p, "well": well}


def select_nodes(options: DarcyOptions, fields: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Adaptively chosen grid indices [n, 2] (module docstring), unique, in random order."""
    grid = options.grid
    axis = np.arange(1, grid - 1)
    interior = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)
    position = interior / (grid - 1)
    near = interior[np.linalg.norm(position - fields["well"], axis=1) < WELL_RADIUS]
    gradient = np.hypot(*np.gradient(fields["p_a"]))[interior[:, 0], interior[:, 1]]
    steep = interior[gradient >= np.quantile(gradient, GRADIENT_QUANTILE)]
    chosen = np.concatenate([_choose(rng, interior, options.coarse), _choose(rng, near, options.near_well),
                             _choose(rng, steep, options.high_gradient)])
    return rng.permutation(np.unique(chosen, axis=0))


def make_example(options: DarcyOptions, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(the simulation's grid fields, node indices [n, 2]) of one example."""
    fields = simulate(options, rng)
    return fields, select_nodes(options, fields, rng)


def node_arrays(options: DarcyOptions, fields: dict[str, np.ndarray], nodes: np.ndarray) -> dict[str, np.ndarray]:
    """The stored example: points, features, weights, targets padded to options.max_nodes (float32)."""
    count, size = len(nodes), options.max_nodes
    rows, cols = nodes[:, 0], nodes[:, 1]
    features = np.stack([fields["p_a"][rows, cols], fields["k"][rows, cols], fields["q"][rows, cols] / SOURCE], 1)
    arrays = {"points": nodes / (options.grid - 1), "features": features,
              "weights": voronoi_weights(nodes, options.grid),
              "targets": (fields["p_b"] - fields["p_a"])[rows, cols][:, None]}
    return {name: np.pad(value, ((0, size - count),) + ((0, 0),) * (value.ndim - 1)).astype(np.float32)
            for name, value in arrays.items()}


class ZooDarcyAmr(GeneratedBuilder):
    """Examples {"points": [M, 2], "features": [M, 3], "weights": [M], "targets": [M, 1]} (float32, M = max_nodes)."""

    BUILDER_CONFIGS = [make_config(DarcyOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return feature_spec(self.builder_config.options.max_nodes, 2, FEATURE_DIM, num_targets=1)

    def _generate_examples(self, split: str) -> Examples:
        config, options = self.builder_config, self.builder_config.options
        rng = np.random.default_rng(split_seed(config, split))
        for index in range(split_size(config, split)):
            yield f"{index:08d}", node_arrays(options, *make_example(options, rng))


@register_dataset("zoo_darcy_amr")
class DarcyDataset(FeatureDataset):
    """Per-node regression rows for objective "point_regression"."""

    name, options_class, builder_class = "zoo_darcy_amr", DarcyOptions, ZooDarcyAmr

    def max_points(self, options: DarcyOptions) -> int:
        return options.max_nodes

    def feature_dim(self, options: DarcyOptions) -> int:
        return FEATURE_DIM
