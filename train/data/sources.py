"""Where the data lives, how a dataset is prepared, and how one split is read as documents.

Which dataset `data.name` means, and how it is built and read, is its registered entry's business
(`train.data.registry`); this module only resolves the directory, builds the zoo's own datasets once
and opens splits. Datasets are read with `DatasetBuilder.as_data_source` (random access over
array_record files, numpy results), so TensorFlow is never imported.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import logging
import os
import pathlib
from collections.abc import Iterator

import tensorflow_datasets as tfds

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import mqar, nucleotide, tfds_files
from icml26zoo.train.data.documents import ArrayDocuments, Documents
from icml26zoo.train.data.registry import Dataset, dataset_for
from icml26zoo.train.errors import RunError

log = logging.getLogger(__name__)

DEFAULT_DATA_DIR = "~/.cache/zoo/tensorflow_datasets"


def data_dir(data: DataConfig) -> str:
    """data.data_dir, else $ZOO_DATA_DIR, else ~/.cache/zoo/tensorflow_datasets (user-expanded)."""
    chosen = data.data_dir or os.environ.get("ZOO_DATA_DIR") or DEFAULT_DATA_DIR
    return str(pathlib.Path(chosen).expanduser())


def is_byte_data(data: DataConfig) -> bool:
    """Whether tokens are UTF-8 bytes (the text datasets; nucleotide bases are ASCII bytes)."""
    return dataset_for(data).byte_level


def vocab_size(data: DataConfig) -> int:
    """Token vocabulary size of the dataset (256 for byte data)."""
    return dataset_for(data).vocab_size(data)


def bytes_per_token(data: DataConfig) -> float | None:
    """Text bytes per token (1.0 for byte data), for bits/byte; None when tokens are not text."""
    return 1.0 if is_byte_data(data) else None


def mqar_config(data: DataConfig) -> mqar.MqarConfig:
    """The MQAR builder config described by the data.mqar_* fields."""
    return mqar.make_config(data.mqar_num_keys, data.mqar_num_values, data.mqar_num_pairs,
                            data.mqar_train_examples, data.mqar_eval_examples)


def nucleotide_config(data: DataConfig) -> nucleotide.NucleotideConfig:
    """The nucleotide builder config described by the data.nucleotide_* fields."""
    return nucleotide.make_config(data.nucleotide_length, data.nucleotide_train_examples,
                                  data.nucleotide_eval_examples)


@contextlib.contextmanager
def _file_lock(path: pathlib.Path) -> Iterator[None]:
    """Exclusive advisory lock on `path`, so concurrent processes build a dataset once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_builder(dataset: Dataset, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
    """`dataset.builder(data, directory)`; for a dataset the zoo does not build, its files are checked first.

    Such a dataset ("tfds:<name>") must already be prepared under `directory`, and its feature metadata may
    name only TFDS's own feature classes (train.data.tfds_files); both are user errors (RunError).
    """
    if dataset.buildable:
        return dataset.builder(data, directory)
    tfds_files.check_prepared("data.name", data.name, data.name.partition(":")[2], directory)
    try:
        return dataset.builder(data, directory)
    except ValueError as error:
        # The dataset's own complaints about the user's files (unprepared version, unknown config).
        raise RunError(str(error)) from None


def prepare(data: DataConfig) -> None:
    """Builds the zoo's own dataset for `data` under data_dir(data) unless it is already there.

    Idempotent and safe to call from several processes at once: a file lock serializes the builders,
    and TFDS writes into an `incomplete.*` directory that is renamed into place when complete. For a
    dataset the zoo does not build ("tfds:<name>") it only checks that it is prepared (it never downloads).
    """
    dataset, directory = dataset_for(data), data_dir(data)
    builder = open_builder(dataset, data, directory)
    if not dataset.buildable or builder.is_prepared():
        return
    lock = pathlib.Path(directory) / f".{builder.name}.{builder.builder_config.name}.lock"
    with _file_lock(lock):
        builder = open_builder(dataset, data, directory)  # Re-check under the lock: another process may have built it.
        if not builder.is_prepared():
            tfds.disable_progress_bar()
            # TFDS prints "Downloading and preparing dataset Unknown size ..." to stdout for a dataset that is
            # generated locally (nothing is downloaded); one log line says what happens instead.
            log.info("building dataset %s in %s (once; later runs reuse it)", builder.name, directory)
            with contextlib.redirect_stdout(io.StringIO()):
                builder.download_and_prepare()


def open_split(data: DataConfig, split: str) -> Documents | ArrayDocuments:
    """The documents of `split` (which must exist; the zoo's own datasets are prepared first)."""
    prepare(data)
    dataset = dataset_for(data)
    builder = open_builder(dataset, data, data_dir(data))
    if split not in builder.info.splits:
        raise RunError(f"split {split!r} is not in dataset {data.name!r}; "
                         f"it has {sorted(builder.info.splits)}")
    return dataset.documents(builder, split, data)
