"""Where the train loop's batches come from: the config's dataset or a user's own iterable of batches.

Both sources have ``get_state() -> dict`` / ``set_state(dict)``, and both states are checked before a
checkpoint is accepted (`check_data_state`), so a malformed or missing state makes the step corrupt
(the checkpointer falls back past it) instead of crashing in `set_state` or restarting the data.

A user iterable (`UserBatches`) yields dicts of NumPy arrays in the built-in pipeline's format (b =
batch_size // process_count rows on this process, T = seq_len):

    inputs       int32   [b, T]  tokens in [0, model.vocab_size)
    targets      int32   [b, T]  next tokens in [0, model.vocab_size)
    segment_ids  int32   [b, T]  1, 2, ... per packed document; 0 = padding
    positions    int32   [b, T]  position within the segment
    weights      float32 [b, T]  loss weight per target (0 on padding)
    labels       int32   [b]     optional; the "classification" objective needs it

Resuming with a user iterable: it has no state of its own, so the checkpoint records how many batches
the run consumed (``{"batches_consumed": n}``) and a resumed run reads and discards that many batches
from the new iterable before training. Pass an iterable that replays the same stream from its start
(e.g. a generator function called again with the same seed); skipping costs only producing the batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from icml26zoo.validation import is_integer

__all__ = ["UserBatches", "batch_from_tokens", "check_batch", "check_data_state", "check_eval_batches"]

_REQUIRED = {"inputs": np.int32, "targets": np.int32, "segment_ids": np.int32, "positions": np.int32,
             "weights": np.float32}
_OPTIONAL = {"labels": np.int32}
_TOKEN_FIELDS = ("inputs", "targets")
GRAIN_KEY = "next_index"
USER_KEY = "batches_consumed"


def batch_from_tokens(tokens: np.ndarray) -> dict[str, np.ndarray]:
    """A batch in the format above from tokens [b, T + 1]: one unpacked sequence per row, every target weighted."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] < 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens has shape {tokens.shape} and dtype {tokens.dtype}; "
                         "expected integers [b, T + 1] with T >= 1")
    rows, length = tokens.shape[0], tokens.shape[1] - 1
    tokens = tokens.astype(np.int32)
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "segment_ids": np.ones((rows, length), np.int32),
        "positions": np.tile(np.arange(length, dtype=np.int32), (rows, 1)),
        "weights": np.ones((rows, length), np.float32),
    }


def check_batch(batch: Any, index: int, *, rows: int, seq_len: int, vocab_size: int, name: str = "data") -> None:
    """Raises ValueError naming batch `index` of `name` when `batch` is not in the format above."""
    where = f"{name} batch {index}"
    if not isinstance(batch, Mapping):
        raise ValueError(f"{where} must be a dict of numpy arrays, got {type(batch).__name__}")
    missing = sorted(set(_REQUIRED) - set(batch))
    unknown = sorted(set(batch) - set(_REQUIRED) - set(_OPTIONAL))
    if missing or unknown:
        raise ValueError(f"{where} has keys {sorted(batch)}; missing {missing}, unexpected {unknown} "
                         f"(expected {sorted(_REQUIRED)} and optionally {sorted(_OPTIONAL)})")
    for key, value in batch.items():
        dtype = {**_REQUIRED, **_OPTIONAL}[key]
        shape = (rows,) if key in _OPTIONAL else (rows, seq_len)
        array = np.asarray(value)
        if array.shape != shape or array.dtype != dtype:
            raise ValueError(f"{where}[{key!r}] is {array.dtype} {list(array.shape)}, expected "
                             f"{np.dtype(dtype)} {list(shape)} (batch_size rows on this process, seq_len)")
    for key in _TOKEN_FIELDS:
        tokens = np.asarray(batch[key])
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(f"{where}[{key!r}] holds tokens in [{low}, {high}], expected [0, {vocab_size}) "
                             "(model.vocab_size)")


class UserBatches:
    """Validates and counts the batches of a user iterable; its state is the count consumed.

    Args:
      batches: any iterable of batches (module docstring).
      rows, seq_len, vocab_size: the expected rows per process, tokens per row and vocabulary.
      needed: batches the whole run consumes, for the message when the iterable ends too early.
    """

    def __init__(self, batches: Iterable, *, rows: int, seq_len: int, vocab_size: int, needed: int) -> None:
        try:
            self._iterator: Iterator = iter(batches)
        except TypeError:
            raise ValueError(f"data must be an iterable of batch dicts, got {type(batches).__name__}") from None
        self.rows, self.seq_len, self.vocab_size, self.needed = rows, seq_len, vocab_size, needed
        self.consumed = 0

    def __iter__(self) -> UserBatches:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        try:
            batch = next(self._iterator)
        except StopIteration:
            raise ValueError(f"data ran out after {self.consumed} batches; the run needs {self.needed} "
                             "(num_steps * optim.grad_accum_steps)") from None
        check_batch(batch, self.consumed, rows=self.rows, seq_len=self.seq_len, vocab_size=self.vocab_size)
        self.consumed += 1
        return {key: np.asarray(value) for key, value in batch.items()}

    def get_state(self) -> dict[str, int]:
        return {USER_KEY: self.consumed}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Discards batches until `state`'s count has been consumed (the stream must replay from its start)."""
        target = state[USER_KEY]
        if target < self.consumed:
            raise ValueError(f"cannot rewind data from batch {self.consumed} to {target}")
        while self.consumed < target:
            next(self)


def check_data_state(key: str, step: int, state: Any) -> None:
    """Raises ValueError unless `state` is ``{key: step}`` with an int: what `set_state` of the source expects.

    One batch is read per micro-step, so the count of batches read at step N is exactly N; any other
    value (a string, a negative or float index, null, a missing key) is damage, not a state to resume.
    """
    if not isinstance(state, dict) or set(state) != {key}:
        raise ValueError(f"data state is {_short(state)}, expected {{{key!r}: {step}}}")
    value = state[key]
    if not is_integer(value) or value != step:
        raise ValueError(f"data state {key} is {value!r}, expected {step} (one batch per micro-step)")


def check_eval_batches(eval_data: Any) -> None:
    """Raises ValueError unless `eval_data` can be iterated afresh for every evaluation."""
    if eval_data is None:
        return
    if callable(eval_data):
        return
    try:
        iterator = iter(eval_data)
    except TypeError:
        raise ValueError(f"eval_data must be a re-iterable collection of batches or a function returning "
                         f"one, got {type(eval_data).__name__}") from None
    if iterator is eval_data:
        raise ValueError("eval_data is a one-shot iterator (e.g. a generator), which the second evaluation "
                         "would find empty; pass a list of batches or a function returning a fresh iterable")


def eval_batches(eval_data: Any) -> Iterator:
    """A fresh iterator over `eval_data` (calling it first when it is a function)."""
    return iter(eval_data() if callable(eval_data) else eval_data)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."
