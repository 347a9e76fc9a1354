"""Where the data lives and how one split is read as a random-access list of token documents.

A *document* is one example as tokens plus per-token loss weights: `tokens` int32 [n] and `weights`
float32 [n], where weights[i] is the weight of predicting tokens[i] from tokens[:i] (weights[0] is never
used: nothing predicts the first token). Byte datasets (the nucleotide one included: one ASCII byte per base)
weigh every byte 1; MQAR weighs only answers.

Datasets are read with `DatasetBuilder.as_data_source` (random access over array_record files, numpy
results), so TensorFlow is never imported.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import pathlib
import threading

import numpy as np
import tensorflow_datasets as tfds

from train.config import DataConfig
from train.data import bytes_codec, mqar, nucleotide, pystdlib

DEFAULT_DATA_DIR = "~/.cache/zoo/tensorflow_datasets"
_DOC_CACHE_SIZE = 32
_LENGTHS_CACHE: dict[tuple, np.ndarray] = {}
_MQAR_CACHE: dict[tuple, np.ndarray] = {}
_CACHE_LOCK = threading.Lock()


def data_dir(data: DataConfig) -> str:
    """data.data_dir, else $ZOO_DATA_DIR, else ~/.cache/zoo/tensorflow_datasets (user-expanded)."""
    chosen = data.data_dir or os.environ.get("ZOO_DATA_DIR") or DEFAULT_DATA_DIR
    return str(pathlib.Path(chosen).expanduser())


def is_byte_data(data: DataConfig) -> bool:
    """Whether tokens are UTF-8 bytes (everything except MQAR; nucleotide bases are ASCII bytes)."""
    return data.name != "mqar"


def vocab_size(data: DataConfig) -> int:
    """Token vocabulary size: 256 for byte data, 1 + keys + values for MQAR."""
    if is_byte_data(data):
        return bytes_codec.VOCAB_SIZE
    return mqar.vocab_size(data.mqar_num_keys, data.mqar_num_values)


def bytes_per_token(data: DataConfig) -> float | None:
    """Text bytes per token (1.0 for byte data), for bits/byte; None for MQAR, whose tokens are not text."""
    return 1.0 if is_byte_data(data) else None


def mqar_config(data: DataConfig) -> mqar.MqarConfig:
    """The MQAR builder config described by the data.mqar_* fields."""
    return mqar.make_config(data.mqar_num_keys, data.mqar_num_values, data.mqar_num_pairs,
                            data.mqar_train_examples, data.mqar_eval_examples)


def nucleotide_config(data: DataConfig) -> nucleotide.NucleotideConfig:
    """The nucleotide builder config described by the data.nucleotide_* fields."""
    return nucleotide.make_config(data.nucleotide_length, data.nucleotide_train_examples,
                                  data.nucleotide_eval_examples)


def _builtin_builder(data: DataConfig) -> tfds.core.DatasetBuilder:
    if data.name == "pystdlib":
        return pystdlib.make_builder(data_dir(data))
    if data.name == "nucleotide":
        return nucleotide.make_builder(data_dir(data), nucleotide_config(data))
    return mqar.make_builder(data_dir(data), mqar_config(data))


def _tfds_builder(data: DataConfig) -> tfds.core.DatasetBuilder:
    name = data.name.removeprefix("tfds:")
    try:
        builder = tfds.builder(name, data_dir=data_dir(data))
    except tfds.core.registered.DatasetNotFoundError as error:
        raise ValueError(f"data.name {data.name!r}: no TFDS dataset {name!r} is registered or prepared "
                         f"under data_dir {data_dir(data)!r} ({error})") from None
    if not builder.is_prepared():
        raise ValueError(f"data.name {data.name!r}: dataset {name!r} is not prepared under "
                         f"data_dir {data_dir(data)!r}; prepare it first (e.g. `tfds build`): "
                         "this loader never downloads")
    return builder


@contextlib.contextmanager
def _file_lock(path: pathlib.Path):
    """Exclusive advisory lock on `path`, so concurrent processes build a dataset once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare(data: DataConfig) -> None:
    """Builds the zoo's own dataset for `data` under data_dir(data) unless it is already there.

    Idempotent and safe to call from several processes at once: a file lock serializes the builders,
    and TFDS writes into an `incomplete.*` directory that is renamed into place when complete. For
    "tfds:<name>" it only checks that the dataset is prepared (it never downloads).
    """
    if data.name.startswith("tfds:"):
        _tfds_builder(data)
        return
    builder = _builtin_builder(data)
    if builder.is_prepared():
        return
    lock = pathlib.Path(data_dir(data)) / f".{builder.name}.{builder.builder_config.name}.lock"
    with _file_lock(lock):
        builder = _builtin_builder(data)  # Re-check under the lock: another process may have built it.
        if not builder.is_prepared():
            tfds.disable_progress_bar()
            builder.download_and_prepare()


