"""Episodes of an agent behind the delayed gymnax environment (`icml26zoo.rl.delays.delayed_env`), and the
transitions a model-based agent can learn from in hindsight. Pure `lax.scan` loops (RL does not use the shared
trainer); a RECONSTRUCTION of ACDA's setting (see `icml26zoo.rl.acda`).

Timing: before env step t the agent holds the observation s_τ, τ = max(t − o, 0), and the log entry of step
τ − 1 (valid when τ ≥ 1); it sends A_t; the layer applies a_t; the environment returns s_{max(t+1−o, 0)} and
the log of the step before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.rl.delays import LogEntry

__all__ = ["Episode", "hindsight_transitions", "run_episode"]


class Episode(NamedTuple):
    """One episode of T steps as the agent lived it."""

    rewards: jax.Array  # [T]
    obs_in: jax.Array  # [T, d_o] observation held when sending A_t
    obs_out: jax.Array  # [T, d_o] observation returned by step t
    matrices: jax.Array  # [T, h, d_a] packets sent (index = send time)
    log: LogEntry  # [T, ...] log entry returned by step t (of system step max(t + 1 − o, 0) − 1)
    log_valid: jax.Array  # [T] bool
    applied: jax.Array  # [T, d_a] what the layer really applied (ground truth, for checks only)


def run_episode(env: Any, env_params: Any, key: jax.Array, agent: Callable, agent_state: Any,
                length: int) -> Episode:
    """`length` steps of `agent(agent_state, t, obs, log, log_valid, key) -> (agent_state, matrix [h, d_a])`
    on the delayed environment `env` (its `step_env`, no auto-reset)."""
    k_reset, k_run = jax.random.split(key)
    obs, env_state = env.reset_env(k_reset, env_params)
    empty = jax.tree.map(lambda r: r[0], env_state.log_ring)

    def body(carry: tuple, inputs: tuple) -> tuple[tuple, tuple]:
        env_state, agent_state, obs, log, valid = carry
        t, k = inputs
        k_agent, k_env = jax.random.split(k)
        agent_state, matrix = agent(agent_state, t, obs, log, valid, k_agent)
        new_obs, env_state, reward, _, info = env.step_env(k_env, env_state, matrix, env_params)
        out = (reward, obs, new_obs, matrix, info["log"], info["log_valid"], info["applied"])
        return (env_state, agent_state, new_obs, info["log"], info["log_valid"]), out

    carry = (env_state, agent_state, obs, empty, jnp.bool_(False))
    steps = (jnp.arange(length, dtype=jnp.int32), jax.random.split(k_run, length))
    _, (rewards, obs_in, obs_out, matrices, log, valid, applied) = jax.lax.scan(body, carry, steps)
    return Episode(rewards, obs_in, obs_out, matrices, log, valid, applied)


def hindsight_transitions(episode: Episode, obs_delay: int) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(s_u [T, d_o], a_u [T, d_a], s_{u+1} [T, d_o], usable [T]) from what the agent saw: at step t ≥ o the
    returned observation is s_{t+1−o} and its log names the packet and row applied at u = t − o, so a_u =
    matrices[packet, row] (zero for the zero fallback). Steps t < o give no transition (usable 0)."""
    log = episode.log
    packet, row = jnp.clip(log.packet, 0, None), jnp.clip(log.row, 0, None)
    actions = jnp.where((log.row >= 0)[:, None], episode.matrices[packet, row], 0.0)
    t = jnp.arange(episode.rewards.shape[0])
    usable = (episode.log_valid & (t >= obs_delay)).astype(jnp.float32)
    return episode.obs_in, actions, episode.obs_out, usable
