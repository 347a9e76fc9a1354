"""`zoo_topics`: synthetic sequence classification (which topic generated this row?) as a TFDS dataset.

C classes share K content tokens split into C equal groups: group c holds class c's topic tokens. Each of
the L tokens of an example of class c is, with probability `signal`, a uniform draw from group c, and
otherwise a uniform draw from all K content tokens; the label c is uniform over the classes. Class c's
group is then over-represented in the row (frequency signal + (1 - signal) / C against (1 - signal) / C
for each other group), so counting tokens per group classifies the row: a mean-pooled linear
classifier can learn it, and chance accuracy is 1 / C. With the defaults (C = 4, K = 32, L = 65,
signal = 0.2) the class's group holds ~13 more tokens than the others on average, and picking the
group with the most tokens is right ~96% of the time (~72% with signal = 0.1).

Vocabulary layout (size C + K):
    0 ... C - 1            reserved, never in an input: a model's output columns 0 .. C - 1 read the label
    C ... C + K - 1        content tokens; group c is C + c·K/C ... C + (c + 1)·K/C - 1

Generation is a pure function of (C, K, L, signal, examples per split, seed): a numpy Generator seeded
by SeedSequence([seed, split index]). The builder config name spells out every parameter, e.g.
"c4_k32_l65_s0p2_n4096_256_s0", so datasets with different settings never collide on disk.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data.documents import ArrayDocuments, read_arrays
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, GeneratedConfig, split_seed, split_size
from icml26zoo.train.data.registry import Dataset, register_dataset


def vocab_size(num_classes: int, num_tokens: int) -> int:
    """Reserved label tokens plus content tokens."""
    return num_classes + num_tokens


def generate(num_classes: int, num_tokens: int, length: int, signal: float, num_examples: int,
             seed: int | np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic examples: (tokens int32 [num_examples, length], labels int32 [num_examples])."""
    if num_tokens % num_classes:
        raise ValueError(f"num_tokens must be a multiple of num_classes ({num_classes}), got {num_tokens}")
    rng = np.random.default_rng(seed)
    group = num_tokens // num_classes
    labels = rng.integers(0, num_classes, size=num_examples)
    noise = rng.integers(0, num_tokens, size=(num_examples, length))
    topic = labels[:, None] * group + rng.integers(0, group, size=(num_examples, length))
    from_topic = rng.random((num_examples, length)) < signal
    tokens = num_classes + np.where(from_topic, topic, noise)
    return tokens.astype(np.int32), labels.astype(np.int32)


@dataclasses.dataclass(kw_only=True)
class TopicsConfig(GeneratedConfig):
    """Task parameters; `name` must be `make_config(...)`'s name for them."""

    num_classes: int
    num_tokens: int
    length: int
    signal: float


def make_config(num_classes: int = 4, num_tokens: int = 32, length: int = 65, signal: float = 0.2,
                train_examples: int = 4096, eval_examples: int = 256, seed: int = 0) -> TopicsConfig:
    """A config whose name encodes all its parameters."""
    signal_name = f"{signal:g}".replace(".", "p").replace("-", "m")
    name = f"c{num_classes}_k{num_tokens}_l{length}_s{signal_name}_n{train_examples}_{eval_examples}_s{seed}"
    return TopicsConfig(name=name, num_classes=num_classes, num_tokens=num_tokens, length=length, signal=signal,
                        train_examples=train_examples, eval_examples=eval_examples, seed=seed,
                        description="Synthetic topic classification.")


class ZooTopics(GeneratedBuilder):
    """Examples {"tokens": int32 [L], "label": int32}; splits "train" and "validation" with independent seeds."""

    BUILDER_CONFIGS = [make_config()]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return {"tokens": tfds.features.Tensor(shape=(self.builder_config.length,), dtype=np.int32),
                "label": tfds.features.Tensor(shape=(), dtype=np.int32)}

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        tokens, labels = generate(config.num_classes, config.num_tokens, config.length, config.signal,
                                  split_size(config, split), split_seed(config, split))
        for index, (row, label) in enumerate(zip(tokens, labels, strict=True)):
            yield f"{index:08d}", {"tokens": row, "label": label}


def topics_config(data: DataConfig) -> TopicsConfig:
    """The builder config described by the data.topics_* fields."""
    return make_config(data.topics_num_classes, data.topics_num_tokens, data.topics_length, data.topics_signal,
                       data.topics_train_examples, data.topics_eval_examples)


@register_dataset("topics")
class TopicsDataset(Dataset):
    """Labelled rows for `objective="classification"`: one example per row, batch["labels"] [B]."""

    byte_level = False

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        return ZooTopics.for_config(directory, topics_config(data))

    def vocab_size(self, data: DataConfig) -> int:
        return vocab_size(data.topics_num_classes, data.topics_num_tokens)

    def documents(self, builder: tfds.core.DatasetBuilder, split: str, data: DataConfig) -> ArrayDocuments:
        arrays = read_arrays(builder.as_data_source(split=split), (builder.data_dir, split), ("tokens", "label"))
        weights = np.ones(data.topics_length, np.float32)
        return ArrayDocuments(arrays["tokens"], weights, labels=arrays["label"])

    def layout(self, data: DataConfig) -> str:
        return "single"

    def check_seq_len(self, data: DataConfig, seq_len: int) -> None:
        if seq_len < data.topics_length - 1:
            raise ValueError(f"seq_len must be >= data.topics_length - 1 = {data.topics_length - 1} so that a "
                             f"whole example fits in a row, got {seq_len}")
