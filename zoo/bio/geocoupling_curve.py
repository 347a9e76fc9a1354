"""GeoCoupling's coupling curve, its path cost and the monotone geodesic by dynamic programming.

RECONSTRUCTION ("Demystifying Multimodal Biomolecular Co-design with Intrinsic Geodesic Coupling",
arXiv 2606.01628, whose code is not public): the curve parameterisation, the line-integral path cost and the
DP edge cost are this zoo's reading of the paper's Temporal Optimal Transport objective. The grid DP follows the
precursor VOS (MolPilot, arXiv 2505.07286), whose discrete objective is `path_objective="budgeted_sum"`.

Times: M = 2 modalities, column 0 the structure time t_x, column 1 the sequence time t_s (0 noise, 1 data).

    CouplingCurve   logits [M, J] -> γ: [0, 1] -> [0, 1]^M, knots γ_m(k / J) = Σ_{j<k} softmax(a_m)_j, linear between
                    them: every component non-decreasing, γ(0) = 0 and γ(1) = 1 exactly; constant logits give the
                    diagonal γ(τ) = (τ, τ)
    path_cost       C(γ) = ∫ ℓ_x(γ) dγ_x + ℓ_s(γ) dγ_s (trapezoid on a τ grid): the line integral of the loss 1-form,
                    invariant to re-parameterising τ
    geodesic_dp     the monotone lattice path (0, 0) -> (G−1, G−1) of least cost on a loss grid [G, G, 2]
                    (NumPy reference `geodesic_dp_reference`, jittable `geodesic_dp`)
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_choice, check_float_array, check_int

__all__ = ["PATH_OBJECTIVES", "CouplingCurve", "curve_times", "geodesic_dp", "geodesic_dp_reference",
           "path_cost", "path_moves"]

PATH_OBJECTIVES = ("line_integral", "budgeted_sum")
# Logit of an increment fitted as 0 (fit_path): exp(-30) ≈ 1e-13 of the other increments.
_EMPTY_LOGIT = -30.0


def curve_times(logits: jax.Array, tau: jax.Array) -> jax.Array:
    """γ(τ): logits [M, J], tau [B] in [0, 1] -> t [B, M] (the CouplingCurve map as a pure function)."""
    count = logits.shape[-1]
    increments = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    knots = jnp.concatenate([jnp.zeros_like(increments[:, :1]), jnp.cumsum(increments, axis=-1)], axis=-1)
    knots = knots.at[:, -1].set(1.0)  # exact endpoint, whatever the float sum gives
    position = jnp.clip(jnp.asarray(tau, jnp.float32), 0.0, 1.0) * count
    index = jnp.clip(jnp.floor(position).astype(jnp.int32), 0, count - 1)
    frac = (position - index.astype(jnp.float32))[:, None]
    return (knots[:, index].T * (1.0 - frac) + knots[:, index + 1].T * frac)


class CouplingCurve:
    """A monotone coupling curve with J knots (module docstring). `logits` [M, J] are its parameters."""

    def __init__(self, logits: jax.Array | np.ndarray) -> None:
        logits = jnp.asarray(logits, jnp.float32)
        if logits.ndim != 2:
            raise ValueError(f"logits must be [M, J], got shape {list(logits.shape)}")
        check_int("knots", logits.shape[1], minimum=2)
        self.logits = logits

    @classmethod
    def diagonal(cls, knots: int = 16, modalities: int = 2) -> CouplingCurve:
        """The synchronous coupling γ(τ) = (τ, ..., τ)."""
        check_int("knots", knots, minimum=2)
        return cls(jnp.zeros((check_int("modalities", modalities), knots), jnp.float32))

    @property
    def knots(self) -> int:
        return int(self.logits.shape[1])

    def __call__(self, tau: jax.Array) -> jax.Array:
        """tau [B] -> t [B, M]."""
        return curve_times(self.logits, tau)

    def knot_values(self) -> jax.Array:
        """γ at τ = k / J, k = 0..J: [J + 1, M]."""
        return self(jnp.linspace(0.0, 1.0, self.knots + 1))

    @classmethod
    def fit_path(cls, points: np.ndarray, knots: int = 16) -> CouplingCurve:
        """The curve through a monotone path `points` [P, M] from 0 to 1 (e.g. a DP geodesic in [0, 1]^M).

        τ along the path is the mean of the times (monotone on a monotone path, 0 -> 1), so γ_x + γ_s = 2τ; the
        knot values are the path's times at τ = k / J (linear interpolation) and the logits the logs of their
        increments (an empty increment gets logit −30).
        """
        check_int("knots", knots, minimum=2)
        points = np.asarray(points, np.float64)
        if points.ndim != 2 or len(points) < 2:
            raise ValueError(f"points must be [P >= 2, M], got shape {list(points.shape)}")
        if np.any(np.diff(points, axis=0) < -1e-9):
            raise ValueError("points must be a monotone path (every time non-decreasing), got a decreasing step")
        tau = points.mean(axis=1)
        tau = (tau - tau[0]) / max(tau[-1] - tau[0], 1e-12)
        grid = np.linspace(0.0, 1.0, knots + 1)
        values = np.stack([np.interp(grid, tau, points[:, m]) for m in range(points.shape[1])], axis=0)
        increments = np.maximum(np.diff(values, axis=1), 0.0)
        logits = np.where(increments > 1e-12, np.log(np.maximum(increments, 1e-300)), _EMPTY_LOGIT)
        return cls(logits.astype(np.float32))


Surface = Callable[[jax.Array], jax.Array]  # points [P, 2] -> per-modality loss densities [2, P]


def path_cost(curve: Callable[[jax.Array], jax.Array], surface: Surface, points: int = 512) -> jax.Array:
    """C(γ) = ∫ ℓ_x(γ) dγ_x + ℓ_s(γ) dγ_s by the trapezoid rule on `points` values of τ: a scalar.

    `curve` maps tau [B] -> t [B, 2] (a CouplingCurve or any monotone path); `surface` maps points [P, 2] ->
    [2, P] (loss density of each modality at each point)."""
    check_int("points", points, minimum=2)
    times = curve(jnp.linspace(0.0, 1.0, points))
    density = surface(times)  # [2, P]
    steps = jnp.diff(times, axis=0).T  # [2, P - 1]
    return jnp.sum(0.5 * (density[:, 1:] + density[:, :-1]) * steps)


def path_moves(max_step: int) -> np.ndarray:
    """The lattice moves [Q, 2] (di, dj) with 0 <= di, dj <= max_step, not both 0."""
    check_int("max_step", max_step)
    moves = [(di, dj) for di in range(max_step + 1) for dj in range(max_step + 1) if di or dj]
    return np.asarray(moves, np.int32)


def _check_grid(cost: np.ndarray | jax.Array, path_objective: str) -> int:
    check_float_array("cost", cost, (None, None, 2), "[G, G, 2]")
    if cost.shape[0] != cost.shape[1] or cost.shape[0] < 2:
        raise ValueError(f"cost must be a square grid [G, G, 2] with G >= 2, got shape {list(cost.shape)}")
    check_choice("path_objective", path_objective, PATH_OBJECTIVES)
    return cost.shape[0]


def _edge(cost_from: np.ndarray, cost_to: np.ndarray, move: np.ndarray, spacing: float, objective: str):
    """Cost of one move: ℓ_x(mid)·Δt_x + ℓ_s(mid)·Δt_s, mid = the mean of the two endpoints' densities
    ("line_integral"), or the total loss at the node entered ("budgeted_sum", VOS's sum of visited grid losses)."""
    if objective == "budgeted_sum":
        return cost_to[..., 0] + cost_to[..., 1]
    mid = 0.5 * (cost_from + cost_to)
    return spacing * (mid[..., 0] * float(move[0]) + mid[..., 1] * float(move[1]))


def geodesic_dp_reference(cost: np.ndarray, max_step: int = 3, path_objective: str = "line_integral"
                          ) -> tuple[np.ndarray, float]:
    """NumPy reference: (the least-cost monotone path [L, 2] of grid indices (i, j) from (0, 0) to (G−1, G−1),
    its cost). cost [G, G, 2]: ℓ_x, ℓ_s at t_x = i / (G−1), t_s = j / (G−1)."""
    size = _check_grid(cost, path_objective)
    cost = np.asarray(cost, np.float64)
    moves, spacing = path_moves(max_step), 1.0 / (size - 1)
    total = np.full((size, size), np.inf)
    parent = np.zeros((size, size), np.int64)
    total[0, 0] = 0.0
    for i in range(size):
        for j in range(size):
            for index, move in enumerate(moves):
                a, b = i - move[0], j - move[1]
                if a < 0 or b < 0:
                    continue
                value = total[a, b] + _edge(cost[a, b], cost[i, j], move, spacing, path_objective)
                if value < total[i, j]:
                    total[i, j], parent[i, j] = value, index
    path, (i, j) = [(size - 1, size - 1)], (size - 1, size - 1)
    while (i, j) != (0, 0):
        i, j = i - moves[parent[i, j]][0], j - moves[parent[i, j]][1]
        path.append((i, j))
    return np.asarray(path[::-1], np.int32), float(total[-1, -1])


def geodesic_dp(cost: jax.Array, max_step: int = 3, path_objective: str = "line_integral"
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Jittable DP (same as `geodesic_dp_reference`): (path int32 [2G − 1, 2] of grid indices, padded after its
    end by repeating (G−1, G−1); its length int32; its cost). Nodes are relaxed in raster order, each from every
    move's predecessor (out-of-grid ones masked to +inf before the min)."""
    size = _check_grid(cost, path_objective)
    cost = jnp.asarray(cost, jnp.float32)
    moves = path_moves(max_step)
    spacing = 1.0 / (size - 1)
    edges = jnp.stack([_edge(jnp.roll(cost, tuple(m), axis=(0, 1)), cost, m, spacing, path_objective)
                       for m in moves], axis=-1)  # [G, G, Q]: the move into (i, j) from (i − di, j − dj)
    moves = jnp.asarray(moves)

    def relax(node, carry):
        total, parent = carry
        i, j = node // size, node % size
        a, b = i - moves[:, 0], j - moves[:, 1]
        inside = (a >= 0) & (b >= 0)
        candidate = jnp.where(inside, total[jnp.maximum(a, 0), jnp.maximum(b, 0)] + edges[i, j], jnp.inf)
        best = jnp.argmin(candidate)
        return total.at[i, j].set(candidate[best]), parent.at[i, j].set(best)

    total = jnp.full((size, size), jnp.inf).at[0, 0].set(0.0)
    total, parent = jax.lax.fori_loop(1, size * size, relax, (total, jnp.zeros((size, size), jnp.int32)))

    def back(carry, _):
        node, length = carry
        done = jnp.all(node == 0)
        previous = jnp.where(done, node, node - moves[parent[node[0], node[1]]])
        return (previous, length + (~done).astype(jnp.int32)), node

    last = jnp.array([size - 1, size - 1], jnp.int32)
    (_, steps), visited = jax.lax.scan(back, (last, jnp.int32(1)), None, length=2 * size - 1)
    # visited runs from the end to (0, 0) and then repeats (0, 0); reverse and pad with the end instead.
    order = jnp.arange(2 * size - 1)
    path = jnp.where((order < steps)[:, None], visited[jnp.clip(steps - 1 - order, 0, 2 * size - 2)], last)
    return path, steps, total[-1, -1]
