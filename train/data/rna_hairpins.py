"""`rna_hairpins`: synthetic RNA hairpin backbones for 3-D RNA inverse folding (ATL-FGD, icml26zoo.bio.rna_design).

A structure of L in [min_length, max_length] nucleotides has 1-2 stem-loops (stems 4-8 bp, loops 3-8 nt), joined
by a short linker, with 0-3 dangling nucleotides at each end (topologies outside the length range are drawn
again). Geometry (P atoms, Å): stems are ideal A-form-like duplexes, radius 9 Å, rise 2.8 Å, twist 32.7°, the
partner strand 150° round the axis (pair P-P ≈ 17.4 Å, sequential ≈ 5.8 Å); loops, linkers and dangling ends are
smooth arcs. The six backbone atoms (P, O5', C5', C4', C3', O3') sit at fixed offsets in each nucleotide's frame
(tangent of the P trace, its normal to the helix axis); every atom gets Gaussian noise of `noise_tenths` / 10 Å.
Sequences: stem pairs GC/CG 0.3 each, AU/UA 0.15 each, GU/UG 0.05 each; loop and linker bases uniform, a 4-nt
loop a GNRA tetraloop with probability 1/2.

With teacher_dim > 0 the build also trains the FGD teacher (icml26zoo.bio.rna_teacher.TinyRNALM, width
teacher_dim, teacher_layers blocks, teacher_steps Adam steps) on teacher_corpus sequences of the same grammar
(no coordinates; its own seed stream) and stores its embeddings of every structure's native sequence, computed
once: teacher_plain = 0 masks position i for z_i (teacher_mode "context"), 1 is the unmasked leak ablation.

Batch fields (train.data.features): points [b, N, 18] (6 atoms x 3, Å, centred; padding zeros), features
[b, N, teacher_dim] (teacher embeddings; 0 wide without a teacher), weights [b, N] (1 on the real nucleotides,
which come first), targets [b, N, 2] (native base A, C, G, U = 0..3; partner index, -1 unpaired).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tensorflow_datasets as tfds
from flax import nnx

from icml26zoo.bio.rna_teacher import TinyRNALM, context_embeddings, train_teacher
from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import TaskOptions, check_option, make_config

RADIUS, RISE, TWIST, PARTNER_ANGLE = 9.0, 2.8, np.deg2rad(32.7), np.deg2rad(150.0)
STEP = 6.0  # Å between consecutive P atoms along arcs
STEMS, LOOPS, DANGLING = (4, 8), (3, 8), (0, 3)
SEPARATION = 36.0  # Å between the axes of two stem-loops
# Offsets (Å) of O5', C5', C4', C3', O3' in the frame (tangent, normal, binormal) at P; values immaterial.
OFFSETS = np.array([[1.0, 1.2, 0.0], [1.6, 2.3, 0.5], [2.8, 2.5, 1.0], [3.6, 1.5, 1.6], [4.6, 0.8, 1.0]])
PAIRS = ((2, 1), (1, 2), (0, 3), (3, 0), (2, 3), (3, 2))  # GC, CG, AU, UA, GU, UG (A, C, G, U = 0..3)
PAIR_PROBS = (0.3, 0.3, 0.15, 0.15, 0.05, 0.05)
MAX_TRIES = 10_000


@dataclasses.dataclass(frozen=True)
class HairpinOptions(TaskOptions):
    """Synthetic RNA hairpin backbones."""

    min_length: int = 24
    max_length: int = 48
    noise_tenths: int = 5
    train_examples: int = 2048
    eval_examples: int = 256
    teacher_dim: int = 0
    teacher_layers: int = 2
    teacher_corpus: int = 4096
    teacher_steps: int = 400
    teacher_plain: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("min_length", self.min_length, 24)
        check_option("max_length", self.max_length, self.min_length)
        check_option("noise_tenths", self.noise_tenths, 0)
        check_option("teacher_dim", self.teacher_dim, 0)
        check_option("teacher_layers", self.teacher_layers, 1)
        check_option("teacher_corpus", self.teacher_corpus, 1)
        check_option("teacher_steps", self.teacher_steps, 0)
        check_option("teacher_plain", self.teacher_plain, 0, 1)


@dataclasses.dataclass(frozen=True)
class Topology:
    """Segment lengths: dangling 5', [(stem, loop), ...], linker, dangling 3'."""

    five: int
    hairpins: tuple[tuple[int, int], ...]
    linker: int
    three: int

    @property
    def length(self) -> int:
        return self.five + sum(2 * stem + loop for stem, loop in self.hairpins) + self.linker + self.three


def sample_topology(rng: np.random.Generator, min_length: int, max_length: int) -> Topology:
    """A topology of min_length..max_length nucleotides (rejection sampling)."""
    for _ in range(MAX_TRIES):
        count = int(rng.integers(1, 3))
        hairpins = tuple((int(rng.integers(STEMS[0], STEMS[1] + 1)), int(rng.integers(LOOPS[0], LOOPS[1] + 1)))
                         for _ in range(count))
        linker = int(rng.integers(3, 7)) if count == 2 else 0
        topology = Topology(int(rng.integers(DANGLING[0], DANGLING[1] + 1)), hairpins, linker,
                            int(rng.integers(DANGLING[0], DANGLING[1] + 1)))
        if min_length <= topology.length <= max_length:
            return topology
    raise RuntimeError(f"no topology of {min_length}-{max_length} nucleotides in {MAX_TRIES} draws")


def sample_sequence(topology: Topology, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(bases int [L], partner int [L], -1 unpaired) of a topology, in 5' -> 3' order."""
    bases, partner = list(rng.integers(0, 4, topology.five)), [-1] * topology.five
    for index, (stem, loop) in enumerate(topology.hairpins):
        if index:
            bases += list(rng.integers(0, 4, topology.linker))
            partner += [-1] * topology.linker
        pairs = [PAIRS[i] for i in rng.choice(len(PAIRS), stem, p=PAIR_PROBS)]
        start = len(bases)
        loop_bases = list(rng.integers(0, 4, loop))
        if loop == 4 and rng.random() < 0.5:  # GNRA: G, any, A or G, A
            loop_bases = [2, int(rng.integers(0, 4)), int(rng.choice([0, 2])), 0]
        bases += [a for a, _ in pairs] + loop_bases + [b for _, b in reversed(pairs)]
        end = len(bases) - 1
        partner += [-1] * (2 * stem + loop)
        for t in range(stem):
            partner[start + t], partner[end - t] = end - t, start + t
    bases += list(rng.integers(0, 4, topology.three))
    partner += [-1] * topology.three
    return np.asarray(bases, np.int64), np.asarray(partner, np.int64)


