"""Synthetic multimodal sentiment analysis (MSA) with missing modalities, the API task (docs/papers/api.md), as a
feature dataset.

Each example is `multimodal.api_data.synthetic_msa`'s sample: a sentiment y in [-3, 3] and three sequences of
length T (text 32-d, audio 8-d, vision 12-d; the text the most informative) whose signal direction turns with y.
Split s draws its samples from the integer seed SeedSequence([seed, s]).generate_state(1)[0] (the fixed patterns
of the modalities, `world_seed`, are shared by both splits) and then its availability: each modality of each
sample missing with probability `missing_rate` in the validation split and `train_missing_rate` (default 0) in the
training split, at least one kept (`api_data.missing_mask`, seeded from the same integer + 1). The training split
is complete by default because API's protocol simulates missingness while training (objective `api` draws 1-3
available modalities per row at every step).

Batch layout (`train.data.features`), N = seq_len >= 3T points per row:
    points   float32 [b, N, 32]  rows m·T .. (m+1)·T − 1 hold modality m's sequence (text, audio, vision), zero-padded
                                 to 32 features; a missing modality's rows are kept, so evaluation can score an
                                 imputation against them (`model api` never reads them: it zeroes them first)
    weights  float32 [b, N]      1 on the rows of an available modality, 0 on a missing one's and on padding
    targets  float32 [b, N, 1]   the sentiment y on the example's 3T rows (0 on padding points and padding rows)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.multimodal import api_data
from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import FIELD, TaskOptions, check_option, make_config
from icml26zoo.validation import check_interval

MODALITIES = 3
WIDTH = max(api_data.MSAConfig().dims)


@dataclasses.dataclass(frozen=True)
class MSAOptions(TaskOptions):
    """Synthetic MSA: sequence length T and the probability that a modality is missing (per split)."""

    sequence_length: int = 20
    missing_rate: float = 0.5
    train_missing_rate: float = 0.0
    train_examples: int = 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("sequence_length", self.sequence_length, 1)
        for name in ("missing_rate", "train_missing_rate"):
            check_interval(f"{FIELD} option {name!r}", getattr(self, name), 0.0, 1.0, closed="left")


def msa_examples(options: MSAOptions, count: int, seed: int,
                 missing_rate: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points float32 [count, 3T, 32], weights float32 [count, 3T], sentiment float32 [count]) drawn from `seed`
    with each modality missing with probability `missing_rate` (module docstring); the samples do not depend on
    the rate, only their availability does."""
    check_interval("missing_rate", missing_rate, 0.0, 1.0, closed="left")
    length = options.sequence_length
    data = api_data.synthetic_msa(count, seed, api_data.MSAConfig(seq_len=length))
    available = api_data.missing_mask(count, missing_rate, seed + 1)
    points = np.zeros((count, MODALITIES * length, WIDTH), np.float32)
    for m, name in enumerate(("text", "audio", "vision")):
        points[:, m * length:(m + 1) * length, : data[name].shape[2]] = data[name]
    weights = np.repeat(available.astype(np.float32), length, axis=1)
    return points, weights, data["labels"]


def integer_seed(sequence: np.random.SeedSequence) -> int:
    """A split's integer seed (api_data's generators take one): the first word of the sequence's state."""
    return int(sequence.generate_state(1)[0])


class ZooMSA(GeneratedBuilder):
    """Examples {"points": [3T, 32], "weights": [3T], "targets": [3T, 1]} (float32)."""

    BUILDER_CONFIGS = [make_config(MSAOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return feature_spec(MODALITIES * self.builder_config.options.sequence_length, WIDTH, 0, num_targets=1)

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        options = config.options
        rate = options.train_missing_rate if split == "train" else options.missing_rate
        points, weights, sentiment = msa_examples(options, split_size(config, split),
                                                  integer_seed(split_seed(config, split)), rate)
        targets = np.broadcast_to(sentiment[:, None, None], weights.shape + (1,)).astype(np.float32)
        for index in range(len(sentiment)):
            yield f"{index:08d}", {"points": points[index], "weights": weights[index], "targets": targets[index]}


@register_dataset("zoo_msa")
class MSADataset(FeatureDataset):
    """Synthetic multimodal sentiment with missing modalities, for model "api" (objective "api")."""

    name, options_class, builder_class = "zoo_msa", MSAOptions, ZooMSA

    def max_points(self, options: TaskOptions) -> int:
        return MODALITIES * options.sequence_length
