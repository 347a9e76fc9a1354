"""CAMP's two complementary two-modality classification tasks (docs/papers/camp.md) as feature datasets.

`zoo_complementary` (synthetic): latent factors z₁, z₂ ~ Uniform{0, 1, 2}, class y = (z₁ + z₂) mod 3, so neither
    modality alone says anything about y (each z is independent of y) and both together determine it. Modality m
    observes only its factor: raw x_m = μ_m[z_m] + noise · N(0, I_k) (μ_m [3, k] standard normal), then a frozen
    random MLP "encoder" e_m = tanh(x_m W₁ + b₁) W₂ (k → 64 → embed_dim; N(0, 1/fan-in) weights, b₁ N(0, 1)).
    μ and the encoders come from SeedSequence([seed, 2]), shared by both splits; each split draws its samples
    from SeedSequence([seed, split index]) (the generated datasets' convention).
`zoo_digit_halves`: scikit-learn's bundled 8 × 8 digits (the `[sklearn]` extra; nothing is downloaded), the left
    four pixel columns one modality and the right four the other (32 pixels each, scaled to [0, 1]; the
    "encoder" is the identity), 10 classes. The train / validation splits are the zoo's stratified digits
    split (`train.data.digits.split_images`: 1,437 / 360 images); train_examples / eval_examples keep the first
    that many of each.

Missingness (both): each modality of each sample is missing with probability missing_rate, independently
(the same rate in both splits); a sample left with none keeps one modality chosen uniformly. Drawn after the
samples (zoo_complementary: by the split's generator; zoo_digit_halves: from SeedSequence([seed, split index,
3])), so the same seed gives the same samples at every rate.

Batch layout (`train.data.features`): points float32 [b, N, F] (point m = modality m's embedding, zeros past its
width; a missing modality's row is zeros), features [b, N, 0], weights [b, N] (1 on present modalities),
labels int32 [b]. N = seq_len >= 2.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.data.digits import load_images, split_images
from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import SPLITS, Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import FIELD, TaskOptions, check_option, make_config
from icml26zoo.validation import check_non_negative, check_probability

MODALITIES = 2
FACTOR_VALUES = 3
ENCODER_HIDDEN = 64
DIGIT_PIXELS = 16.0
DIGIT_SPLITS = {"train": "train", "validation": "test"}
DIGIT_SIZES = {"train": 1437, "validation": 360}


def drop_modalities(rng: np.random.Generator, count: int, modalities: int, rate: float) -> np.ndarray:
    """present float32 [count, modalities]: each entry 0 with probability `rate`, every row keeping one."""
    present = rng.random((count, modalities)) >= rate
    keep = rng.integers(modalities, size=count)
    empty = ~present.any(axis=1)
    present[empty, keep[empty]] = True
    return present.astype(np.float32)


def pack(embeddings: tuple[np.ndarray, ...], present: np.ndarray) -> np.ndarray:
    """points float32 [E, M, max d_m]: row m = embeddings[m] · present[:, m], zeros past d_m."""
    width = max(e.shape[1] for e in embeddings)
    points = np.zeros((present.shape[0], len(embeddings), width), np.float32)
    for m, e in enumerate(embeddings):
        points[:, m, : e.shape[1]] = e * present[:, m:m + 1]
    return points


@dataclasses.dataclass(frozen=True)
class ComplementaryOptions(TaskOptions):
    """Synthetic complementary two-modality classification, class (z1 + z2) mod 3."""

    # k, the raw dimension per modality, and the frozen encoders' output width d.
    raw_dim: int = 8
    embed_dim: int = 32
    noise: float = 0.5
    missing_rate: float = 0.0
    train_examples: int = 2048
    eval_examples: int = 512

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("raw_dim", self.raw_dim, 1)
        check_option("embed_dim", self.embed_dim, 1)
        check_non_negative(f"{FIELD} option 'noise'", self.noise, finite=True)
        check_probability(f"{FIELD} option 'missing_rate'", self.missing_rate)


def complementary_task(options: ComplementaryOptions) -> dict[str, list[np.ndarray]]:
    """The task's fixed parts, from SeedSequence([seed, 2]): "means" μ_m [3, k] and "encoders" (W₁ [k, 64],
    b₁ [64], W₂ [64, d]) per modality."""
    rng = np.random.default_rng(np.random.SeedSequence([options.seed, 2]))
    k, d = options.raw_dim, options.embed_dim
    task: dict[str, list[np.ndarray]] = {"means": [], "encoders": []}
    for _ in range(MODALITIES):
        task["means"].append(rng.normal(size=(FACTOR_VALUES, k)))
        task["encoders"].append((rng.normal(size=(k, ENCODER_HIDDEN)) / np.sqrt(k), rng.normal(size=ENCODER_HIDDEN),
                                 rng.normal(size=(ENCODER_HIDDEN, d)) / np.sqrt(ENCODER_HIDDEN)))
    return task


def complementary_examples(options: ComplementaryOptions, count: int, seed: np.random.SeedSequence | int,
                           missing_rate: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points float32 [count, 2, d], present float32 [count, 2], labels int32 [count]) drawn from `seed`
    (module docstring); missing_rate overrides the options' (fresh test data at another rate)."""
    rate = options.missing_rate if missing_rate is None else check_probability("missing_rate", missing_rate)
    task = complementary_task(options)
    rng = np.random.default_rng(seed)
    factors = rng.integers(FACTOR_VALUES, size=(count, MODALITIES))
    embeddings = []
    for m in range(MODALITIES):
        raw = task["means"][m][factors[:, m]] + options.noise * rng.normal(size=(count, options.raw_dim))
        w1, b1, w2 = task["encoders"][m]
        embeddings.append(np.tanh(raw @ w1 + b1) @ w2)
    # Drawn after the samples: the same seed gives the same samples at every missing rate.
    present = drop_modalities(rng, count, MODALITIES, rate)
    labels = (factors.sum(axis=1) % FACTOR_VALUES).astype(np.int32)
    return pack(tuple(embeddings), present), present, labels


