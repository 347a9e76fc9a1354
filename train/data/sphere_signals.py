"""`zoo_sphere`: smooth signals on the sphere S² sampled at unit directions, per-point regression (SoLA).

Every example samples `num_points` directions u_i (a Fibonacci lattice; rotated by a random Haar rotation per
example when the split rotates) and draws M = `num_bumps` bumps: unit centres μ_m, concentrations κ_m uniform in
[5, 20] and amplitudes c_m ~ N(0, 1). With the normalized bump b(u; μ, κ) = exp(κ (μ·u − 1)) (the spec's
exp(κ μ·u) divided by its peak e^κ, so every bump peaks at 1):

    input field   f(u) = Σ_m c_m b(u; μ_m, κ_m)
    target        g(u) = Σ_m c_m b(u; μ_m, κ_m / smoothing)     (a smoothed field, the spec's "depth")

Per-point features are [f(u_i), h_1(u_i), ..., h_E(u_i)]: the input field and E = `extra_fields` distractor bump
fields with their own random centres; the target is g(u_i), shape [1]. The training split keeps the lattice
in its canonical pose (`rotate` False) and the validation split rotates it (`eval_rotate` True): the signal
values at a point are unchanged, so an SO(3)-equivariant model's error must not change, while a model that
reads absolute positions can degrade.

Batch fields (train.data.features): points [b, N, 3] (unit norm), features [b, N, 1 + E], weights [b, N] (ones),
targets [b, N, 1]. Options go in data.task_options, e.g. (("num_points", 162),).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.point_sets import random_rotations
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import FIELD, TaskOptions, check_option, make_config
from icml26zoo.validation import check_bool, check_interval

KAPPA_RANGE = (5.0, 20.0)


@dataclasses.dataclass(frozen=True)
class SphereOptions(TaskOptions):
    """Spherical bump-signal regression."""

    num_points: int = 162
    num_bumps: int = 8
    extra_fields: int = 2
    # The target's concentrations are κ_m / smoothing.
    smoothing: float = 4.0
    rotate: bool = False
    eval_rotate: bool = True
    train_examples: int = 1024
    eval_examples: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("num_points", self.num_points, 4)
        check_option("num_bumps", self.num_bumps, 1)
        check_option("extra_fields", self.extra_fields, 0)
        check_interval(f"{FIELD} option 'smoothing'", self.smoothing, 1, math.inf, closed="left")
        for name in ("rotate", "eval_rotate"):
            check_bool(f"{FIELD} option {name!r}", getattr(self, name))


def fibonacci_sphere(num_points: int) -> np.ndarray:
    """num_points nearly uniform unit directions [num_points, 3] (the golden-angle spiral)."""
    index = np.arange(num_points) + 0.5
    z = 1.0 - 2.0 * index / num_points
    angle = np.pi * (1.0 + np.sqrt(5.0)) * index
    rho = np.sqrt(1.0 - z * z)
    return np.stack([rho * np.cos(angle), rho * np.sin(angle), z], axis=1)


def bump_field(directions: np.ndarray, centres: np.ndarray, kappas: np.ndarray, amplitudes: np.ndarray) -> np.ndarray:
    """Σ_m c_m exp(κ_m (μ_m·u − 1)) at directions [P, 3] for centres [M, 3], kappas [M], amplitudes [M] -> [P]."""
    return np.exp(kappas * (directions @ centres.T - 1.0)) @ amplitudes


def _bumps(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    centres = rng.normal(size=(count, 3))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    return centres, rng.uniform(*KAPPA_RANGE, count), rng.normal(size=count)


def make_example(options: SphereOptions, rng: np.random.Generator, rotate: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(directions [P, 3], features [P, 1 + E], targets [P, 1]) of one example, all float64."""
    directions = fibonacci_sphere(options.num_points)
    if rotate:
        directions = directions @ random_rotations(rng, 1)[0].T
    centres, kappas, amplitudes = _bumps(rng, options.num_bumps)
    fields = [bump_field(directions, centres, kappas, amplitudes)]
    for _ in range(options.extra_fields):
        fields.append(bump_field(directions, *_bumps(rng, options.num_bumps)))
    target = bump_field(directions, centres, kappas / options.smoothing, amplitudes)
    return directions, np.stack(fields, axis=1), target[:, None]


class ZooSphere(GeneratedBuilder):
    """Examples {"points": [P, 3], "features": [P, 1 + E], "weights": [P], "targets": [P, 1]} (float32)."""

    BUILDER_CONFIGS = [make_config(SphereOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        options = self.builder_config.options
        return feature_spec(options.num_points, 3, 1 + options.extra_fields, num_targets=1)

    def _generate_examples(self, split: str) -> Examples:
        config, options = self.builder_config, self.builder_config.options
        rotate = options.rotate if split == "train" else options.eval_rotate
        rng = np.random.default_rng(split_seed(config, split))
        weights = np.ones(options.num_points, np.float32)
        for index in range(split_size(config, split)):
            directions, features, targets = make_example(options, rng, rotate)
            # Renormalized after the float32 cast so that every stored direction has unit norm.
            points = directions.astype(np.float32)
            points /= np.linalg.norm(points, axis=1, keepdims=True)
            yield f"{index:08d}", {"points": points, "features": features.astype(np.float32), "weights": weights,
                                   "targets": targets.astype(np.float32)}


@register_dataset("zoo_sphere")
class SphereDataset(FeatureDataset):
    """Per-point regression rows for objective "point_regression"."""

    name, options_class, builder_class = "zoo_sphere", SphereOptions, ZooSphere

    def max_points(self, options: SphereOptions) -> int:
        return options.num_points

    def feature_dim(self, options: SphereOptions) -> int:
        return 1 + options.extra_fields
