"""One split as a random-access list of documents: token arrays with per-token loss weights (and labels).

A *document* is one example as tokens plus per-token loss weights: `tokens` int32 [n] and `weights`
float32 [n], where weights[i] is the weight of predicting tokens[i] from tokens[:i] (weights[0] is never
used: nothing predicts the first token). Labelled datasets also give each document one int32 label
(`labels` [N]); unlabelled ones have `labels = None`.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence

import numpy as np

from icml26zoo.train.data import bytes_codec

_DOC_CACHE_SIZE = 32
_LENGTHS_CACHE: dict[tuple, np.ndarray] = {}
_ARRAY_CACHE: dict[tuple, dict[str, np.ndarray]] = {}
_CACHE_LOCK = threading.Lock()

Decoder = Callable[[dict], tuple[np.ndarray, np.ndarray]]


class ArrayDocuments:
    """Fixed-length documents held in memory: tokens int32 [N, L], one shared weights row float32 [L],
    and optionally one label per document, labels int32 [N]."""

    def __init__(self, tokens: np.ndarray, weights: np.ndarray, labels: np.ndarray | None = None) -> None:
        self.tokens, self.weights, self.labels = tokens, weights, labels

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

    labels = None

    def __init__(self, source: Sequence[dict], decode: Decoder, *, cache_key: tuple) -> None:
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


def byte_decoder(feature: str) -> Decoder:
    """Decodes an example's string/bytes `feature` to (byte tokens [n], weights of 1 [n])."""

    def decode(example: dict) -> tuple[np.ndarray, np.ndarray]:
        value = example[feature]
        if isinstance(value, np.ndarray):  # Some TFDS versions return 0-d object arrays.
            value = value.item()
        tokens = bytes_codec.encode(value)
        return tokens, np.ones(tokens.shape, np.float32)

    return decode


def read_arrays(source: Sequence[dict], key: tuple, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Every example's `fields` as stacked int32 arrays [N, ...] (read once, cached per process by `key`).

    For small fixed-length datasets (MQAR: examples x 4P int32, 2.5 MB by default) whose rows need many
    examples each, one batched read up front beats ~250 us per random read.
    """
    with _CACHE_LOCK:
        arrays = _ARRAY_CACHE.get(key)
    if arrays is None:
        chunks = [source.__getitems__(list(range(start, min(start + 4096, len(source)))))
                  for start in range(0, len(source), 4096)]
        examples = [example for chunk in chunks for example in chunk]
        arrays = {name: np.stack([np.asarray(e[name], np.int32) for e in examples]) for name in fields}
        with _CACHE_LOCK:
            _ARRAY_CACHE[key] = arrays
    return arrays
