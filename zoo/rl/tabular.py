"""Tabular periodic (target-network) Q-learning with a target-period schedule.

Paper: "The Role of Target Update Frequencies in Q-Learning" (Weissmann et al., ICML 2026, arXiv 2602.03911).

Outer iteration n freezes the target Q̄_n; each inner step k draws one transition (s_k, a_k, r_k, s'_k) from the
uniform behaviour distribution and takes an SGD step on ½ (Q(s_k, a_k) − y_k)², y_k = r_k + γ max_a' Q̄_n(s'_k, a'):

    Q(s_k, a_k) ← Q(s_k, a_k) − α_k [Q(s_k, a_k) − r_k − γ max_a' Q̄_n(s'_k, a')].

After K_n inner steps (the schedule's period) Q̄_{n+1} ← Q. The inner step size is a reconstruction (the
available text does not give it), both variants exposed: constant α_k = α_0 (decay_k0=None), or
α_k = α_0 / (1 + k / k_0) with k the inner step index, restarted at each sync. The decaying variant makes
the inner loop an averaging estimator of T Q̄_n, so its variance falls like 1 / K_n — the variance side of
the trade-off; the bias side is the γ-contraction per outer iteration, which short periods apply more often.

With K ≡ 1 and constant α this is ordinary asynchronous Q-learning (the target is always the current Q).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.rl.envs import FiniteMDP, sample_transitions
from icml26zoo.rl.schedules import GeometricTargetSchedule, SyncState


class QLearningTrace(NamedTuple):
    """Per-step outputs of a run of T steps (all shape [T]) and the final tables [S, A]."""

    error: jax.Array  # float32: ‖Q_t − Q*‖_∞ after step t (online table)
    target_error: jax.Array  # float32: ‖Q̄_t − Q*‖_∞ after step t
    synced: jax.Array  # bool: the target was synced after step t
    target_changed: jax.Array  # bool: Q̄ differs from its value before step t (only possible when synced)
    q: jax.Array  # float32 [S, A]: final online table
    q_target: jax.Array  # float32 [S, A]: final target table


def inner_step_size(k: jax.Array, step_size: float, decay_k0: float | None) -> jax.Array:
    """α_k for inner step k (int32, 0-based since the last sync): α_0 or α_0 / (1 + k / k_0). -> float32 scalar."""
    if decay_k0 is None:
        return jnp.float32(step_size)
    return jnp.float32(step_size) / (1.0 + k.astype(jnp.float32) / jnp.float32(decay_k0))


def _validate(num_steps: int, step_size: float, decay_k0: float | None) -> None:
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if not (0.0 < step_size <= 1.0):
        raise ValueError(f"step_size must lie in (0, 1], got {step_size!r}")
    if decay_k0 is not None and not decay_k0 > 0:
        raise ValueError(f"decay_k0 must be > 0 or None, got {decay_k0!r}")


@functools.partial(jax.jit, static_argnames=("schedule", "gamma", "step_size", "decay_k0"))
def _run(
    transitions: tuple[jax.Array, ...],
    q_init: jax.Array,
    q_star: jax.Array,
    *,
    schedule: GeometricTargetSchedule,
    gamma: float,
    step_size: float,
    decay_k0: float | None,
) -> QLearningTrace:
    s, a, r, s_next = transitions

    def body(carry: tuple, x: tuple[jax.Array, ...]) -> tuple[tuple, tuple[jax.Array, ...]]:
        q, q_target, sync = carry
        s_k, a_k, r_k, sn_k = x
        alpha = inner_step_size(sync.since_sync, step_size, decay_k0)
        # The regression target uses the frozen table only: this is what separates periodic Q-learning
        # from plain Q-learning, and what makes each outer iteration an (inexact) Bellman operator step.
        y = r_k + jnp.float32(gamma) * jnp.max(q_target[sn_k])
        q = q.at[s_k, a_k].add(-alpha * (q[s_k, a_k] - y))
        new_target, sync, synced = schedule.maybe_sync(q, q_target, sync)
        out = (
            jnp.max(jnp.abs(q - q_star)),
            jnp.max(jnp.abs(new_target - q_star)),
            synced,
            jnp.any(new_target != q_target),
        )
        return (q, new_target, sync), out

    init = (q_init, q_init, SyncState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)))
    (q, q_target, _), (err, terr, synced, changed) = jax.lax.scan(body, init, (s, a, r, s_next))
    return QLearningTrace(err, terr, synced, changed, q, q_target)


def periodic_q_learning(
    mdp: FiniteMDP,
    schedule: GeometricTargetSchedule,
    key: jax.Array,
    num_steps: int,
    q_star: np.ndarray,
    *,
    step_size: float = 1.0,
    decay_k0: float | None = None,
    q_init: jax.Array | None = None,
) -> QLearningTrace:
    """Runs `num_steps` inner steps of periodic Q-learning on `mdp`, jitted as one `lax.scan`.

    schedule: the target-period schedule (K_n); key: PRNG key for the transitions; q_star [S, A]: the true Q*
    (from `value_iteration`) against which ‖Q_t − Q*‖_∞ is traced; step_size α_0 ∈ (0, 1]; decay_k0: k_0 of
    α_k = α_0 / (1 + k / k_0) (None: constant α_0); q_init [S, A] (default zeros; the target starts equal).
    All transitions are drawn up front ([T] int32/float32 arrays), so memory is O(T).
    """
    _validate(num_steps, step_size, decay_k0)
    shape = (mdp.num_states, mdp.num_actions)
    q0 = jnp.zeros(shape, jnp.float32) if q_init is None else jnp.asarray(q_init, jnp.float32)
    if q0.shape != shape:
        raise ValueError(f"q_init must have shape {shape}, got {q0.shape}")
    transitions = sample_transitions(mdp, key, num_steps)
    return _run(
        transitions, q0, jnp.asarray(q_star, jnp.float32),
        schedule=schedule, gamma=mdp.gamma, step_size=float(step_size),
        decay_k0=None if decay_k0 is None else float(decay_k0),
    )


def steps_to_reach(error: np.ndarray | jax.Array, eps: float) -> int | None:
    """First 1-based step t from which ‖Q − Q*‖_∞ stays ≤ eps for the rest of the run; None if it never does.

    "Stays" rather than "first touches" because within an inner loop the online error can dip below eps and
    bounce back out; the sample count the paper's theory bounds is the one after which the error is small.
    """
    err = np.asarray(error)
    above = np.nonzero(err > eps)[0]
    if above.size == 0:
        return 1
    last = int(above[-1])
    return None if last == err.size - 1 else last + 2
