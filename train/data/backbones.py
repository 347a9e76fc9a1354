"""`zoo_backbones`: synthetic protein-like Cα chains (issue 34), for the protein tokenizer.

A chain of L ~ UniformInt[min_length, max_length] residues concatenates secondary-structure segments, each in its
own random orientation and joined by a 3.8 Å step in a random direction:
    α-helix   ideal: radius 2.3 Å, rise 1.5 Å and 100° per residue (3.83 Å between neighbours), 6-14 residues
    β-strand  a zig-zag: 3.3 Å along the strand, ±0.94 Å across it (3.8 Å steps), 4-8 residues
    loop      a random walk of 3.8 Å steps with bond angles uniform in [90°, 120°] and random torsions, 2-6 residues
Chains with a clash (two residues at least two apart in sequence closer than 3.8 Å) are drawn again. Each chain is
centred and divided by 10 (Å → nm, as the paper feeds its model), so coordinates are O(1).

Batch fields (train.data.features): points [b, N, 3] (padding residues are zeros), features [b, N, 0], weights
[b, N] (ones on the L real residues, which come first), targets [b, N, 3] (the coordinates again: what a
tokenizer reconstructs). Options go in data.task_options, e.g. (("max_length", 64),).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.point_sets import random_rotations
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import TaskOptions, check_option, make_config

CA_STEP = 3.8  # Å between consecutive Cα atoms
HELIX_RADIUS, HELIX_RISE, HELIX_TURN = 2.3, 1.5, np.deg2rad(100.0)
STRAND_RISE = 3.3
STRAND_OFFSET = np.sqrt(CA_STEP**2 - STRAND_RISE**2) / 2
BOND_ANGLES = (np.deg2rad(90.0), np.deg2rad(120.0))
SEGMENT_LENGTHS = {"helix": (6, 14), "strand": (4, 8), "loop": (2, 6)}
ANGSTROM_PER_UNIT = 10.0
MAX_TRIES = 1000
SEGMENT_TRIES = 20


@dataclasses.dataclass(frozen=True)
class BackboneOptions(TaskOptions):
    """Synthetic Cα chains."""

    min_length: int = 32
    max_length: int = 96
    train_examples: int = 2048
    eval_examples: int = 256

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("min_length", self.min_length, 8)
        check_option("max_length", self.max_length, self.min_length)


def _unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def helix_steps(count: int) -> np.ndarray:
    """The `count` − 1 steps [count − 1, 3] between consecutive Cα of an ideal α-helix."""
    angles = HELIX_TURN * np.arange(count)
    points = np.stack([HELIX_RADIUS * np.cos(angles), HELIX_RADIUS * np.sin(angles), HELIX_RISE * np.arange(count)], 1)
    return np.diff(points, axis=0)


def strand_steps(count: int) -> np.ndarray:
    """The steps [count − 1, 3] of a β-strand zig-zag."""
    points = np.stack([STRAND_RISE * np.arange(count), STRAND_OFFSET * (-1.0) ** np.arange(count),
                       np.zeros(count)], 1)
    return np.diff(points, axis=0)


def loop_steps(count: int, previous: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`count` steps [count, 3] of 3.8 Å whose bond angle with the step before (`previous`) is in [90°, 120°]."""
    steps = []
    for _ in range(count):
        bond = np.pi - rng.uniform(*BOND_ANGLES)  # the turn between consecutive steps
        normal = _unit(np.cross(previous, rng.normal(size=3)))
        torsion = rng.uniform(0.0, 2 * np.pi)
        # Rodrigues: rotate the normal about the previous step by the torsion, then tilt the step by the turn.
        axis = _unit(previous)
        side = normal * np.cos(torsion) + np.cross(axis, normal) * np.sin(torsion)
        previous = CA_STEP * (np.cos(bond) * axis + np.sin(bond) * side)
        steps.append(previous)
    return np.asarray(steps)


def _segment(kind: str, count: int, previous: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`count` steps [count, 3]: a random-direction joining step then the segment's own, randomly oriented."""
    if kind == "loop":
        return loop_steps(count, previous, rng)
    join = CA_STEP * _unit(rng.normal(size=3))
    inner = helix_steps(count) if kind == "helix" else strand_steps(count)
    return np.concatenate([join[None], inner @ random_rotations(rng, 1)[0].T])


def chain(length: int, rng: np.random.Generator) -> np.ndarray:
    """Cα coordinates [length, 3] in Å of one clash-free chain (module docstring), not centred. Grown segment by
    segment: a segment that clashes with the chain so far is drawn again (kind, length, orientation), and after
    SEGMENT_TRIES failures the chain starts over."""
    for _ in range(MAX_TRIES):
        points = _grow(length, rng)
        if points is not None:
            return points
    raise RuntimeError(f"no clash-free chain of {length} residues in {MAX_TRIES} draws")


def _grow(length: int, rng: np.random.Generator) -> np.ndarray | None:
    points, previous = np.zeros((1, 3)), CA_STEP * _unit(rng.normal(size=3))
    while len(points) < length:
        for _ in range(SEGMENT_TRIES):
            kind = ("helix", "strand", "loop")[rng.integers(3)]
            low, high = SEGMENT_LENGTHS[kind]
            steps = _segment(kind, int(rng.integers(low, high + 1)), previous, rng)[: length - len(points)]
            candidate = np.concatenate([points, points[-1] + np.cumsum(steps, axis=0)])
            if not has_clash(candidate, first_new=len(points)):
                points, previous = candidate, steps[-1]
                break
        else:
            return None
    return points


def has_clash(points: np.ndarray, first_new: int = 0) -> bool:
    """Whether two residues at least two apart in sequence, one of them at index >= first_new, are closer than
    3.8 Å (less a rounding margin)."""
    distances = np.linalg.norm(points[first_new:, None] - points[None], axis=-1)
    index = np.arange(len(points))
    apart = np.abs(index[first_new:, None] - index[None]) >= 2
    return bool(np.any(distances[apart] < CA_STEP - 1e-6))


def generate(options: BackboneOptions, num_examples: int, seed: np.random.SeedSequence
             ) -> tuple[np.ndarray, np.ndarray]:
    """(points float32 [E, max_length, 3] centred, in nm, zeros past each chain; weights float32 [E, max_length]),
    deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    points = np.zeros((num_examples, options.max_length, 3), np.float32)
    weights = np.zeros((num_examples, options.max_length), np.float32)
    for index in range(num_examples):
        length = int(rng.integers(options.min_length, options.max_length + 1))
        coordinates = chain(length, rng)
        points[index, :length] = (coordinates - coordinates.mean(axis=0)) / ANGSTROM_PER_UNIT
        weights[index, :length] = 1.0
    return points, weights


class ZooBackbones(GeneratedBuilder):
    """Examples {"points": float32 [M, 3], "weights": float32 [M], "targets": float32 [M, 3]}."""

    BUILDER_CONFIGS = [make_config(BackboneOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return feature_spec(self.builder_config.options.max_length, 3, 0, num_targets=3)

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        points, weights = generate(config.options, split_size(config, split), split_seed(config, split))
        for index, (chain_points, chain_weights) in enumerate(zip(points, weights, strict=True)):
            yield f"{index:08d}", {"points": chain_points, "weights": chain_weights, "targets": chain_points}


@register_dataset("zoo_backbones")
class BackbonesDataset(FeatureDataset):
    """Cα chains for objective "protein_reconstruction"."""

    name, options_class, builder_class = "zoo_backbones", BackboneOptions, ZooBackbones
    labelled = False

    def max_points(self, options: BackboneOptions) -> int:
        return options.max_length
