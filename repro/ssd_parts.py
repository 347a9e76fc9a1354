"""The pieces of the SSD reproduction: random SSD and softmax inputs, semiseparable rank, the implied 1-SS mask.

Everything here is a diagnostic on small materialised matrices (numpy float64 for the SVDs): the SSD kernel
M [T, T] comes from `icml26zoo.kernels.ssd.kernel_matrix`, the softmax matrix from `softmax_matrix`.

Semiseparable rank (Dao & Gu, arXiv 2405.21060, Def. 3.1): the largest rank of a block taken from the lower
triangle, diagonal included. The largest such blocks are M[t:, :t+1]; `semiseparable_rank` takes the max of
their numerical ranks over a set of split points t.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.kernels.ssd import kernel_matrix

__all__ = ["CONDITION_CASES", "SsdInputs", "block_spectrum", "condition_case", "implied_mask", "mask_rank_gap",
           "numerical_rank", "random_ssd_inputs", "semiseparable_rank", "softmax_matrix", "split_points",
           "ssd_matrix"]


class SsdInputs(NamedTuple):
    """x [B, T, H, P] (already times dt); a [B, T, H] (scalar) or [B, T, H, N] (diagonal) log-decays <= 0;
    b, c [B, T, H, N]."""

    x: jax.Array
    a: jax.Array
    b: jax.Array
    c: jax.Array


def random_ssd_inputs(key: jax.Array, *, batch: int, length: int, heads: int, head_dim: int, state_size: int,
                      diagonal: bool, positive_bc: bool = False) -> SsdInputs:
    """Random SSD inputs with Mamba2-init decays: a = dt * A, dt log-uniform in [1e-3, 1e-1], A in -[1, 16]
    (one A per head, or per head and state dimension when `diagonal`). b, c ~ N(0, 1), or U(0.5, 1.5) when
    `positive_bc` (so that C B^T has no zero entry and can be divided by)."""
    kx, kdt, ka, kb, kc = jax.random.split(key, 5)
    dt = jnp.exp(jax.random.uniform(kdt, (batch, length, heads), minval=jnp.log(1e-3), maxval=jnp.log(1e-1)))
    a_shape = (heads, state_size) if diagonal else (heads,)
    a_rate = -jax.random.uniform(ka, a_shape, minval=1.0, maxval=16.0)
    a = dt[..., None] * a_rate if diagonal else dt * a_rate
    shape = (batch, length, heads, state_size)
    if positive_bc:
        b = jax.random.uniform(kb, shape, minval=0.5, maxval=1.5)
        c = jax.random.uniform(kc, shape, minval=0.5, maxval=1.5)
    else:
        b, c = jax.random.normal(kb, shape), jax.random.normal(kc, shape)
    x = jax.random.normal(kx, (batch, length, heads, head_dim)) * dt[..., None]
    return SsdInputs(x, a, b, c)


def softmax_matrix(key: jax.Array, length: int, width: int) -> np.ndarray:
    """The causal softmax attention matrix [T, T] of random q, k ~ N(0, 1) of `width` dims, logits q.k/sqrt(width)
    (the usual scaling), as float64."""
    kq, kk = jax.random.split(key)
    q, k = jax.random.normal(kq, (length, width)), jax.random.normal(kk, (length, width))
    causal = jnp.tril(jnp.ones((length, length), bool))
    logits = jnp.where(causal, q @ k.T / jnp.sqrt(float(width)), -jnp.inf)
    return np.asarray(jax.nn.softmax(logits, axis=-1), np.float64)


def ssd_matrix(inputs: SsdInputs) -> np.ndarray:
    """The materialised SSD kernel of row 0, head 0: M [T, T] float64 with y = M x."""
    return np.asarray(kernel_matrix(inputs.a, inputs.b, inputs.c)[0, 0], np.float64)


def split_points(length: int, count: int = 16) -> np.ndarray:
    """Split points t of the blocks M[t:, :t+1]: every t when `length` <= 2 * count, else `count` evenly
    spaced ones that include the middle t = length // 2 (where the largest block sits). int [K]."""
    if length <= 2 * count:
        return np.arange(length)
    points = np.unique(np.round(np.linspace(0, length - 1, count)).astype(int))
    return np.union1d(points, [length // 2])


def numerical_rank(block: np.ndarray, rtol: float) -> int:
    """The number of singular values of `block` [m, n] above `rtol` times the largest (0 for a zero block)."""
    values = np.linalg.svd(block, compute_uv=False)
    return 0 if values.size == 0 or values[0] == 0 else int(np.sum(values > rtol * values[0]))


def semiseparable_rank(matrix: np.ndarray, rtol: float, points: Sequence[int] | None = None) -> int:
    """max_t numerical rank of matrix[t:, :t+1] over the split points (default `split_points(T)`).
    matrix: [T, T] lower triangular."""
    points = split_points(matrix.shape[0]) if points is None else points
    return max(numerical_rank(matrix[t:, :t + 1], rtol) for t in points)


def block_spectrum(matrix: np.ndarray) -> np.ndarray:
    """Singular values of the middle block matrix[T//2:, :T//2+1], divided by the largest. float64 [K]."""
    half = matrix.shape[0] // 2
    values = np.linalg.svd(matrix[half:, :half + 1], compute_uv=False)
    return values / values[0]


def implied_mask(matrix: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The only mask L with matrix = L o (C B^T): L = matrix / (C B^T) on the lower triangle, 0 above.

    matrix: [T, T]; b, c: [T, N] with C B^T free of zeros (e.g. positive b and c). An SSM is a 1-SS masked
    attention with query c and key b exactly when this L is 1-semiseparable. float64 [T, T].
    """
    scores = np.asarray(c, np.float64) @ np.asarray(b, np.float64).T
    lower = np.tril(np.ones(scores.shape, bool))
    if np.any(scores[lower] == 0):
        raise ValueError("implied_mask: C B^T has a zero entry on the lower triangle, so the mask is not determined")
    return np.tril(matrix / np.where(scores == 0, 1.0, scores))


# The cases of the note's condition: (name, the decay of state dim 0 differs from the others, b[:, 0] = 0,
# c[:, 0] = 0). A 1-SS masked attention needs one decay on the dims that are both reachable and observable.
CONDITION_CASES = (
    ("one shared decay", False, False, False),
    ("dim 0 decays apart, unreachable (b0 = 0)", True, True, False),
    ("dim 0 decays apart, unobservable (c0 = 0)", True, False, True),
    ("dim 0 decays apart, reachable and observable", True, False, False),
)


def condition_case(key: jax.Array, *, length: int, state_size: int, apart: bool, unreachable: bool,
                   unobservable: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A diagonal SSM (one head) whose state dims share one decay a_t, except dim 0 when `apart` (its decay is
    a_t times 1 + U(1, 4), never equal); b[:, 0] = 0 when `unreachable`, c[:, 0] = 0 when `unobservable`.
    Returns M [T, T], b [T, N], c [T, N] as float64 (b, c positive elsewhere)."""
    if state_size < 2:
        raise ValueError(f"state_size must be >= 2 for the condition check, got {state_size}")
    kin, kf = jax.random.split(key)
    scalar = random_ssd_inputs(kin, batch=1, length=length, heads=1, head_dim=1, state_size=state_size,
                               diagonal=False, positive_bc=True)
    a = jnp.repeat(scalar.a[..., None], state_size, axis=-1)  # [1, T, 1, N], one decay for all dims
    if apart:
        factor = 1.0 + jax.random.uniform(kf, (length,), minval=1.0, maxval=4.0)
        a = a.at[0, :, 0, 0].multiply(factor)
    b, c = scalar.b, scalar.c
    if unreachable:
        b = b.at[..., 0].set(0.0)
    if unobservable:
        c = c.at[..., 0].set(0.0)
    matrix = np.asarray(kernel_matrix(a, b, c)[0, 0], np.float64)
    return matrix, np.asarray(b[0, :, 0], np.float64), np.asarray(c[0, :, 0], np.float64)


def mask_rank_gap(mask: np.ndarray, points: Sequence[int] | None = None) -> float:
    """max_t sigma_2 / sigma_1 of mask[t:, :t+1] over the split points: 0 for an exactly 1-SS mask."""
    points = split_points(mask.shape[0]) if points is None else points
    gaps = [0.0]
    for t in points:
        values = np.linalg.svd(mask[t:, :t + 1], compute_uv=False)
        if values.size > 1 and values[0] > 0:
            gaps.append(float(values[1] / values[0]))
    return max(gaps)
