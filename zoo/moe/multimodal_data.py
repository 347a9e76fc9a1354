"""A synthetic multimodal classification task with missing modalities, for ConfSMoE (`zoo.moe.multimodal`).

Each sample has M modalities; modality m is a sequence of S raw tokens of F_m features drawn from a
class-conditional Gaussian mixture:

    x_m = signal_m · μ_{m, y, j} + ε,   j ~ Uniform(components),  ε ~ N(0, noise²/F_m · I)   x_m [S, F_m]

with prototypes μ ~ N(0, I / F_m) (so a token's squared norm is about 1), fixed per task seed. Every
modality carries part of the class evidence (with noise, one modality alone classifies worse than all).
Missing entries are zeroed in the raw inputs and marked in `present` [N, M] (True = observed).

Missingness follows the three experiment settings of the ConfSMoE code's data loaders (reconstruction: the
paper text was not available, the settings are read from its loaders):
  "I"    modality-specific availability: modality m is missing independently with its own rate
         (`modality_missing_rates`), in training and test alike (the clinical datasets' natural gaps);
  "II"   random missingness in training and test: ⌊N·M·ratio⌋ (sample, modality) entries are dropped,
         never a sample's one reserved (randomly chosen) modality, so every sample keeps one;
  "III"  training as "II"; every test sample lacks modality `dropped_modality` entirely.

Stage 1 of ConfSMoE's imputation for evaluation happens here, on the data: `fill_missing` replaces each missing
input by the mean of `pool_size` random training inputs of that modality (a `TrainingPool` of the training
split only, so test inputs never leak into a fill); during training the fill is drawn anew at every step
(`zoo.moe.multimodal.fill_from_batch`). `pack_points` lays a split out as a feature dataset of the shared
trainer (`train.data.features`; the `zoo_multimodal` TFDS builder in `train.data.multimodal` stores it):

    points   [N, M·S, F_max]  point m·S + s is modality m's token s: its F_m features, zeros after
    features [N, M·S, 1]      1 on the tokens of a missing modality whose fill is drawn during training
                              (`to_fill`: the training split), 0 elsewhere
    weights  [N, M·S]         1 where the modality is present, 0 where it is missing

and `zoo.moe.multimodal.unpack_points` reads the classifier's inputs back from a batch of them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from icml26zoo.validation import check_choice, check_int, check_positive, check_unit_interval

SETTINGS = ("I", "II", "III")


@dataclasses.dataclass(frozen=True)
class MultimodalTaskConfig:
    """The task: classes, modalities (feature widths), tokens per modality, signal and missingness."""

    num_classes: int = 4
    # F_m per modality (2 or 3 modalities).
    feature_dims: tuple[int, ...] = (6, 10)
    tokens: int = 8
    # Gaussian components per class and modality.
    components: int = 2
    # signal_m per modality (one value: all alike).
    signal: tuple[float, ...] = (1.0, 1.0)
    noise: float = 1.0
    train_size: int = 2048
    test_size: int = 512
    setting: str = "II"
    # Share of (sample, modality) entries dropped in settings "II" and "III" (training; "II" also test).
    missing_ratio: float = 0.5
    # Setting "I": each modality's own missing rate (one value per modality).
    modality_missing_rates: tuple[float, ...] = (0.3, 0.5)
    # Setting "III": the modality every test sample lacks.
    dropped_modality: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("num_classes", self.num_classes, minimum=2)
        modalities = len(self.feature_dims)
        if modalities not in (2, 3):
            raise ValueError(f"feature_dims must name 2 or 3 modalities, got {self.feature_dims!r}")
        for dim in self.feature_dims:
            check_int("feature_dims entries", dim)
        for name in ("tokens", "components", "train_size", "test_size"):
            check_int(name, getattr(self, name))
        check_int("seed", self.seed, minimum=0)
        for name, values in (("signal", self.signal), ("modality_missing_rates", self.modality_missing_rates)):
            if len(values) != modalities:
                raise ValueError(f"{name} must have one value per modality ({modalities}), got {values!r}")
        for value in self.signal:
            check_positive("signal entries", value)
        check_positive("noise", self.noise)
        check_choice("setting", self.setting, SETTINGS)
        check_unit_interval("missing_ratio", self.missing_ratio)
        for rate in self.modality_missing_rates:
            check_unit_interval("modality_missing_rates entries", rate)
        if not 0 <= self.dropped_modality < modalities:
            raise ValueError(f"dropped_modality must lie in [0, {modalities}), got {self.dropped_modality!r}")

    @property
    def num_modalities(self) -> int:
        return len(self.feature_dims)


@dataclasses.dataclass(frozen=True)
class MultimodalSplit:
    """One split: inputs[m] [N, S, F_m] float32 (zero where missing), present [N, M] bool, labels [N] int32."""

    inputs: tuple[np.ndarray, ...]
    present: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def take(self, rows: np.ndarray) -> MultimodalSplit:
        return MultimodalSplit(tuple(x[rows] for x in self.inputs), self.present[rows], self.labels[rows])


@dataclasses.dataclass(frozen=True)
class MultimodalData:
    train: MultimodalSplit
    test: MultimodalSplit
    config: MultimodalTaskConfig


def random_missing_mask(num_samples: int, num_modalities: int, ratio: float, rng: np.random.Generator) -> np.ndarray:
    """present [N, M] bool: ⌊N·M·ratio⌋ entries dropped (at most the non-reserved ones), one reserved per row."""
    reserved = rng.integers(0, num_modalities, size=num_samples)
    candidates = np.ones((num_samples, num_modalities), bool)
    candidates[np.arange(num_samples), reserved] = False
    flat = np.flatnonzero(candidates)
    count = min(int(num_samples * num_modalities * ratio), flat.size)
    present = np.ones(num_samples * num_modalities, bool)
    present[rng.choice(flat, size=count, replace=False)] = False
    return present.reshape(num_samples, num_modalities)


def independent_missing_mask(num_samples: int, rates: tuple[float, ...], rng: np.random.Generator) -> np.ndarray:
    """present [N, M] bool: modality m missing with probability rates[m]; a row left empty keeps one at random."""
    present = rng.random((num_samples, len(rates))) >= np.asarray(rates)
    empty = np.flatnonzero(~present.any(axis=1))
    present[empty, rng.integers(0, len(rates), size=empty.size)] = True
    return present


def split_mask(config: MultimodalTaskConfig, num_samples: int, *, train: bool, rng: np.random.Generator) -> np.ndarray:
    """The present mask [N, M] of one split under the config's setting."""
    modalities = config.num_modalities
    if config.setting == "I":
        return independent_missing_mask(num_samples, config.modality_missing_rates, rng)
    if config.setting == "III" and not train:
        present = np.ones((num_samples, modalities), bool)
        present[:, config.dropped_modality] = False
        return present
    return random_missing_mask(num_samples, modalities, config.missing_ratio, rng)


