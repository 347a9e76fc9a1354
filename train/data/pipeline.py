"""Grain loaders: deterministic, resumable, per-process sharded batches of packed token rows.

Batch format (b = batch_size // process_count rows per process, T = seq_len):
    inputs       int32   [b, T]  tokens
    targets      int32   [b, T]  the next token of the same document (0 where weights == 0)
    segment_ids  int32   [b, T]  1, 2, 3, ... per document piece within the row; 0 = padding
    positions    int32   [b, T]  position within its segment, 0 at each segment start
    weights      float32 [b, T]  loss weight of each target: 1 for real targets (MQAR: answers only),
                                 0 on padding
    labels       int32   [b]     labelled datasets only (e.g. "topics"): the label of the row's example,
                                 0 for padding rows (whose weights are all 0)

Targets are shifted *per document* before packing: a document of n tokens yields n - 1 (input, target)
pairs, so no target ever belongs to a different document, and every non-padding position has a real
target (the first token of a document is the only one never predicted; there is no BOS token).

Row layout (`Layout`, chosen by the dataset's registered entry), per epoch, over the documents in that
epoch's order (a permutation drawn from [seed, epoch]; the identity for eval):
  * "concat" (byte data, pack=True): the epoch's (input, target) pairs are concatenated and cut into
    rows of T. A document crossing a row boundary continues in the next row as a new segment (with
    positions restarting at 0: the model loses that piece's earlier context, the targets stay correct).
    Only the epoch's last row has padding.
  * "whole" (MQAR, pack=True): floor(T / L) whole examples of L = 4P - 1 pairs per row, never split,
    since an answer without its key-value pairs is unlearnable.
  * "single" (pack=False, and labelled datasets): one document per row, truncated to T pairs (T + 1
    tokens), padded.
Documents with fewer than 2 tokens have no pairs and are skipped.

Global row g is row g mod R of epoch g div R (R = rows per epoch, the same every epoch). Global batch i
is rows [i*B, (i+1)*B), and process p takes rows [i*B + p*b, i*B + (p+1)*b): processes see disjoint rows,
and together exactly the rows a single process with batch B would see, whatever the process count.

Datasets of the "features" layout (point sets, not tokens) are batched by `train.data.features` instead;
the three entry points below hand them over.

Since every row is a pure function of its index, the pipeline is a grain MapDataset over batch indices
and the iterator state is grain's {"next_index": int}, JSON-serializable and exact to restore.
"""

from __future__ import annotations

import math
import sys
import threading

import grain
import numpy as np

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import features, sources
from icml26zoo.train.data.documents import ArrayDocuments, Documents
from icml26zoo.train.data.registry import LAYOUTS, dataset_for
from icml26zoo.validation import check_int

FIELDS = ("inputs", "targets", "segment_ids", "positions", "weights")
# Each element is a whole batch; a couple of threads keep a few ready without holding much memory.
_READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
_EPOCH_CACHE_SIZE = 2


