"""The needle-in-a-haystack task on the zoo's byte corpus (the Python standard library's files).

`icml26zoo.longctx.needle.make_needle_task` builds the task from any text; this module reads the corpus it is
built from here (the `pystdlib` dataset's file list, `train.data.pystdlib`) and hands it over. Used by
scripts/bench_long_context.py and notebooks/long_context.ipynb.

Example::

    from icml26zoo.longctx import compare
    from icml26zoo.repro.needle import needle_task

    rows = compare.retrieval_rows(needle_task(4096))
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from icml26zoo.longctx.needle import NeedleTask, make_needle_task
from icml26zoo.train.data.pystdlib import stdlib_files, stdlib_root

__all__ = ["corpus_bytes", "needle_task"]


@functools.lru_cache(maxsize=1)
def corpus_bytes(max_bytes: int = 1 << 21) -> np.ndarray:
    """The first `max_bytes` bytes of the standard-library corpus (sorted file order), as uint8 [max_bytes]."""
    root, chunks, total = stdlib_root(), [], 0
    for path in stdlib_files(root):
        data = (root / path).read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    return np.frombuffer(b"".join(chunks)[:max_bytes], np.uint8)


def needle_task(length: int, **options: Any) -> NeedleTask:
    """`make_needle_task` on the byte corpus: `length` tokens; `options` as make_needle_task's (seed, n_needles ...)."""
    return make_needle_task(corpus_bytes(), length, **options)