def open_split(data: DataConfig, split: str) -> Documents | ArrayDocuments:
    """The documents of `split` (which must exist; the zoo's own datasets are prepared first)."""
    prepare(data)
    builder = _tfds_builder(data) if data.name.startswith("tfds:") else _builtin_builder(data)
    if split not in builder.info.splits:
        raise ValueError(f"split {split!r} is not in dataset {data.name!r}; "
                         f"it has {sorted(builder.info.splits)}")
    source = builder.as_data_source(split=split)
    if data.name == "mqar":
        return _mqar_documents(source, (builder.data_dir, split), data.mqar_num_pairs)
    feature = data.text_feature if data.name.startswith("tfds:") else "text"
    if feature not in builder.info.features:
        raise ValueError(f"data.text_feature {feature!r} is not a feature of {data.name!r}; it has "
                         f"{sorted(builder.info.features)}")
    return Documents(source, _byte_decoder(feature), cache_key=(builder.data_dir, split, feature))


def _byte_decoder(feature: str):
    def decode(example: dict) -> tuple[np.ndarray, np.ndarray]:
        value = example[feature]
        if isinstance(value, np.ndarray):  # Some TFDS versions return 0-d object arrays.
            value = value.item()
        tokens = bytes_codec.encode(value)
        return tokens, np.ones(tokens.shape, np.float32)

    return decode


def _mqar_documents(source, key: tuple, num_pairs: int) -> ArrayDocuments:
    """The whole MQAR split in memory (cached per process).

    A split is small (examples x 4P int32: 2.5 MB by default) and rows need many examples each, so one
    batched read up front beats ~250 us per random read.
    """
    with _CACHE_LOCK:
        tokens = _MQAR_CACHE.get(key)
    if tokens is None:
        chunks = [source.__getitems__(list(range(start, min(start + 4096, len(source)))))
                  for start in range(0, len(source), 4096)]
        tokens = np.stack([np.asarray(example["tokens"], np.int32) for chunk in chunks for example in chunk])
        with _CACHE_LOCK:
            _MQAR_CACHE[key] = tokens
    return ArrayDocuments(tokens, mqar.answer_mask(num_pairs).astype(np.float32))


class ArrayDocuments:
    """Fixed-length documents held in memory: tokens int32 [N, L], one shared weights row float32 [L]."""

    def __init__(self, tokens: np.ndarray, weights: np.ndarray):
        self.tokens, self.weights = tokens, weights

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def get(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Document `index`: (tokens int32 [L], weights float32 [L])."""
        return self.tokens[index], self.weights

    def lengths(self) -> np.ndarray:
        """[N] int64 token counts (all L)."""
        return np.full(len(self), self.tokens.shape[1], np.int64)


class Documents:
    """Random access to one split's documents, with a small LRU cache.

    Consecutive packed rows mostly read the same (long) document, so caching the last few decoded
    documents avoids re-reading a 100 kB file for each of its rows. Thread-safe (grain reads rows from
    several threads).
    """

    def __init__(self, source, decode, *, cache_key: tuple):
        self._source = source
        self._decode = decode
        self._cache_key = cache_key
        self._cache: collections.OrderedDict[int, tuple[np.ndarray, np.ndarray]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._source)

    def get(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Document `index`: (tokens int32 [n], weights float32 [n])."""
        with self._lock:
            if index in self._cache:
                self._cache.move_to_end(index)
                return self._cache[index]
        document = self._decode(self._source[int(index)])
        with self._lock:
            self._cache[index] = document
            while len(self._cache) > _DOC_CACHE_SIZE:
                self._cache.popitem(last=False)
        return document

    def lengths(self) -> np.ndarray:
        """[num_documents] int64 token counts (one pass over the split, cached per process)."""
        with _CACHE_LOCK:
            cached = _LENGTHS_CACHE.get(self._cache_key)
        if cached is None:
            cached = np.array([len(self._decode(self._source[i])[0]) for i in range(len(self))], np.int64)
            with _CACHE_LOCK:
                _LENGTHS_CACHE[self._cache_key] = cached
        return cached
