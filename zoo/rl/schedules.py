"""Target-network update-period schedules for periodic Q-learning.

Paper: "The Role of Target Update Frequencies in Q-Learning" (Weissmann et al., ICML 2026, arXiv 2602.03911).

Periodic Q-learning is a nested optimisation: outer iteration n freezes a target Q̄_n and runs an inner loop
of K_n SGD steps on the regression ½ E[(Q(s, a) − r − γ max_a' Q̄_n(s', a'))²]; then Q̄_{n+1} ← Q. The
schedule is the sequence of inner-loop lengths (periods) K_n, counted in gradient steps.

- constant (classic DQN hard update):  K_n ≡ K, syncs at steps K, 2K, 3K, ...
- geometric / adaptive (the paper's near-optimal schedule):  K_n = min(K_max, ⌈K_0 · r^n⌉),  r = γ^{−2/3}.

Direction: the *period* grows by r > 1 per outer iteration, so the update *frequency* 1/K_n falls
geometrically (some summaries of the paper word it the other way round; the formula decides). With r = 1
the geometric schedule is exactly the constant one.

`period(n)` is a pure function of the outer iteration n (jit-friendly, int32). `maybe_sync` is the
DQN-style bookkeeping: after each gradient step, steps_since_sync += 1; once it reaches K_n the target
becomes a hard copy of the online parameters, n += 1, steps_since_sync = 0. It is `optax.periodic_update`
with a period that varies with n.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_int, check_interval


class SyncState(NamedTuple):
    """Where a run stands in the schedule: both int32 scalars."""

    outer: jax.Array  # n: number of target syncs done so far (the outer iteration being run)
    since_sync: jax.Array  # gradient steps taken since the last sync (inner step k of outer iteration n)


@dataclasses.dataclass(frozen=True)
class GeometricTargetSchedule:
    """K_n = min(K_max, ⌈K_0 · ratio^n⌉) gradient steps between target syncs.

    k0: K_0 ≥ 1, the first period. ratio: r ≥ 1 (the theory default is γ^{−2/3}, see `adaptive_schedule`;
    r < 1 would shrink the period, the wrong direction). k_max: the cap, ≥ k0.
    """

    k0: int
    ratio: float = 1.0
    k_max: int = 100_000

    def __post_init__(self) -> None:
        k0 = check_int("k0", self.k0)
        check_interval("ratio (the period grows)", self.ratio, 1, math.inf, closed="left")
        check_int("k_max (from k0 to the int32 maximum)", self.k_max, minimum=k0, maximum=2**31 - 1)

    def period(self, n: jax.Array | int) -> jax.Array:
        """K_n for outer iteration n (int scalar or array, any shape) -> int32 of the same shape, in [k0, k_max].

        Evaluated as exp(n · log r) in float32 and clipped to k_max *before* the ceiling so large n cannot
        overflow int32. For r = 1, log r = 0 exactly, so every period is exactly k0.
        """
        n = jnp.asarray(n).astype(jnp.float32)
        growth = jnp.exp(n * jnp.float32(math.log(self.ratio)))
        # At n = 0 or r = 1 the product is an exact integer in float32, so the ceiling cannot round it up.
        raw = jnp.minimum(jnp.float32(self.k0) * growth, jnp.float32(self.k_max))
        return jnp.clip(jnp.ceil(raw), self.k0, self.k_max).astype(jnp.int32)

    def sync_steps(self, num_steps: int) -> np.ndarray:
        """The 1-based gradient-step counts t ≤ num_steps after which the target is synced (host numpy, int64).

        Sync n (0-based) happens after step K_0 + ... + K_n. For r = 1 these are the multiples of K_0.
        """
        steps, total, n = [], 0, 0
        while True:
            total += int(self.period(n))
            if total > num_steps:
                return np.asarray(steps, dtype=np.int64)
            steps.append(total)
            n += 1

    def init(self) -> SyncState:
        return SyncState(outer=jnp.zeros((), jnp.int32), since_sync=jnp.zeros((), jnp.int32))

    def maybe_sync(self, online: Any, target: Any, state: SyncState) -> tuple[Any, SyncState, jax.Array]:
        """Counts one gradient step; hard-copies `online` into `target` when the current period is complete.

        online, target: pytrees of identical structure. Returns (new target, new SyncState, synced bool[]).
        Uses `jnp.where` on a scalar boolean (no Python control flow) so it runs under jit / lax.scan.
        """
        since = state.since_sync + 1
        synced = since >= self.period(state.outer)
        new_target = jax.tree.map(lambda o, t: jnp.where(synced, o, t), online, target)
        new_state = SyncState(
            outer=state.outer + synced.astype(jnp.int32),
            since_sync=jnp.where(synced, jnp.zeros_like(since), since),
        )
        return new_target, new_state, synced


def constant_schedule(period: int) -> GeometricTargetSchedule:
    """K_n ≡ period: the classic fixed target-update period (ratio 1, cap = period)."""
    check_int("period", period)
    return GeometricTargetSchedule(k0=int(period), ratio=1.0, k_max=int(period))


def adaptive_ratio(gamma: float) -> float:
    """The paper's near-optimal growth factor r = γ^{−2/3} (γ = 0.9 → 1.0728; γ = 0.99 → 1.0067)."""
    if not (0.0 < gamma < 1.0):
        raise ValueError(f"gamma must lie in (0, 1), got {gamma!r}")
    return float(gamma ** (-2.0 / 3.0))


def adaptive_schedule(
    k0: int, gamma: float, k_max: int = 100_000, ratio: float | None = None
) -> GeometricTargetSchedule:
    """K_n = min(K_max, ⌈K_0 · γ^{−2n/3}⌉) (the paper's schedule); `ratio` overrides γ^{−2/3}.

    The ratio stays a hyperparameter because for γ near 1 the theory's
    growth is tiny; passing ratio=None uses the theory default.
    """
    r = adaptive_ratio(gamma) if ratio is None else float(ratio)
    return GeometricTargetSchedule(k0=k0, ratio=r, k_max=k_max)
