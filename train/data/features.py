"""The "features" layout: batches of point sets (point clouds, spherical samples, mesh nodes), not token rows.

A feature dataset stores each example as fixed-size arrays padded to its largest example (M points):
`points` [M, d], optionally `features` [M, F], `weights` [M] (0 on padding), and either a class `label` or
per-point `targets` [M, O]. Batches (b = batch_size // process_count rows per process, N = seq_len >= M):

    points    float32 [b, N, d]  coordinates; padding points are zeros
    features  float32 [b, N, F]  per-point features (F may be 0)
    weights   float32 [b, N]     > 0 for real points (meshes: quadrature weights summing to the node count),
                                 0 on padding
    labels    int32   [b]        classification datasets: the example's class (0 for padding rows)
    targets   float32 [b, N, O]  regression datasets: per-point targets (0 on padding)

Row order, sharding and resumption follow the token pipeline's "single" layout (`train.data.pipeline`):
global row g is example perm_e[g mod E] of epoch e = g div E (perm_e drawn from [seed, e]; the stored order
for eval), process p of P takes rows [i·B + p·b, i·B + (p+1)·b) of batch i, and the iterator state is
grain's {"next_index": int}. Eval rows past the end of the split are padding rows (all weights 0).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import ClassVar

import grain
import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import sources
from icml26zoo.train.data.registry import Dataset, dataset_for
from icml26zoo.train.data.tasks import TaskOptions, make_config, parse_options

LAYOUT = "features"
_READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
_ROWS_CACHE: dict[tuple, FeatureRows] = {}
_CACHE_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class FeatureRows:
    """One split in memory: E examples padded to M points.

    points [E, M, d], features [E, M, F], weights [E, M] float32; labels [E] int32 or targets [E, M, O]
    float32 (exactly one of the two).
    """

    points: np.ndarray
    features: np.ndarray
    weights: np.ndarray
    labels: np.ndarray | None = None
    targets: np.ndarray | None = None

    def __len__(self) -> int:
        return self.points.shape[0]

    @property
    def max_points(self) -> int:
        return self.points.shape[1]

    def batch(self, indices: list[int], seq_len: int) -> dict[str, np.ndarray]:
        """The rows `indices` (-1 = a padding row) padded to seq_len points (module docstring)."""
        if seq_len < self.max_points:
            raise ValueError(f"seq_len must be >= {self.max_points} points per example, got {seq_len}")
        real = np.asarray([i >= 0 for i in indices])
        take = np.where(real, indices, 0).astype(np.int64)
        pad = ((0, 0), (0, seq_len - self.max_points))

        def rows(array: np.ndarray) -> np.ndarray:
            chosen = array[take] * real.reshape((-1,) + (1,) * (array.ndim - 1)).astype(array.dtype)
            return np.pad(chosen, pad + ((0, 0),) * (array.ndim - 2))

        batch = {"points": rows(self.points), "features": rows(self.features), "weights": rows(self.weights)}
        if self.labels is not None:
            batch["labels"] = np.where(real, self.labels[take], 0).astype(np.int32)
        else:
            batch["targets"] = rows(self.targets)
        return batch


def read_rows(builder: tfds.core.DatasetBuilder, split: str, feature_dim: int) -> FeatureRows:
    """Every example of `split` stacked into FeatureRows (read once, cached per process)."""
    key = (builder.data_dir, split)
    with _CACHE_LOCK:
        cached = _ROWS_CACHE.get(key)
    if cached is not None:
        return cached
    source = builder.as_data_source(split=split)
    examples = [e for start in range(0, len(source), 4096)
                for e in source.__getitems__(list(range(start, min(start + 4096, len(source)))))]

    def stack(name: str, dtype: type) -> np.ndarray:
        return np.stack([np.asarray(example[name], dtype) for example in examples])

    points = stack("points", np.float32)
    features = (stack("features", np.float32) if feature_dim
                else np.zeros(points.shape[:2] + (0,), np.float32))
    labelled = "label" in examples[0]
    rows = FeatureRows(points, features, stack("weights", np.float32),
                       labels=stack("label", np.int32) if labelled else None,
                       targets=None if labelled else stack("targets", np.float32))
    with _CACHE_LOCK:
        _ROWS_CACHE[key] = rows
    return rows


def feature_spec(max_points: int, point_dim: int, feature_dim: int, *, num_targets: int = 0
                 ) -> dict[str, tfds.features.FeatureConnector]:
    """The TFDS features of one example (labels when num_targets == 0, else per-point targets)."""
    spec = {"points": tfds.features.Tensor(shape=(max_points, point_dim), dtype=np.float32),
            "weights": tfds.features.Tensor(shape=(max_points,), dtype=np.float32)}
    if feature_dim:
        spec["features"] = tfds.features.Tensor(shape=(max_points, feature_dim), dtype=np.float32)
    if num_targets:
        spec["targets"] = tfds.features.Tensor(shape=(max_points, num_targets), dtype=np.float32)
    else:
        spec["label"] = tfds.features.Tensor(shape=(), dtype=np.int32)
    return spec


class FeatureDataset(Dataset):
    """The registered entry of a feature dataset: options from data.task_options, FeatureRows per split.

    A subclass sets `name`, `options_class`, `builder_class` and defines `max_points(options)` and
    `feature_dim(options)`.
    """

    byte_level = False
    name: ClassVar[str]
    options_class: ClassVar[type[TaskOptions]]
    builder_class: ClassVar[type]

    def options(self, data: DataConfig) -> TaskOptions:
        """The validated options of `data` (ValueError naming data.task_options)."""
        return parse_options(self.options_class, self.name, data.task_options)

    def max_points(self, options: TaskOptions) -> int:
        raise NotImplementedError

    def feature_dim(self, options: TaskOptions) -> int:
        return 0

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        return self.builder_class.for_config(directory, make_config(self.options(data)))

    def vocab_size(self, data: DataConfig) -> int:
        # No tokens: any model.vocab_size fits.
        return 0

    def documents(self, builder: tfds.core.DatasetBuilder, split: str, data: DataConfig) -> FeatureRows:
        return read_rows(builder, split, self.feature_dim(self.options(data)))

    def layout(self, data: DataConfig) -> str:
        return LAYOUT

    def check_seq_len(self, data: DataConfig, seq_len: int) -> None:
        needed = self.max_points(self.options(data))
        if seq_len < needed:
            raise ValueError(f"seq_len must be >= {needed}, the points per {self.name} example (from "
                             f"data.task_options), since seq_len is the points per row; got {seq_len}")


class FeatureBatches:
    """Callable: batch index -> this process's rows of that global batch (module docstring)."""

    def __init__(self, rows: FeatureRows, seq_len: int, global_batch: int, process_index: int,
                 process_count: int, seed: int | None, num_rows: int | None) -> None:
        self.rows, self.seq_len, self.seed, self.num_rows = rows, seq_len, seed, num_rows
        self.local = global_batch // process_count
        self.first_offset = process_index * self.local
        self.global_batch = global_batch
        self._orders: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def _order(self, epoch: int) -> np.ndarray:
        if self.seed is None:
            return np.arange(len(self.rows))
        with self._lock:
            if epoch not in self._orders:
                self._orders = {epoch: np.random.default_rng([self.seed, epoch]).permutation(len(self.rows))}
            return self._orders[epoch]

    def example(self, row: int) -> int:
        """The example at global row `row` (-1 for an eval padding row)."""
        if self.num_rows is not None and row >= self.num_rows:
            return -1
        epoch, index = divmod(row, len(self.rows))
        return int(self._order(epoch)[index])

    def __call__(self, batch_index: int) -> dict[str, np.ndarray]:
        first = batch_index * self.global_batch + self.first_offset
        return self.rows.batch([self.example(row) for row in range(first, first + self.local)], self.seq_len)


