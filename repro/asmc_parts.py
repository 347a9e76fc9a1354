"""The ASMC reproduction's pieces: a synthetic addition task with an exact verifier, and the ancestry/ESS figure.

Task rows (digits D): the D digits of a, "+", the D digits of b, "=", then the D + 1 digits of a + b, then ";"
(end); every number is written least significant digit first, the order in which carries are computed, so that
answer digit j sits at a fixed distance from the operand digits it depends on (what RoPE attention finds easily).
Every row has 3D + 4 tokens; the prompt is the first 2D + 2 and the answer the last D + 2. Operands are uniform
in [0, 10^D).

Vocabulary (16): 0-9 digits, 10 "+", 11 "=", 12 ";" (end of answer), 13-15 unused.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from matplotlib.figure import Figure

__all__ = ["END", "VOCAB", "answer_correct", "answer_length", "ancestry_figure", "problems", "prompt_length",
           "surviving_slots", "training_batches"]

PLUS, EQUALS, END, VOCAB = 10, 11, 12, 16


def prompt_length(digits: int) -> int:
    return 2 * digits + 2


def answer_length(digits: int) -> int:
    return digits + 2


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """values [n] -> [n, width] decimal digits, most significant first."""
    powers = 10 ** np.arange(width - 1, -1, -1)
    return (values[:, None] // powers) % 10


def problems(rng: np.random.Generator, count: int, digits: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows [count, 3D + 4] int32, sums [count] int64) of `count` random problems with D-digit operands."""
    a, b = rng.integers(0, 10**digits, size=(2, count))
    total = a + b
    column = np.full((count, 1), 0)
    rows = np.concatenate([
        _digits(a, digits)[:, ::-1], column + PLUS, _digits(b, digits)[:, ::-1], column + EQUALS,
        _digits(total, digits + 1)[:, ::-1], column + END,
    ], axis=1)
    return rows.astype(np.int32), total


def training_batches(seed: int, batch_size: int, digits: int) -> Iterator[dict[str, np.ndarray]]:
    """Endless batches in the trainer's format (`train.batch_source`), loss on the answer tokens only.

    Rows of T = 3D + 3 inputs; a fresh generator with the same seed replays the same stream (for resuming).
    """
    rng = np.random.default_rng([seed, 17])
    length = 3 * digits + 3
    weights = np.zeros((batch_size, length), np.float32)
    # Targets t >= 2D + 1 are the answer digits and the end marker (the prompt's last input is "=").
    weights[:, prompt_length(digits) - 1:] = 1.0
    while True:
        rows, _ = problems(rng, batch_size, digits)
        yield {"inputs": rows[:, :-1], "targets": rows[:, 1:], "weights": weights.copy(),
               "segment_ids": np.ones((batch_size, length), np.int32),
               "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (batch_size, length)).copy()}


def answer_correct(answers: np.ndarray, total: int, digits: int) -> np.ndarray:
    """answers [N, D + 2] generated tokens -> [N] bool: the reversed digits spell `total` and end with ";"."""
    expected = np.concatenate([_digits(np.asarray([total]), digits + 1)[0, ::-1], [END]])
    return (np.asarray(answers) == expected).all(axis=1)


def surviving_slots(ancestors: np.ndarray, active: np.ndarray) -> np.ndarray:
    """[T, N] bool: slot i after token t (before that token's resampling) has a descendant among the final
    live particles `active` [N]. ancestors [T, N]: after token t, slot i continues slot ancestors[t, i]."""
    steps, capacity = ancestors.shape
    survived = np.zeros((steps, capacity), bool)
    current = np.flatnonzero(active)
    for t in range(steps - 1, -1, -1):
        survived[t, ancestors[t][current]] = True
        current = np.flatnonzero(survived[t])
    return survived


def ancestry_figure(ancestors: np.ndarray, ess_fraction: np.ndarray, num_active: np.ndarray, active: np.ndarray,
                    *, title: str) -> Figure:
    """Two panels: the particles' genealogy over the generated tokens (lineages of the final live particles in
    black) and ESS / N_live after each token. ancestors [T, N], ess_fraction [T], num_active [T] (live particles
    at each token), active [N] (the final live particles)."""
    steps, capacity = ancestors.shape
    survived = surviving_slots(ancestors, active)
    figure = Figure(figsize=(7.5, 5.2), layout="constrained")
    tree, trace = figure.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    for t in range(1, steps):
        # The edge into token t + 1 (1-indexed) of slot i starts at its parent after token t.
        for child in range(int(num_active[t])):
            dark = survived[t, child]
            tree.plot([t, t + 1], [ancestors[t - 1, child], child], color="black" if dark else "0.8",
                      linewidth=1.2 if dark else 0.6, zorder=2 if dark else 1)
    tree.set(ylabel="particle slot", title=title)
    trace.plot(np.arange(1, steps + 1), ess_fraction, marker="o", markersize=3)
    trace.set(xlabel="generated token", ylabel="ESS / N live", ylim=(0, 1.05))
    trace.grid(True, alpha=0.3)
    return figure
