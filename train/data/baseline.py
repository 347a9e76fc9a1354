"""A reference point for byte-level losses: the cross-entropy of a byte unigram model.

The model is fitted on the *train* split's bytes with add-one (Laplace) smoothing over all 256 byte
values, p(b) = (count_train(b) + 1) / (N_train + 256), so bytes unseen in training keep a finite cost.
The baseline of a split is its bytes' mean cross-entropy in bits:

    H = -(1 / N_split) * sum_b count_split(b) * log2 p(b)

A language model that has learned anything beats it (about 4.6-5 bits/byte on Python source). It counts
every byte of every document, including each document's first byte, which the LM never predicts; the
difference is ~1 byte per document.
"""

from __future__ import annotations

import functools

import numpy as np

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import bytes_codec, sources


@functools.lru_cache(maxsize=16)
def _byte_counts(data: DataConfig, resolved_dir: str, split: str) -> np.ndarray:
    """[256] int64 byte counts of `split` (cached per process; `resolved_dir` is part of the key)."""
    del resolved_dir  # Only part of the cache key: $ZOO_DATA_DIR may change between calls.
    documents = sources.open_split(data, split)
    counts = np.zeros(bytes_codec.VOCAB_SIZE, np.int64)
    for index in range(len(documents)):
        tokens, _ = documents.get(index)
        counts += np.bincount(tokens, minlength=bytes_codec.VOCAB_SIZE)
    return counts


def unigram_bits_per_byte(data: DataConfig, split: str) -> float:
    """Bits/byte of `split` under the add-one-smoothed byte unigram model of data.train_split."""
    if not sources.is_byte_data(data):
        raise ValueError(f"unigram_bits_per_byte needs byte data, got data.name {data.name!r}")
    resolved = sources.data_dir(data)
    train = _byte_counts(data, resolved, data.train_split)
    evaluated = _byte_counts(data, resolved, split)
    if evaluated.sum() == 0:
        raise ValueError(f"split {split!r} of {data.name!r} has no bytes")
    log_probs = np.log2(train + 1.0) - np.log2(train.sum() + bytes_codec.VOCAB_SIZE)
    return float(-(evaluated * log_probs).sum() / evaluated.sum())
