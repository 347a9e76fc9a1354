"""A needle-in-a-haystack retrieval task at the attention level, built from a given byte text.

The haystack is a slice of the bytes the caller passes (`repro/needle.py` passes the zoo's byte corpus, the
Python standard library's files; tests can pass any text). Each byte has a fixed random query, key and value
embedding per head. Needles are `needle_len` consecutive tokens whose keys are one random direction u_i (plus
small noise) and whose values are the code of an answer byte a_i; the last `n_needles` tokens are the
questions, with query β·u_i. A method answers needle i correctly when its output at question i is nearest
(summed over heads) to the value code of a_i among all 256 codes. The task is the same for every method; each
is compared with dense attention on the same arrays: the causal methods (PBS prefill, HARD-KV decode) read the
questions at the end, ISA (bidirectional, `isa_layout`) gets the sequence rotated so that the questions open
the source part.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np


class NeedleTask(NamedTuple):
    """q, k, v [1, T, H, D] float32; question positions and answers [n]; codes [256, H, D] value codes."""

    q: jnp.ndarray
    k: jnp.ndarray
    v: jnp.ndarray
    questions: np.ndarray
    answers: np.ndarray
    codes: np.ndarray


def make_needle_task(text: np.ndarray | bytes, length: int, *, n_needles: int = 8, needle_len: int = 16,
                     heads: int = 2, head_dim: int = 64, beta: float = 2.0, seed: int = 0) -> NeedleTask:
    """Haystack of `length` bytes of `text` (bytes or uint8 [n], n > length; the slice drawn from `seed`) with
    needles in its second half (before the questions)."""
    if length < 4 * n_needles * needle_len:
        raise ValueError(f"make_needle_task: `length` = {length}, expected >= 4 * n_needles * needle_len = "
                         f"{4 * n_needles * needle_len}")
    corpus = np.frombuffer(text, np.uint8) if isinstance(text, bytes) else np.asarray(text)
    if corpus.ndim != 1 or corpus.dtype != np.uint8 or corpus.size <= length:
        raise ValueError(f"text must be bytes or uint8 [n] with n > length = {length}, got {corpus.dtype} "
                         f"{corpus.shape}")
    rng = np.random.default_rng(seed)
    start = rng.integers(0, corpus.size - length)
    tokens = corpus[start: start + length].astype(np.int64)
    emb_q, emb_k, codes = (rng.normal(size=(256, heads, head_dim)).astype(np.float32) for _ in range(3))
    q, k, v = emb_q[tokens], emb_k[tokens], codes[tokens]
    directions = rng.normal(size=(n_needles, heads, head_dim)).astype(np.float32)
    answers = rng.integers(0, 256, size=n_needles)
    slots = (length // 2) + needle_len * rng.choice((length // 2 - n_needles) // needle_len - 1, n_needles,
                                                    replace=False)
    for i, s in enumerate(slots):
        noise = 0.1 * rng.normal(size=(needle_len, heads, head_dim))
        k[s: s + needle_len] = directions[i] + noise
        v[s: s + needle_len] = codes[answers[i]]
    questions = np.arange(length - n_needles, length)
    q[questions] = beta * directions
    as_array = lambda x: jnp.asarray(x[None])  # noqa: E731
    return NeedleTask(q=as_array(q), k=as_array(k), v=as_array(v), questions=questions, answers=answers,
                      codes=codes)


def isa_layout(task: NeedleTask) -> NeedleTask:
    """The task rotated so that the questions come first (the source part); needles stay in the second half."""
    n = task.questions.size
    roll = lambda x: jnp.roll(x, n, axis=1)  # noqa: E731
    return task._replace(q=roll(task.q), k=roll(task.k), v=roll(task.v), questions=np.arange(n))


def answers_at_questions(out: np.ndarray, task: NeedleTask) -> np.ndarray:
    """out [1, T, H, D] -> [n] the byte whose value code is nearest to the output at each question."""
    at = np.asarray(out, np.float32)[0, task.questions]
    dist = ((at[:, None] - task.codes[None]) ** 2).sum(axis=(-2, -1))
    return dist.argmin(axis=-1)


def retrieval_metrics(out: np.ndarray, dense: np.ndarray, task: NeedleTask) -> dict[str, float]:
    """Accuracy on the needles, agreement with dense attention's answers, and relative L2 error at the questions."""
    got, want = answers_at_questions(out, task), answers_at_questions(dense, task)
    a = np.asarray(out, np.float64)[0, task.questions]
    d = np.asarray(dense, np.float64)[0, task.questions]
    return {"accuracy": float((got == task.answers).mean()), "agree_with_dense": float((got == want).mean()),
            "rel_error": float(np.linalg.norm(a - d) / np.linalg.norm(d))}