def _arc(start: np.ndarray, end: np.ndarray, count: int, bulge: np.ndarray) -> np.ndarray:
    """`count` points [count, 3] strictly between start and end on a sine arc bulging along unit `bulge`, its
    height set so that the steps are about STEP."""
    s = np.arange(1, count + 1) / (count + 1)
    chord = np.linalg.norm(end - start)
    height = 0.5 * np.sqrt(max((STEP * (count + 1)) ** 2 - chord**2, 0.0))
    return start + s[:, None] * (end - start) + height * np.sin(np.pi * s)[:, None] * bulge


def _stem_points(stem: int) -> tuple[np.ndarray, np.ndarray]:
    """P atoms of the two strands [stem, 3] each, index t = base pair t from the bottom."""
    theta, z = TWIST * np.arange(stem), RISE * np.arange(stem)
    strand = lambda offset: np.stack([RADIUS * np.cos(theta + offset), RADIUS * np.sin(theta + offset), z], 1)  # noqa: E731
    return strand(0.0), strand(PARTNER_ANGLE)


def phosphates(topology: Topology, rng: np.random.Generator) -> np.ndarray:
    """P atoms [L, 3] (Å) of a topology, 5' -> 3' (module docstring)."""
    up, down = np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.0, -1.0])
    pieces = []
    for index, (stem, loop) in enumerate(topology.hairpins):
        a, b = _stem_points(stem)
        turn = rng.uniform(0, 2 * np.pi)
        rotation = np.array([[np.cos(turn), -np.sin(turn), 0.0], [np.sin(turn), np.cos(turn), 0.0], [0, 0, 1.0]])
        shift = np.array([SEPARATION * index, 0.0, 0.0])
        a, b = a @ rotation.T + shift, b @ rotation.T + shift
        if index:
            pieces.append(_arc(pieces[-1][-1], a[0], topology.linker, down))
        pieces += [a, _arc(a[-1], b[-1], loop, up), b[::-1]]
    points = np.concatenate(pieces)
    first, last = points[0], points[-1]
    five = first + STEP * np.arange(topology.five, 0, -1)[:, None] * down
    three = last + STEP * np.arange(1, topology.three + 1)[:, None] * down
    return np.concatenate([five, points, three])


