"""The zoo's built-in datasets as registered entries: the stdlib byte corpus, MQAR, nucleotides and
any prepared TFDS dataset ("tfds:<name>"). The classification dataset registers itself in `topics`."""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import mqar, nucleotide, pystdlib
from icml26zoo.train.data.documents import ArrayDocuments, Documents, read_arrays
from icml26zoo.train.data.registry import Dataset, register_dataset, text_documents
from icml26zoo.train.data.sources import mqar_config, nucleotide_config


@register_dataset("pystdlib")
class PystdlibDataset(Dataset):
    """The running interpreter's standard library sources, one document per file."""

    labelled = False

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        return pystdlib.make_builder(directory)


@register_dataset("nucleotide")
class NucleotideDataset(Dataset):
    """Synthetic DNA, one ASCII byte per base, one document per sequence."""

    labelled = False

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        return nucleotide.ZooNucleotide.for_config(directory, nucleotide_config(data))


@register_dataset("mqar")
class MqarDataset(Dataset):
    """Multi-query associative recall: fixed-length examples, loss on the answers only, whole examples
    per row (an answer without its key-value pairs is unlearnable)."""

    byte_level = False
    labelled = False

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        return mqar.ZooMqar.for_config(directory, mqar_config(data))

    def vocab_size(self, data: DataConfig) -> int:
        return mqar.vocab_size(data.mqar_num_keys, data.mqar_num_values)

    def documents(self, builder: tfds.core.DatasetBuilder, split: str, data: DataConfig) -> ArrayDocuments:
        source = builder.as_data_source(split=split)
        tokens = read_arrays(source, (builder.data_dir, split), ("tokens",))["tokens"]
        return ArrayDocuments(tokens, mqar.answer_mask(data.mqar_num_pairs).astype(np.float32))

    def layout(self, data: DataConfig) -> str:
        return "whole" if data.pack else "single"

    def check_seq_len(self, data: DataConfig, seq_len: int) -> None:
        needed = 4 * data.mqar_num_pairs - 1
        if seq_len < needed:
            raise ValueError(f"seq_len must be >= 4 * data.mqar_num_pairs - 1 = {needed} "
                             f"so that an MQAR example fits in a row, got {seq_len}")


def prepared_tfds_builder(data: DataConfig, directory: str, family: str) -> tfds.core.DatasetBuilder:
    """The builder of the TFDS dataset named after `family` in data.name ("tfds:lm1b" -> "lm1b"), which the
    user must have prepared under `directory`: ValueError naming data.name otherwise (nothing is downloaded)."""
    name = data.name.removeprefix(family)
    try:
        builder = tfds.builder(name, data_dir=directory)
    except tfds.core.registered.DatasetNotFoundError as error:
        raise ValueError(f"data.name {data.name!r}: no TFDS dataset {name!r} is registered or prepared "
                         f"under data_dir {directory!r} ({error})") from None
    if not builder.is_prepared():
        raise ValueError(f"data.name {data.name!r}: dataset {name!r} is not prepared under "
                         f"data_dir {directory!r}; prepare it first (e.g. `tfds build`): "
                         "this loader never downloads")
    return builder

@register_dataset("tfds:")
class TfdsDataset(Dataset):
    """Any TFDS dataset the user has prepared under data_dir, read as bytes from data.text_feature."""

    buildable = False
    labelled = False  # text read as bytes from data.text_feature, no label

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        return prepared_tfds_builder(data, directory, "tfds:")

    def documents(self, builder: tfds.core.DatasetBuilder, split: str, data: DataConfig) -> Documents:
        return text_documents(builder, split, data.text_feature, field="data.text_feature")