class Layout:
    """Maps a global row index to the document pieces (doc, start, stop) filling that row.

    Args:
      pair_counts: [num_documents] int64 (input, target) pairs per document (tokens - 1).
      seq_len: T, pairs per row.
      mode: "concat", "whole" or "single" (see the module docstring).
      seed: per-epoch shuffle seed; None keeps the stored order in every epoch.
    """

    def __init__(self, pair_counts: np.ndarray, seq_len: int, mode: str, seed: int | None) -> None:
        if mode not in LAYOUTS:
            raise ValueError(f"mode must be one of {list(LAYOUTS)}, got {mode!r}")
        self.docs = np.flatnonzero(pair_counts > 0)
        if self.docs.size == 0:
            raise ValueError("the split has no document with at least 2 tokens")
        self.counts = np.asarray(pair_counts, np.int64)
        self.seq_len, self.mode, self.seed = seq_len, mode, seed
        self.total = int(self.counts[self.docs].sum())
        if mode == "whole":
            length = int(self.counts[self.docs].max())
            if length > seq_len or np.any(self.counts[self.docs] != length):
                raise ValueError(f"seq_len must be >= the fixed example length {length}, got {seq_len}")
            self.per_row = seq_len // length
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    @property
    def rows_per_epoch(self) -> int:
        if self.mode == "concat":
            return math.ceil(self.total / self.seq_len)
        if self.mode == "whole":
            return math.ceil(self.docs.size / self.per_row)
        return int(self.docs.size)

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(document order [N], cumulative pair counts in that order [N]) of `epoch`, cached."""
        with self._lock:
            if epoch in self._epochs:
                return self._epochs[epoch]
        order = self.docs
        if self.seed is not None:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.docs)
        result = order, np.cumsum(self.counts[order])
        with self._lock:
            self._epochs[epoch] = result
            while len(self._epochs) > _EPOCH_CACHE_SIZE:
                del self._epochs[min(self._epochs)]
        return result

    def pieces(self, row: int) -> list[tuple[int, int, int]]:
        """The pieces (document, first pair, end pair) of global row `row`, in row order."""
        epoch, row = divmod(row, self.rows_per_epoch)
        order, ends = self._epoch(epoch)
        if self.mode == "single":
            doc = int(order[row])
            return [(doc, 0, int(min(self.counts[doc], self.seq_len)))]
        if self.mode == "whole":
            chosen = order[row * self.per_row : (row + 1) * self.per_row]
            return [(int(doc), 0, int(self.counts[doc])) for doc in chosen]
        begin, end = row * self.seq_len, min((row + 1) * self.seq_len, self.total)
        pieces = []
        index = int(np.searchsorted(ends, begin, side="right"))  # First document ending after `begin`.
        while begin < end:
            doc, doc_start = int(order[index]), int(ends[index] - self.counts[order[index]])
            stop = min(int(ends[index]), end)
            pieces.append((doc, begin - doc_start, stop - doc_start))
            begin, index = stop, index + 1
        return pieces


def build_row(
    pieces: list[tuple[int, int, int]], documents: Documents | ArrayDocuments, seq_len: int
) -> dict[str, np.ndarray]:
    """Fills one row of length T from `pieces`; `documents.get(doc)` gives (tokens [n], weights [n])."""
    row = {name: np.zeros(seq_len, np.float32 if name == "weights" else np.int32) for name in FIELDS}
    offset = 0
    for segment, (doc, start, stop) in enumerate(pieces, start=1):
        tokens, weights = documents.get(doc)
        span = slice(offset, offset + stop - start)
        row["inputs"][span] = tokens[start:stop]
        row["targets"][span] = tokens[start + 1 : stop + 1]
        row["weights"][span] = weights[start + 1 : stop + 1]
        row["segment_ids"][span] = segment
        row["positions"][span] = np.arange(stop - start)
        offset += stop - start
    return row


class _BatchMaker:
    """Callable: batch index -> this process's rows of that global batch, stacked (see module docstring)."""

    def __init__(self, layout: Layout, documents: Documents | ArrayDocuments, global_batch: int,
                 process_index: int, process_count: int, num_rows: int | None) -> None:
        if documents.labels is not None and layout.mode != "single":
            raise ValueError(f"a labelled dataset needs one example per row (layout 'single'), got {layout.mode!r}")
        self.layout, self.documents = layout, documents
        self.local = global_batch // process_count
        self.global_batch, self.process_index = global_batch, process_index
        self.num_rows = num_rows  # Rows at or past this index are padding (eval); None = infinite.

    def __call__(self, batch_index: int) -> dict[str, np.ndarray]:
        first = batch_index * self.global_batch + self.process_index * self.local
        rows, labels = [], []
        for row in range(first, first + self.local):
            pieces = [] if self.num_rows is not None and row >= self.num_rows else self.layout.pieces(row)
            rows.append(build_row(pieces, self.documents, self.layout.seq_len))
            if self.documents.labels is not None:
                labels.append(self.documents.labels[pieces[0][0]] if pieces else 0)
        batch = {name: np.stack([row[name] for row in rows]) for name in FIELDS}
        if self.documents.labels is not None:
            batch["labels"] = np.asarray(labels, np.int32)
        return batch