def digit_halves(split: str, count: int | None = None, missing_rate: float = 0.0, seed: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points float32 [E, 2, 32], present [E, 2], labels int32 [E]) of the first `count` images of the digits
    split ("train" or "validation"), left / right halves, missingness drawn from SeedSequence([seed, split, 3])."""
    pixels, labels = split_images(*load_images())[DIGIT_SPLITS[split]]
    count = len(labels) if count is None else count
    images = pixels[:count].reshape(count, 8, 8).astype(np.float32) / DIGIT_PIXELS
    halves = (images[:, :, :4].reshape(count, 32), images[:, :, 4:].reshape(count, 32))
    rng = np.random.default_rng([seed, SPLITS.index(split), 3])
    present = drop_modalities(rng, count, MODALITIES, missing_rate)
    return pack(halves, present), present, labels[:count].astype(np.int32)


class _Builder(GeneratedBuilder, skip_registration=True):
    """Examples {"points": float32 [2, F], "weights": float32 [2], "label": int32}."""

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return feature_spec(MODALITIES, self.width, 0)

    def _generate_examples(self, split: str) -> Examples:
        points, present, labels = self.examples(split)
        for index, label in enumerate(labels):
            yield f"{index:08d}", {"points": points[index], "weights": present[index], "label": np.int32(label)}


class ZooComplementary(_Builder):
    BUILDER_CONFIGS = [make_config(ComplementaryOptions())]

    @property
    def width(self) -> int:
        return self.builder_config.options.embed_dim

    def examples(self, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        config = self.builder_config
        return complementary_examples(config.options, split_size(config, split), split_seed(config, split))


@dataclasses.dataclass(frozen=True)
class DigitHalvesOptions(TaskOptions):
    """scikit-learn's digits, left and right halves as two modalities."""

    missing_rate: float = 0.0
    train_examples: int = DIGIT_SIZES["train"]
    eval_examples: int = DIGIT_SIZES["validation"]

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("train_examples", self.train_examples, 1, DIGIT_SIZES["train"])
        check_option("eval_examples", self.eval_examples, 1, DIGIT_SIZES["validation"])
        check_probability(f"{FIELD} option 'missing_rate'", self.missing_rate)


class ZooDigitHalves(_Builder):
    BUILDER_CONFIGS = [make_config(DigitHalvesOptions())]
    width = 32

    def examples(self, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        config = self.builder_config
        options = config.options
        return digit_halves(split, split_size(config, split), options.missing_rate, options.seed)


class _CampDataset(FeatureDataset):
    def max_points(self, options: TaskOptions) -> int:
        return MODALITIES


@register_dataset("zoo_complementary")
class ComplementaryDataset(_CampDataset):
    """Two complementary modalities, class (z1 + z2) mod 3, for models "camp" / "camp_concat"."""

    name, options_class, builder_class = "zoo_complementary", ComplementaryOptions, ZooComplementary


@register_dataset("zoo_digit_halves", extras=("sklearn",))
class DigitHalvesDataset(_CampDataset):
    """The digits' left and right halves as two modalities, for models "camp" / "camp_concat"."""

    name, options_class, builder_class = "zoo_digit_halves", DigitHalvesOptions, ZooDigitHalves
