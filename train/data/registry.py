"""Registered datasets: how the data layer builds, reads and lays out each one, chosen by `data.name`.

A dataset registers a `Dataset` subclass with `@register_dataset("name")` in its own module, listed in
`train.datasets.BUILTIN_MODULES` (or imported before the config is built); the registry itself lives in
`train.datasets` (re-exported here for the dataset modules); `sources` and `pipeline` only look names up, so
adding a dataset never edits them or the trainer. A name registered with a trailing ":" is a family that
takes a suffix: "tfds:" serves every "tfds:<name>".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26zoo.train.data import bytes_codec
from icml26zoo.train.data.documents import ArrayDocuments, Documents, byte_decoder
from icml26zoo.train.datasets import DATASETS, check_dataset_name, dataset_for, register_dataset
from icml26zoo.train.errors import RunError

if TYPE_CHECKING:
    import tensorflow_datasets as tfds

    from icml26zoo.train.config import DataConfig

__all__ = ["DATASETS", "LAYOUTS", "Dataset", "check_dataset_name", "dataset_for", "register_dataset",
           "text_documents"]

LAYOUTS = ("concat", "whole", "single")


class Dataset:
    """How the data layer reads one registered dataset; a subclass overrides what differs from bytes.

    The defaults describe a byte-level text dataset built by the zoo: packed by concatenation, a 256-token
    vocabulary, documents from the "text" feature.
    """

    # Whether tokens are UTF-8 bytes: bits per byte, the unigram baseline and text samples apply.
    byte_level: bool = True
    # Whether the zoo builds it (its own TFDS builder); other datasets must already be prepared.
    buildable: bool = True
    # Whether its batches carry `labels` (one per row, for objectives such as "classification"): True, False,
    # or None when only the prepared data tells (checked when a batch is read). The CLI refuses a labelled
    # objective on a dataset that says False before anything is built (`train.config_checks`).
    labelled: bool | None = None

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        """The TFDS builder of `data` under `directory` (prepared or not)."""
        raise NotImplementedError(f"{type(self).__name__} must define builder()")

    def vocab_size(self, data: DataConfig) -> int:
        """Token vocabulary size (the model's vocab_size must be at least this)."""
        return bytes_codec.VOCAB_SIZE

    def documents(self, builder: tfds.core.DatasetBuilder, split: str, data: DataConfig) -> Documents | ArrayDocuments:
        """The documents of `split` (which exists and is prepared)."""
        return text_documents(builder, split, "text", field="feature")

    def layout(self, data: DataConfig) -> str:
        """How rows are filled, one of LAYOUTS (see train.data.pipeline)."""
        return "concat" if data.pack else "single"

    def check_seq_len(self, data: DataConfig, seq_len: int) -> None:
        """Raises ValueError when rows of `seq_len` cannot hold what the dataset needs."""


def text_documents(builder: tfds.core.DatasetBuilder, split: str, feature: str, *, field: str) -> Documents:
    """The byte documents of `split` read from the string/bytes `feature` (`field` names it in errors)."""
    if feature not in builder.info.features:
        raise RunError(f"{field} {feature!r} is not a feature of {builder.name!r}; it has "
                         f"{sorted(builder.info.features)}")
    source = builder.as_data_source(split=split)
    return Documents(source, byte_decoder(feature), cache_key=(builder.data_dir, split, feature))
