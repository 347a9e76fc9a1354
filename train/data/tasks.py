"""What the zoo's controlled synthetic tasks share: typed options, one TFDS builder shape, one dataset entry.

A task (Dyck-k, palindromes, BFVP, function composition, k-sparse Boolean chains) declares a frozen options
dataclass (a subclass of `TaskOptions`) and reads it from `DataConfig.task_options`, a tuple of (name, value)
pairs: an unknown name raises ValueError listing the valid ones, an ill-typed or out-of-range value raises
ValueError naming `data.task_options` and the option. Every task's examples have one fixed length per
options and split, so a split is an int32 array [N, L] of tokens plus one int32 label per example (the class for
the formal languages, the answer for the language-model tasks). A task may give the validation split other
options than training (`Task.split_options`: the formal languages' `eval_length`, for length generalization).

Generation is a pure function of the options: split "train" uses SeedSequence([seed, 0]) and "validation"
SeedSequence([seed, 1]) (`generated.split_seed`). The builder config name spells out every option, so
datasets with different settings never collide on disk.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.layers.options import option_values
from icml26zoo.train.config import DataConfig
from icml26zoo.train.data.documents import ArrayDocuments, read_arrays
from icml26zoo.train.data.generated import (
    SPLITS,
    Examples,
    GeneratedBuilder,
    GeneratedConfig,
    split_seed,
    split_size,
)
from icml26zoo.train.data.registry import Dataset
from icml26zoo.validation import check_int

FIELD = "data.task_options"


def check_option(name: str, value: Any, minimum: int, maximum: int | None = None) -> None:
    """`validation.check_int` for `data.task_options` option `name`: an integer in [minimum, maximum]."""
    check_int(f"{FIELD} option {name!r}", value, minimum=minimum, maximum=maximum)


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """Options every task has: examples per split and the seed of the generator."""

    train_examples: int = 4096
    eval_examples: int = 512
    seed: int = 0

    def __post_init__(self) -> None:
        check_option("train_examples", self.train_examples, 1)
        check_option("eval_examples", self.eval_examples, 1)
        check_option("seed", self.seed, 0)


def parse_options(cls: type[TaskOptions], dataset: str, pairs: tuple[tuple[str, Any], ...]) -> TaskOptions:
    """The options `cls` of dataset `dataset` from (name, value) pairs; ValueError naming data.task_options."""
    try:
        return cls(**option_values(cls, pairs, owner=f"{dataset} dataset"))
    except ValueError as error:
        message = str(error)
        raise ValueError(message if message.startswith(FIELD) else f"{FIELD}: {message}") from None


def _spell(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if value is None:
        return "auto"
    return f"{value:g}".replace(".", "p").replace("-", "m") if isinstance(value, float) else str(value)


def config_name(options: TaskOptions) -> str:
    """A builder config name holding every option, e.g. "num_types2_length32_padding0_..."."""
    return "_".join(f"{field.name}{_spell(getattr(options, field.name))}" for field in dataclasses.fields(options))


@dataclasses.dataclass(kw_only=True)
class TaskConfig(GeneratedConfig):
    """A builder config: the task's options (split sizes and seed copied from them)."""

    options: TaskOptions


def make_config(options: TaskOptions) -> TaskConfig:
    """The builder config of `options`, named by `config_name`."""
    return TaskConfig(name=config_name(options), options=options, train_examples=options.train_examples,
                      eval_examples=options.eval_examples, seed=options.seed,
                      description=type(options).__doc__.splitlines()[0])


class Task:
    """One task's definition; subclasses give the options class and these four functions of the options."""

    options_class: ClassVar[type[TaskOptions]]

    @staticmethod
    def split_options(options: Any, split: str) -> Any:
        """The options that generate `split` (the same for every split unless a task overrides this)."""
        return options

    @staticmethod
    def length(options: Any) -> int:
        """Tokens per example L."""
        raise NotImplementedError

    @staticmethod
    def vocab_size(options: Any) -> int:
        """Token vocabulary size."""
        raise NotImplementedError

    @staticmethod
    def generate(options: Any, num_examples: int, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
        """(tokens int32 [N, L], labels int32 [N]) drawn deterministically from `seed`."""
        raise NotImplementedError

    @staticmethod
    def loss_weights(options: Any) -> np.ndarray:
        """[L] float32: the weight of each target token (next-token tasks); all ones for classification."""
        raise NotImplementedError


class TaskBuilder(GeneratedBuilder, skip_registration=True):
    """Examples {"tokens": int32 [L], "label": int32}; a subclass sets `task` and BUILDER_CONFIGS."""

    task: ClassVar[type[Task]]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        # Splits may differ in length (length generalization); each split's rows share one length.
        return {"tokens": tfds.features.Tensor(shape=(None,), dtype=np.int32),
                "label": tfds.features.Tensor(shape=(), dtype=np.int32)}

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        options = self.task.split_options(config.options, split)
        tokens, labels = self.task.generate(options, split_size(config, split), split_seed(config, split))
        for index, (row, label) in enumerate(zip(tokens, labels, strict=True)):
            yield f"{index:08d}", {"tokens": row, "label": label}


class TaskDataset(Dataset):
    """The registered entry of a task: options from data.task_options, rows from its builder.

    `labelled` tasks are classification rows (one example per row, batch["labels"]); the others are
    next-token rows whose loss weights are the task's `loss_weights` (whole examples per row when packed).
    """

    byte_level = False
    builder_class: ClassVar[type[TaskBuilder]]
    labelled: ClassVar[bool] = False
    name: ClassVar[str]

    def options(self, data: DataConfig) -> TaskOptions:
        """The validated task options of `data` (ValueError naming data.task_options)."""
        return parse_options(self.builder_class.task.options_class, self.name, data.task_options)

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        return self.builder_class.for_config(directory, make_config(self.options(data)))

    def vocab_size(self, data: DataConfig) -> int:
        return self.builder_class.task.vocab_size(self.options(data))

    def documents(self, builder: tfds.core.DatasetBuilder, split: str, data: DataConfig) -> ArrayDocuments:
        arrays = read_arrays(builder.as_data_source(split=split), (builder.data_dir, split), ("tokens", "label"))
        task = self.builder_class.task
        weights = task.loss_weights(task.split_options(self.options(data), split)).astype(np.float32)
        return ArrayDocuments(arrays["tokens"], weights, labels=arrays["label"] if self.labelled else None)

    def layout(self, data: DataConfig) -> str:
        return "whole" if data.pack and not self.labelled else "single"

    def check_seq_len(self, data: DataConfig, seq_len: int) -> None:
        task, options = self.builder_class.task, self.options(data)
        needed = max(task.length(task.split_options(options, split)) for split in SPLITS) - 1
        if seq_len < needed:
            raise ValueError(f"seq_len must be >= {needed} (a {self.name} example of {needed + 1} tokens, "
                             f"from data.task_options) so that a whole example fits in a row, got {seq_len}")
