"""The batch fields an objective reads, checked before it reads them: a batch from the wrong kind of dataset
is a ValueError naming the objective and the missing fields, not a KeyError deep inside a traced function.

The check looks only at the dict's keys, which are static under `jit`: it costs nothing at run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# A packed token batch (train.data.pipeline): inputs, targets, segment_ids, positions [B, T] int32, weights [B, T].
TOKEN_FIELDS = ("inputs", "targets", "weights", "segment_ids", "positions")
# A labelled token batch read by a classifier: the packed rows and labels [B] int32.
LABELLED_FIELDS = ("inputs", "segment_ids", "positions", "labels")
# What a masked-diffusion objective reads: the sequences to mask and their packing.
MASKED_FIELDS = ("inputs", "segment_ids", "positions")
# A feature (point-set) batch: points [B, N, 3], features [B, N, F], weights [B, N].
FEATURE_FIELDS = ("points", "features", "weights")


def require_batch_fields(objective: str, batch: Mapping[str, Any], fields: Sequence[str], *,
                         dataset: str | None = None) -> None:
    """ValueError unless `batch` holds every name in `fields`.

    objective  the objective's registered name, for the message
    dataset    a dataset that gives such batches, named in the message as the fix (e.g. 'topics')
    """
    missing = [name for name in fields if name not in batch]
    if missing:
        hint = f" from a dataset such as data.name={dataset!r}" if dataset else ""
        raise ValueError(f"objective {objective!r} needs batch fields {list(fields)}{hint}; missing {missing}, "
                         f"got batch fields {sorted(batch)}")