def _prototypes(config: MultimodalTaskConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """μ_m [C, components, S, F_m] per modality, variance 1/F_m per feature."""
    shape = (config.num_classes, config.components, config.tokens)
    return [rng.normal(0.0, 1.0 / np.sqrt(dim), size=(*shape, dim)) for dim in config.feature_dims]


def _sample(config: MultimodalTaskConfig, prototypes: list[np.ndarray], size: int, *, train: bool,
            rng: np.random.Generator) -> MultimodalSplit:
    labels = rng.integers(0, config.num_classes, size=size)
    present = split_mask(config, size, train=train, rng=rng)
    inputs = []
    for m, (mu, signal) in enumerate(zip(prototypes, config.signal, strict=True)):
        component = rng.integers(0, config.components, size=size)
        x = signal * mu[labels, component] + config.noise * rng.normal(size=(size, *mu.shape[2:])) / np.sqrt(
            mu.shape[-1])
        inputs.append(np.where(present[:, m, None, None], x, 0.0).astype(np.float32))
    return MultimodalSplit(tuple(inputs), present, labels.astype(np.int32))


def make_multimodal_data(config: MultimodalTaskConfig) -> MultimodalData:
    """Training and test splits of the task (deterministic in config.seed; prototypes shared by both)."""
    prototype_rng, train_rng, test_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(
        config.seed).spawn(3))
    prototypes = _prototypes(config, prototype_rng)
    return MultimodalData(
        train=_sample(config, prototypes, config.train_size, train=True, rng=train_rng),
        test=_sample(config, prototypes, config.test_size, train=False, rng=test_rng),
        config=config,
    )


