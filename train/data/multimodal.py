"""`zoo_multimodal`: the synthetic multimodal classification task of ConfSMoE as a feature dataset of the trainer.

The examples are those of `zoo.moe.multimodal_data.make_multimodal_data` (class-conditional Gaussian mixtures
per modality; read that module for the generative model). Each example is laid out as a point set of M·S
points (`multimodal_data.pack_points`), so the trainer batches it like the other feature datasets
(`train.data.features`):

    points   float32 [M·S, F_max]  point m·S + s: modality m's token s (F_m features, zeros after)
    features float32 [M·S, 1]      1 on a missing modality's tokens whose stage-1 fill is drawn in training
    weights  float32 [M·S]         1 where the modality is present, 0 where it is missing
    label    int32

Splits: "train" is the generator's training split, its missing inputs zero and flagged (features 1): ConfSMoE's
stage-1 fill, the mean of `pool_size` random training inputs of the modality, is drawn anew at every step
(objective "multimodal_moe", `zoo.moe.multimodal.fill_from_batch`). "validation" is its test split with the
fill drawn once from the whole training split (`multimodal_data.fill_split`; test inputs never enter a fill)
and stored, features 0. A batch row padded to seq_len > M·S points has weight 0 on the padding;
`zoo.moe.multimodal.unpack_points` reads the classifier's inputs back.

Seeds: unlike the other generated datasets (one SeedSequence([seed, split index]) per split), both splits
come from `np.random.SeedSequence(seed).spawn(5)`: the first child draws the class prototypes, which both
splits must share (otherwise the test split would be a different task), the second the training split and
the third the test split (labels, mixture components, noise and missingness, in that order); the fifth draws
the validation split's stage-1 fills.

Missingness (`setting`): "I" each modality missing independently with its own rate
(`modality_missing_rates`) in both splits (a sample left with no modality keeps one at random); "II"
⌊N·M·missing_ratio⌋ (sample, modality) entries dropped in both splits, never a sample's one reserved
modality; "III" training as "II", and every validation sample lacks modality `dropped_modality`.

Options go in `data.task_options` (`MultimodalOptions`), e.g. (("feature_dims", (6, 10, 4)), ("tokens", 8),
("signal", (1.0, 1.0, 1.0)), ("modality_missing_rates", (0.3, 0.3, 0.3))); seq_len must be at least M·S. The
builder config name spells out every option (`config_name`), so datasets with different settings never
collide on disk.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.moe.multimodal_data import MultimodalTaskConfig, fill_split, make_multimodal_data, pack_points
from icml26zoo.train.config import DataConfig
from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, GeneratedConfig
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import TaskOptions, check_option

SPLIT_OF = {"train": "train", "validation": "test"}


@dataclasses.dataclass(frozen=True)
class MultimodalOptions(TaskOptions):
    """Synthetic multimodal classification with missing modalities (ConfSMoE)."""

    num_classes: int = 4
    # F_m per modality (2 or 3 modalities).
    feature_dims: tuple[int, ...] = (6, 10)
    # Tokens S per modality.
    tokens: int = 8
    # Gaussian components per class and modality.
    components: int = 2
    # signal_m per modality.
    signal: tuple[float, ...] = (1.0, 1.0)
    noise: float = 1.0
    # "I", "II" or "III" (module docstring).
    setting: str = "II"
    # Share of (sample, modality) entries dropped in settings "II" and "III".
    missing_ratio: float = 0.5
    # Setting "I": each modality's own missing rate (one value per modality).
    modality_missing_rates: tuple[float, ...] = (0.3, 0.5)
    # Setting "III": the modality every validation sample lacks.
    dropped_modality: int = 0
    # Training inputs averaged per missing modality in the validation split's stage-1 fill (objective
    # multimodal_moe's option pool_size sets the training fills').
    pool_size: int = 10
    train_examples: int = 2048
    eval_examples: int = 512

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("pool_size", self.pool_size, 1)
        self.task  # noqa: B018  (validates the task; its ValueError names the field)

    @property
    def task(self) -> MultimodalTaskConfig:
        """The generator's config of these options."""
        return MultimodalTaskConfig(
            num_classes=self.num_classes, feature_dims=tuple(self.feature_dims), tokens=self.tokens,
            components=self.components, signal=tuple(self.signal), noise=self.noise,
            train_size=self.train_examples, test_size=self.eval_examples, setting=self.setting,
            missing_ratio=self.missing_ratio, modality_missing_rates=tuple(self.modality_missing_rates),
            dropped_modality=self.dropped_modality, seed=self.seed)

    @property
    def num_points(self) -> int:
        """M·S: points per example."""
        return len(self.feature_dims) * self.tokens