def backbone(P: np.ndarray) -> np.ndarray:
    """The six atoms [L, 6, 3] at OFFSETS in each nucleotide's frame (tangent of the P trace, normal to z)."""
    tangent = np.gradient(P, axis=0)
    tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
    normal = np.cross(tangent, [0.0, 0.0, 1.0])
    flat = np.linalg.norm(normal, axis=1) < 1e-3  # a tangent along z: take the normal to x instead
    normal[flat] = np.cross(tangent[flat], [1.0, 0.0, 0.0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    frames = np.stack([tangent, normal, np.cross(tangent, normal)], 1)  # [L, 3 (axes), 3]
    return np.concatenate([P[:, None], P[:, None] + np.einsum("ak,lkj->laj", OFFSETS, frames)], 1)


def structure(options: HairpinOptions, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X [L, 6, 3] centred and noised, bases [L], partner [L]) of one random structure."""
    topology = sample_topology(rng, options.min_length, options.max_length)
    bases, partner = sample_sequence(topology, rng)
    X = backbone(phosphates(topology, rng))
    X = X - X[:, 0].mean(axis=0) + rng.normal(scale=options.noise_tenths / 10.0, size=X.shape)
    return X, bases, partner


def generate(options: HairpinOptions, num_examples: int, seed: np.random.SeedSequence
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points float32 [E, M, 18], weights float32 [E, M], targets float32 [E, M, 2]), M = max_length."""
    rng = np.random.default_rng(seed)
    width = options.max_length
    points = np.zeros((num_examples, width, 18), np.float32)
    weights = np.zeros((num_examples, width), np.float32)
    targets = np.zeros((num_examples, width, 2), np.float32)
    targets[..., 1] = -1
    for index in range(num_examples):
        X, bases, partner = structure(options, rng)
        length = len(bases)
        points[index, :length] = X.reshape(length, 18)
        weights[index, :length] = 1.0
        targets[index, :length, 0], targets[index, :length, 1] = bases, partner
    return points, weights, targets


def corpus(options: HairpinOptions, count: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
    """(sequences int [count, max_length], mask [count, max_length]) of the grammar, no coordinates."""
    rng = np.random.default_rng(seed)
    sequences = np.zeros((count, options.max_length), np.int64)
    mask = np.zeros((count, options.max_length), np.float32)
    for index in range(count):
        bases, _ = sample_sequence(sample_topology(rng, options.min_length, options.max_length), rng)
        sequences[index, :len(bases)], mask[index, :len(bases)] = bases, 1.0
    return sequences, mask


@functools.lru_cache(maxsize=2)
def trained_teacher(options: HairpinOptions) -> TinyRNALM:
    """The teacher of `options`, trained once per process (both splits embed with the same one)."""
    teacher_seed = np.random.SeedSequence([options.seed, 7])
    model = TinyRNALM(options.teacher_dim, options.teacher_layers, max_len=options.max_length,
                      rngs=nnx.Rngs(int(teacher_seed.generate_state(1)[0])))
    sequences, mask = corpus(options, options.teacher_corpus, teacher_seed)
    train_teacher(model, sequences, mask, steps=options.teacher_steps, seed=options.seed)
    return model


def teacher_embeddings(options: HairpinOptions, weights: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The trained teacher's embeddings [E, M, teacher_dim] of the structures' native sequences."""
    mode = "plain" if options.teacher_plain else "context"
    return context_embeddings(trained_teacher(options), targets[..., 0].astype(np.int64), weights,
                              mode=mode).astype(np.float32)


class RnaHairpins(GeneratedBuilder):
    """Examples {"points": [M, 18], "weights": [M], "targets": [M, 2], "features": [M, teacher_dim]}."""

    BUILDER_CONFIGS = [make_config(HairpinOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        options = self.builder_config.options
        return feature_spec(options.max_length, 18, options.teacher_dim, num_targets=2)

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        points, weights, targets = generate(config.options, split_size(config, split), split_seed(config, split))
        features = (teacher_embeddings(config.options, weights, targets) if config.options.teacher_dim
                    else None)
        for index in range(len(points)):
            example = {"points": points[index], "weights": weights[index], "targets": targets[index]}
            if features is not None:
                example["features"] = features[index]
            yield f"{index:08d}", example


@register_dataset("rna_hairpins")
class HairpinsDataset(FeatureDataset):
    """RNA backbones for objective "rna_inverse_folding"."""

    name, options_class, builder_class = "rna_hairpins", HairpinOptions, RnaHairpins
    labelled = False

    def max_points(self, options: HairpinOptions) -> int:
        return options.max_length

    def feature_dim(self, options: HairpinOptions) -> int:
        return options.teacher_dim
