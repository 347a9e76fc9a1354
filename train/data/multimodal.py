"""`zoo_multimodal`: the synthetic multimodal classification task of ConfSMoE as an offline TFDS dataset.

The examples are those of `zoo.moe.multimodal_data.make_multimodal_data` (class-conditional Gaussian
mixtures per modality; read that module for the generative model): the builder only stores them, so a
dataset read back here equals the generator's arrays exactly. One example:

    {"modality_0": float32 [S, F_0], ..., "modality_{M-1}": float32 [S, F_{M-1}],
     "present": bool [M] (False = the modality is missing; its input is all zeros), "label": int32}

Splits: "train" is the generator's training split and "validation" its test split.

Seeds: unlike the other generated datasets (one SeedSequence([seed, split index]) per split), both splits
come from `np.random.SeedSequence(seed).spawn(3)`: the first child draws the class prototypes, which
both splits must share (otherwise the test split would be a different task), the second the training
split and the third the test split; labels, mixture components, noise and missingness are drawn in that
order inside each split's stream.

Missingness (`setting`): "I" each modality missing independently with its own rate
(`modality_missing_rates`) in both splits (a sample left with no modality keeps one at random); "II"
⌊N·M·missing_ratio⌋ (sample, modality) entries dropped in both splits, never a sample's one reserved
modality; "III" training as "II", and every validation sample lacks modality `dropped_modality`.

The builder is registered with TFDS by its name, "zoo_multimodal"; the config name spells out every
parameter (`config_name`), so datasets with different settings never collide on disk. The shared
trainer's datasets (`train.data.registry`) are token rows; these continuous inputs with per-sample
masks are not, so the ConfSMoE loop (`zoo.moe.multimodal_train`) reads them with `load_multimodal`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.moe.multimodal_data import MultimodalData, MultimodalSplit, MultimodalTaskConfig, make_multimodal_data
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, GeneratedConfig

SPLIT_OF = {"train": "train", "validation": "test"}


def _spell(value: object) -> str:
    if isinstance(value, tuple):
        return "-".join(_spell(v) for v in value)
    return f"{value:g}".replace(".", "p").replace("-", "m") if isinstance(value, float) else str(value)


def config_name(task: MultimodalTaskConfig) -> str:
    """A name that spells out every field of `task`, e.g. "c4_f6-10_t8_k2_s1-1_n1_tr2048_te512_II_..."."""
    parts = [f"c{task.num_classes}", f"f{_spell(task.feature_dims)}", f"t{task.tokens}", f"k{task.components}",
             f"s{_spell(task.signal)}", f"n{_spell(task.noise)}", f"tr{task.train_size}", f"te{task.test_size}",
             task.setting, f"m{_spell(task.missing_ratio)}", f"r{_spell(task.modality_missing_rates)}",
             f"d{task.dropped_modality}", f"seed{task.seed}"]
    return "_".join(parts)


@dataclasses.dataclass(kw_only=True)
class MultimodalConfig(GeneratedConfig):
    """The task behind a builder config; `name` must be `make_config(task)`'s name for it."""

    task: MultimodalTaskConfig


def make_config(task: MultimodalTaskConfig) -> MultimodalConfig:
    """The builder config of `task` (ValueError from MultimodalTaskConfig for a bad task)."""
    if not isinstance(task, MultimodalTaskConfig):
        raise ValueError(f"task must be a MultimodalTaskConfig, got {type(task).__name__}")
    return MultimodalConfig(name=config_name(task), task=task, train_examples=task.train_size,
                            eval_examples=task.test_size, seed=task.seed,
                            description="Synthetic multimodal classification with missing modalities.")


class ZooMultimodal(GeneratedBuilder):
    """Examples {"modality_m": float32 [S, F_m], "present": bool [M], "label": int32}; "train", "validation"."""

    BUILDER_CONFIGS = [make_config(MultimodalTaskConfig())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        task = self.builder_config.task
        features = {f"modality_{m}": tfds.features.Tensor(shape=(task.tokens, dim), dtype=np.float32)
                    for m, dim in enumerate(task.feature_dims)}
        features["present"] = tfds.features.Tensor(shape=(task.num_modalities,), dtype=np.bool_)
        features["label"] = tfds.features.Tensor(shape=(), dtype=np.int32)
        return features

    def _generate_examples(self, split: str) -> Examples:
        data = make_multimodal_data(self.builder_config.task)
        part: MultimodalSplit = getattr(data, SPLIT_OF[split])
        for index in range(len(part)):
            example = {f"modality_{m}": x[index] for m, x in enumerate(part.inputs)}
            example.update(present=part.present[index], label=part.labels[index])
            yield f"{index:08d}", example


def build_multimodal(task: MultimodalTaskConfig, data_dir: str | os.PathLike) -> ZooMultimodal:
    """The prepared builder of `task` under `data_dir` (built offline on first use)."""
    if not isinstance(data_dir, str | os.PathLike) or not os.fspath(data_dir):
        raise ValueError(f"data_dir must be a non-empty path, got {data_dir!r}")
    pathlib.Path(data_dir).mkdir(parents=True, exist_ok=True)
    builder = ZooMultimodal.for_config(os.fspath(data_dir), make_config(task))
    if not builder.is_prepared():
        tfds.disable_progress_bar()
        builder.download_and_prepare()
    return builder


def _read_split(builder: ZooMultimodal, split: str, task: MultimodalTaskConfig) -> MultimodalSplit:
    source = builder.as_data_source(split=split)
    examples = source.__getitems__(list(range(len(source))))
    inputs = tuple(np.stack([np.asarray(e[f"modality_{m}"], np.float32) for e in examples])
                   for m in range(task.num_modalities))
    present = np.stack([np.asarray(e["present"], np.bool_) for e in examples])
    labels = np.asarray([e["label"] for e in examples], np.int32)
    return MultimodalSplit(inputs, present, labels)


def load_multimodal(task: MultimodalTaskConfig, data_dir: str | os.PathLike) -> MultimodalData:
    """The task's splits read back from its TFDS dataset under `data_dir` (built first if needed)."""
    builder = build_multimodal(task, data_dir)
    return MultimodalData(train=_read_split(builder, "train", task), test=_read_split(builder, "validation", task),
                          config=task)