def is_feature_data(data: DataConfig) -> bool:
    """Whether `data` names a dataset of the "features" layout (point sets rather than token rows)."""
    return dataset_for(data).layout(data) == LAYOUT


def open_rows(data: DataConfig, split: str, seq_len: int) -> FeatureRows:
    """The FeatureRows of `split` (the dataset built first), after checking that seq_len holds an example."""
    dataset_for(data).check_seq_len(data, seq_len)
    return sources.open_split(data, split)


def train_iterator(data: DataConfig, *, batch_size: int, seq_len: int, seed: int, process_index: int,
                   process_count: int) -> grain.DatasetIterator:
    """An infinite, resumable iterator over this process's training batches (epochs reshuffled by seed)."""
    rows = open_rows(data, data.train_split, seq_len)
    batches = FeatureBatches(rows, seq_len, batch_size, process_index, process_count, seed, num_rows=None)
    return iter(grain.MapDataset.range(sys.maxsize).map(batches).to_iter_dataset(_READ_OPTIONS))


def eval_iterator(data: DataConfig, count: int, *, batch_size: int, seq_len: int, process_index: int,
                  process_count: int) -> grain.DatasetIterator:
    """`count` batches of the eval split in stored order; rows past its end are padding rows (weights 0)."""
    rows = open_rows(data, data.eval_split, seq_len)
    batches = FeatureBatches(rows, seq_len, batch_size, process_index, process_count, None, num_rows=len(rows))
    return iter(grain.MapDataset.range(count).map(batches).to_iter_dataset(_READ_OPTIONS))
