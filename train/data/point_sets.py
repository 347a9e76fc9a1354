"""`zoo_shapes`: point clouds sampled on parametric surfaces, labelled by the surface (issue 20).

Each example is `num_points` points drawn (area-uniformly) on one of up to 8 surfaces, all inside the unit
ball: SHAPES[:num_shapes] = sphere, cube (its surface), cylinder (closed), torus, cone (closed), plane (a
square patch), ellipsoid, capsule; `num_shapes = 5` gives the Platonic spec's five surfaces. Gaussian jitter of
standard deviation `jitter` is added to every coordinate. A random (Haar) rotation is applied per example to
the training split when `rotate` is set and to the validation split when `eval_rotate` is set (default: train
canonical, evaluate rotated, so a rotation-invariant model is needed to keep the training accuracy).
Labels are exactly balanced (a shuffled repeat of 0 .. num_shapes - 1).

Batch fields (train.data.features): points [b, N, 3], features [b, N, 0], weights [b, N] (ones on the
num_points real points), labels [b]. Options go in data.task_options, e.g. (("num_points", 64),).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import FIELD, TaskOptions, check_option, make_config
from icml26zoo.validation import check_bool, check_interval

SHAPES = ("sphere", "cube", "cylinder", "torus", "cone", "plane", "ellipsoid", "capsule")
SPHERE_RADIUS = 0.9
CUBE_HALF = 0.5
CYLINDER_RADIUS, CYLINDER_HALF = 0.5, 0.6
TORUS_MAJOR, TORUS_MINOR = 0.6, 0.25
CONE_RADIUS, CONE_HALF = 0.6, 0.5
PLANE_HALF = 0.7
ELLIPSOID_AXES = np.array([0.9, 0.6, 0.4])
CAPSULE_RADIUS, CAPSULE_HALF = 0.35, 0.45


@dataclasses.dataclass(frozen=True)
class ShapesOptions(TaskOptions):
    """Shape point-cloud classification."""

    num_points: int = 128
    num_shapes: int = len(SHAPES)
    # Standard deviation of the Gaussian jitter added to every coordinate.
    jitter: float = 0.01
    rotate: bool = False
    eval_rotate: bool = True
    train_examples: int = 2048
    eval_examples: int = 256

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("num_points", self.num_points, 1)
        check_option("num_shapes", self.num_shapes, 2, len(SHAPES))
        check_interval(f"{FIELD} option 'jitter'", self.jitter, 0, 0.1)
        for name in ("rotate", "eval_rotate"):
            check_bool(f"{FIELD} option {name!r}", getattr(self, name))


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.normal(size=(n, 3))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _disk(rng: np.random.Generator, n: int, radius: float, z: float) -> np.ndarray:
    rho, angle = radius * np.sqrt(rng.random(n)), 2 * np.pi * rng.random(n)
    return np.stack([rho * np.cos(angle), rho * np.sin(angle), np.full(n, z)], axis=1)


def _tube(rng: np.random.Generator, n: int, radius: float, half: float) -> np.ndarray:
    angle, z = 2 * np.pi * rng.random(n), rng.uniform(-half, half, n)
    return np.stack([radius * np.cos(angle), radius * np.sin(angle), z], axis=1)


def _pieces(rng: np.random.Generator, n: int, areas: list[float]) -> np.ndarray:
    """How many of n points fall on each piece, proportionally to its area."""
    return rng.multinomial(n, np.asarray(areas) / np.sum(areas))


def _cube(rng: np.random.Generator, n: int) -> np.ndarray:
    points = rng.uniform(-CUBE_HALF, CUBE_HALF, (n, 3))
    axis, sign = rng.integers(0, 3, n), rng.choice([-1.0, 1.0], n)
    points[np.arange(n), axis] = sign * CUBE_HALF
    return points


def _cylinder(rng: np.random.Generator, n: int) -> np.ndarray:
    r, h = CYLINDER_RADIUS, CYLINDER_HALF
    side, top, bottom = _pieces(rng, n, [4 * np.pi * r * h, np.pi * r * r, np.pi * r * r])
    return np.concatenate([_tube(rng, side, r, h), _disk(rng, top, r, h), _disk(rng, bottom, r, -h)])


def _torus(rng: np.random.Generator, n: int) -> np.ndarray:
    # The area element is ∝ R + r cos φ: rejection sampling of the tube angle φ.
    chosen = np.empty(0)
    while chosen.size < n:
        phi = 2 * np.pi * rng.random(2 * n)
        keep = rng.random(2 * n) * (TORUS_MAJOR + TORUS_MINOR) < TORUS_MAJOR + TORUS_MINOR * np.cos(phi)
        chosen = np.concatenate([chosen, phi[keep]])
    phi, theta = chosen[:n], 2 * np.pi * rng.random(n)
    rho = TORUS_MAJOR + TORUS_MINOR * np.cos(phi)
    return np.stack([rho * np.cos(theta), rho * np.sin(theta), TORUS_MINOR * np.sin(phi)], axis=1)


def _cone(rng: np.random.Generator, n: int) -> np.ndarray:
    r, h = CONE_RADIUS, CONE_HALF
    lateral, base = _pieces(rng, n, [np.pi * r * np.hypot(r, 2 * h), np.pi * r * r])
    # On the lateral surface the area element grows linearly from the apex: t = sqrt(u).
    t, angle = np.sqrt(rng.random(lateral)), 2 * np.pi * rng.random(lateral)
    side = np.stack([r * t * np.cos(angle), r * t * np.sin(angle), h - 2 * h * t], axis=1)
    return np.concatenate([side, _disk(rng, base, r, -h)])


def _plane(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.concatenate([rng.uniform(-PLANE_HALF, PLANE_HALF, (n, 2)), np.zeros((n, 1))], axis=1)


def _capsule(rng: np.random.Generator, n: int) -> np.ndarray:
    r, h = CAPSULE_RADIUS, CAPSULE_HALF
    side, caps = _pieces(rng, n, [4 * np.pi * r * h, 4 * np.pi * r * r])
    ends = r * _unit(rng, caps)
    ends[:, 2] += np.where(ends[:, 2] >= 0, h, -h)
    return np.concatenate([_tube(rng, side, r, h), ends])


SAMPLERS = {
    "sphere": lambda rng, n: SPHERE_RADIUS * _unit(rng, n),
    "cube": _cube,
    "cylinder": _cylinder,
    "torus": _torus,
    "cone": _cone,
    "plane": _plane,
    "ellipsoid": lambda rng, n: ELLIPSOID_AXES * _unit(rng, n),
    "capsule": _capsule,
}


def sample_shape(shape: str, num_points: int, rng: np.random.Generator) -> np.ndarray:
    """num_points points [num_points, 3] on surface `shape` (canonical pose, no jitter), in random order."""
    if shape not in SAMPLERS:
        raise ValueError(f"shape must be one of {list(SHAPES)}, got {shape!r}")
    return rng.permutation(SAMPLERS[shape](rng, num_points))


def random_rotations(rng: np.random.Generator, count: int) -> np.ndarray:
    """Haar-uniform rotation matrices [count, 3, 3] (QR of Gaussian matrices with the sign fix, det +1)."""
    q, r = np.linalg.qr(rng.normal(size=(count, 3, 3)))
    q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
    return q * np.linalg.det(q)[:, None, None]


def generate(options: ShapesOptions, num_examples: int, seed: np.random.SeedSequence, rotate: bool
             ) -> tuple[np.ndarray, np.ndarray]:
    """(points float32 [E, num_points, 3], labels int32 [E]), deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(num_examples) % options.num_shapes)
    points = np.stack([sample_shape(SHAPES[label], options.num_points, rng) for label in labels])
    points = points + options.jitter * rng.normal(size=points.shape)
    if rotate:
        points = np.einsum("eij,enj->eni", random_rotations(rng, num_examples), points)
    return points.astype(np.float32), labels.astype(np.int32)


class ZooShapes(GeneratedBuilder):
    """Examples {"points": float32 [P, 3], "weights": float32 [P], "label": int32}."""

    BUILDER_CONFIGS = [make_config(ShapesOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return feature_spec(self.builder_config.options.num_points, 3, 0)

    def _generate_examples(self, split: str) -> Examples:
        config, options = self.builder_config, self.builder_config.options
        rotate = options.rotate if split == "train" else options.eval_rotate
        points, labels = generate(options, split_size(config, split), split_seed(config, split), rotate)
        weights = np.ones(options.num_points, np.float32)
        for index, (cloud, label) in enumerate(zip(points, labels, strict=True)):
            yield f"{index:08d}", {"points": cloud, "weights": weights, "label": label}


@register_dataset("zoo_shapes")
class ShapesDataset(FeatureDataset):
    """Labelled point clouds for objective "set_classification"."""

    name, options_class, builder_class = "zoo_shapes", ShapesOptions, ZooShapes

    def max_points(self, options: ShapesOptions) -> int:
        return options.num_points