@dataclasses.dataclass(frozen=True)
class TrainingPool:
    """Stage 1's pool: rows[m] [P_m, S, F_m], the training inputs in which modality m is present.

    Built only by `training_pool` from a dataset's training split, so test inputs cannot leak into the fill.
    """

    rows: tuple[np.ndarray, ...]


def training_pool(data: MultimodalData) -> TrainingPool:
    """The pool of `data.train` (never its test split); ValueError if some modality is never present."""
    train = data.train
    rows = []
    for m, x in enumerate(train.inputs):
        observed = train.present[:, m]
        if not observed.any():
            raise ValueError(f"training split has no sample with modality {m} present: stage 1 has no pool")
        rows.append(np.asarray(x[observed]))
    return TrainingPool(tuple(rows))


def fill_missing(inputs: tuple[np.ndarray, ...], present: np.ndarray, pool: TrainingPool, rng: np.random.Generator,
                 pool_size: int) -> tuple[np.ndarray, ...]:
    """Stage 1: each missing inputs[m][b] [S, F_m] becomes the mean of `pool_size` pool rows drawn at random
    (with replacement, independently per sample); present entries are returned unchanged."""
    if len(inputs) != len(pool.rows):
        raise ValueError(f"inputs must hold {len(pool.rows)} modality arrays (the pool's), got {len(inputs)}")
    expected = (inputs[0].shape[0], len(pool.rows))
    if present.shape != expected:
        raise ValueError(f"present (the missing-modality mask) must have shape [B, M] = {expected}, "
                         f"got {present.shape}")
    check_int("pool_size", pool_size)
    filled = []
    for m, (x, rows) in enumerate(zip(inputs, pool.rows, strict=True)):
        picks = rng.integers(0, rows.shape[0], size=(x.shape[0], pool_size))
        average = np.mean(rows[picks], axis=1).astype(x.dtype)
        filled.append(np.where(present[:, m, None, None], x, average))
    return tuple(filled)


def fill_split(data: MultimodalData, split: str, pool_size: int) -> MultimodalSplit:
    """`data`'s split "train" or "test" with stage 1 applied from the training pool, deterministic in the task
    seed: the 4th and 5th children of SeedSequence(seed) (the first three draw the data) fill the two splits."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    part: MultimodalSplit = getattr(data, split)
    child = np.random.SeedSequence(data.config.seed).spawn(5)[3 if split == "train" else 4]
    inputs = fill_missing(part.inputs, part.present, training_pool(data), np.random.default_rng(child), pool_size)
    return MultimodalSplit(inputs, part.present, part.labels)


def pack_points(split: MultimodalSplit, *, to_fill: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points [N, M·S, F_max], features [N, M·S, 1], weights [N, M·S]), float32: the split as a feature dataset
    (module docstring); `to_fill` flags its missing modalities' tokens for a fill drawn during training.
    `zoo.moe.multimodal.unpack_points` inverts it."""
    width = max(x.shape[-1] for x in split.inputs)
    points = np.concatenate([np.pad(x, ((0, 0), (0, 0), (0, width - x.shape[-1]))) for x in split.inputs], axis=1)
    tokens = split.inputs[0].shape[1]
    weights = np.repeat(split.present.astype(np.float32), tokens, axis=1)
    features = ((weights == 0) & to_fill).astype(np.float32)[..., None]
    return points.astype(np.float32), features, weights
