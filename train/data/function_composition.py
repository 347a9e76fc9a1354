"""L-sequential function composition (Liao et al., arXiv 2602.01763; the task of Chen, Peng & Wu, arXiv 2412.02975)
as next-token rows: the loss is on the answer token only.

Each example draws L functions f_1 .. f_L : [n] -> [n] (uniform maps, or random permutations) and a start
value x, and writes

    <F_1> table_1  <F_2> table_2  ...  <F_L> table_L  <Q> x  answer,   answer = f_L(... f_2(f_1(x)) ...)

With encoding "table", table_ℓ is the n values f_ℓ(0), ..., f_ℓ(n - 1): the position inside the segment is
the argument. With encoding "pairs", table_ℓ is the n pairs (i, f_ℓ(i)) in a random order, so a model must
look arguments up by content. The exact token format is this zoo's reconstruction.

Vocabulary layout (size 2 + n + L):
    0                      padding (never inside an example)
    1 ... n                values (value v is token 1 + v), both arguments and results
    n + 1 ... n + L        segment markers <F_1> ... <F_L>
    n + L + 1              query marker <Q>

Sequence length: L (n + 1) + 3 ("table") or L (2n + 1) + 3 ("pairs"). The label of an example is the
answer value v (its last token is 1 + v).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import Task, TaskBuilder, TaskDataset, TaskOptions, check_option, make_config


@dataclasses.dataclass(frozen=True)
class CompositionOptions(TaskOptions):
    """L-sequential function composition: n values, L functions, permutations or maps, table or pair encoding."""

    num_values: int = 16
    num_functions: int = 2
    permutations: bool = False
    encoding: Literal["table", "pairs"] = "table"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("num_values", self.num_values, 2, 4096)
        check_option("num_functions", self.num_functions, 1, 64)


def query_marker(options: CompositionOptions) -> int:
    """The token of <Q>."""
    return 1 + options.num_values + options.num_functions


def compose(functions: np.ndarray, start: np.ndarray) -> np.ndarray:
    """functions int [N, L, n], start int [N] -> [N]: f_L(... f_1(start) ...) for every example."""
    value = start
    rows = np.arange(functions.shape[0])
    for level in range(functions.shape[1]):
        value = functions[rows, level, value]
    return value


def _tables(rng: np.random.Generator, functions: np.ndarray, encoding: str) -> np.ndarray:
    """[N, L, n] or [N, L, 2n] value tokens of each function's segment body."""
    if encoding == "table":
        return 1 + functions
    count, levels, n = functions.shape
    arguments = np.argsort(rng.random((count, levels, n)), axis=2)
    body = np.empty((count, levels, 2 * n), np.int64)
    body[..., 0::2] = 1 + arguments
    body[..., 1::2] = 1 + np.take_along_axis(functions, arguments, axis=2)
    return body


class Composition(Task):
    options_class = CompositionOptions

    @staticmethod
    def length(options: CompositionOptions) -> int:
        body = options.num_values * (2 if options.encoding == "pairs" else 1)
        return options.num_functions * (body + 1) + 3

    @staticmethod
    def vocab_size(options: CompositionOptions) -> int:
        return 2 + options.num_values + options.num_functions

    @staticmethod
    def loss_weights(options: CompositionOptions) -> np.ndarray:
        weights = np.zeros(Composition.length(options), np.float32)
        weights[-1] = 1.0
        return weights

    @staticmethod
    def generate(options: CompositionOptions, num_examples: int, seed) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        n, levels = options.num_values, options.num_functions
        if options.permutations:
            functions = np.argsort(rng.random((num_examples, levels, n)), axis=2)
        else:
            functions = rng.integers(0, n, size=(num_examples, levels, n))
        start = rng.integers(0, n, size=num_examples)
        answer = compose(functions, start)
        markers = np.broadcast_to(1 + n + np.arange(levels), (num_examples, levels))[..., None]
        segments = np.concatenate([markers, _tables(rng, functions, options.encoding)], axis=2)
        query = np.stack([np.full(num_examples, query_marker(options)), 1 + start, 1 + answer], axis=1)
        tokens = np.concatenate([segments.reshape(num_examples, -1), query], axis=1)
        return tokens.astype(np.int32), answer.astype(np.int32)


class ZooFunctionComposition(TaskBuilder):
    """L-sequential function composition rows."""

    task = Composition
    BUILDER_CONFIGS = [make_config(CompositionOptions())]


@register_dataset("function_composition")
class CompositionDataset(TaskDataset):
    """Next-token rows with the loss on the answer; whole examples per row when packed."""

    builder_class, name = ZooFunctionComposition, "function_composition"