def _check_args(batch_size, seq_len, process_index, process_count) -> tuple[int, int]:
    """Validates the shared arguments; returns (process_index, process_count) with JAX's defaults."""
    import jax  # Imported here so that building datasets never initializes JAX.

    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
    for name, value, minimum in (("batch_size", batch_size, 1), ("seq_len", seq_len, 1),
                                 ("process_count", process_count, 1), ("process_index", process_index, 0)):
        check_int(name, value, minimum=minimum)
    if process_index >= process_count:
        raise ValueError(f"process_index must be < process_count ({process_count}), got {process_index}")
    if batch_size % process_count:
        raise ValueError(f"batch_size ({batch_size}) must be divisible by process_count ({process_count})")
    return int(process_index), int(process_count)


def _layout(
    data: DataConfig, split: str, seq_len: int, seed: int | None
) -> tuple[Layout, Documents | ArrayDocuments]:
    documents = sources.open_split(data, split)
    dataset = dataset_for(data)
    dataset.check_seq_len(data, seq_len)
    return Layout(np.maximum(documents.lengths() - 1, 0), seq_len, dataset.layout(data), seed), documents


def make_train_iterator(data: DataConfig, *, batch_size: int, seq_len: int, seed: int,
                        process_index: int | None = None, process_count: int | None = None) -> grain.DatasetIterator:
    """An infinite, deterministic iterator over this process's share of training batches.

    Epochs repeat forever, each in its own order drawn from (seed, epoch). `batch_size` is the global
    batch; each process gets batch_size // process_count rows (ValueError if not divisible).

    Returns:
      a grain DatasetIterator of dicts (module docstring); `get_state()` is JSON-serializable and
      `set_state(state)` on a fresh iterator with the same arguments continues with the same batches.
    """
    process_index, process_count = _check_args(batch_size, seq_len, process_index, process_count)
    check_int("seed", seed, minimum=0)
    if features.is_feature_data(data):
        return features.train_iterator(data, batch_size=batch_size, seq_len=seq_len, seed=int(seed),
                                       process_index=process_index, process_count=process_count)
    layout, documents = _layout(data, data.train_split, seq_len, int(seed))
    make_batch = _BatchMaker(layout, documents, batch_size, process_index, process_count, num_rows=None)
    # sys.maxsize batches: effectively infinite, and still an ordinary random-access MapDataset.
    dataset = grain.MapDataset.range(sys.maxsize).map(make_batch)
    return iter(dataset.to_iter_dataset(_READ_OPTIONS))


def num_eval_batches(data: DataConfig, *, batch_size: int, seq_len: int, max_batches: int = 0) -> int:
    """Batches in one eval pass: ceil(rows / batch_size), capped at max_batches when it is > 0."""
    check_int("max_batches", max_batches, minimum=0)
    if features.is_feature_data(data):
        rows = len(features.open_rows(data, data.eval_split, seq_len))
    else:
        rows = _layout(data, data.eval_split, seq_len, None)[0].rows_per_epoch
    batches = math.ceil(rows / batch_size)
    return min(batches, max_batches) if max_batches else batches


def make_eval_iterator(data: DataConfig, *, batch_size: int, seq_len: int, process_index: int | None = None,
                       process_count: int | None = None, max_batches: int = 0) -> grain.DatasetIterator:
    """A finite pass over the eval split in stored order (no shuffle), sharded per process.

    Every process yields the same number of batches (`num_eval_batches`), all of the same shape; rows
    past the end of the split are padding (weights 0). The rows, and so the weighted mean loss, do not
    depend on the process count.
    """
    process_index, process_count = _check_args(batch_size, seq_len, process_index, process_count)
    if features.is_feature_data(data):
        count = num_eval_batches(data, batch_size=batch_size, seq_len=seq_len, max_batches=max_batches)
        return features.eval_iterator(data, count, batch_size=batch_size, seq_len=seq_len,
                                      process_index=process_index, process_count=process_count)
    layout, documents = _layout(data, data.eval_split, seq_len, None)
    count = num_eval_batches(data, batch_size=batch_size, seq_len=seq_len, max_batches=max_batches)
    make_batch = _BatchMaker(layout, documents, batch_size, process_index, process_count,
                             num_rows=layout.rows_per_epoch)
    return iter(grain.MapDataset.range(count).map(make_batch).to_iter_dataset(_READ_OPTIONS))