def _spell(value: object) -> str:
    if isinstance(value, tuple):
        return "-".join(_spell(v) for v in value)
    return f"{value:g}".replace(".", "p").replace("-", "m") if isinstance(value, float) else str(value)


def config_name(options: MultimodalOptions) -> str:
    """A name that spells out every option, e.g. "c4_f6-10_t8_k2_s1-1_n1_tr2048_te512_II_..._p10"."""
    task = options.task
    parts = [f"c{task.num_classes}", f"f{_spell(task.feature_dims)}", f"t{task.tokens}", f"k{task.components}",
             f"s{_spell(task.signal)}", f"n{_spell(task.noise)}", f"tr{task.train_size}", f"te{task.test_size}",
             task.setting, f"m{_spell(task.missing_ratio)}", f"r{_spell(task.modality_missing_rates)}",
             f"d{task.dropped_modality}", f"seed{task.seed}", f"p{options.pool_size}"]
    return "_".join(parts)


@dataclasses.dataclass(kw_only=True)
class MultimodalConfig(GeneratedConfig):
    """The options behind a builder config; `name` must be `config_name(options)`."""

    options: MultimodalOptions


def make_config(options: MultimodalOptions) -> MultimodalConfig:
    """The builder config of `options`."""
    return MultimodalConfig(name=config_name(options), options=options, train_examples=options.train_examples,
                            eval_examples=options.eval_examples, seed=options.seed,
                            description="Synthetic multimodal classification with missing modalities.")


class ZooMultimodal(GeneratedBuilder):
    """Examples {"points": float32 [M·S, F_max], "features": float32 [M·S, 1], "weights": float32 [M·S],
    "label": int32}; "train", "validation"."""

    BUILDER_CONFIGS = [make_config(MultimodalOptions())]
    VERSION = tfds.core.Version("2.0.0")
    RELEASE_NOTES = {"1.0.0": "Per-modality arrays.", "2.0.0": "Point sets with the stage-1 flags (module docstring)."}

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        options = self.builder_config.options
        return feature_spec(options.num_points, max(options.feature_dims), 1)

    def _generate_examples(self, split: str) -> Examples:
        options = self.builder_config.options
        data = make_multimodal_data(options.task)
        if split == "train":
            points, features, weights = pack_points(data.train, to_fill=True)
            labels = data.train.labels
        else:
            part = fill_split(data, SPLIT_OF[split], options.pool_size)
            points, features, weights = pack_points(part)
            labels = part.labels
        for index, label in enumerate(labels):
            yield f"{index:08d}", {"points": points[index], "features": features[index], "weights": weights[index],
                                   "label": np.int32(label)}


@register_dataset("zoo_multimodal")
class MultimodalDataset(FeatureDataset):
    """Labelled multimodal examples with missing modalities, for the "confsmoe" model and objective
    "multimodal_moe"."""

    name, options_class, builder_class = "zoo_multimodal", MultimodalOptions, ZooMultimodal

    def max_points(self, options: MultimodalOptions) -> int:
        return options.num_points

    def feature_dim(self, options: MultimodalOptions) -> int:
        return 1

    def builder(self, data: DataConfig, directory: str) -> ZooMultimodal:
        return ZooMultimodal.for_config(directory, make_config(self.options(data)))
