"""ACDA's interaction layer for unobservable random action delays, as pure functions under `jit`, and a gymnax
wrapper that puts it between an agent and any gymnax environment.

Paper: "Adaptive Reinforcement Learning for Unobservable Random Delays" (Wikman, Proutiere, Broman; ICML 2026,
arXiv 2506.14411). No official code: the mechanics below are a RECONSTRUCTION from the abstract.

- At agent step t the agent sends a packet P_t = (t, A_t), A_t [h, d_a]: row k is the action meant for system
  time t + k.
- The network delivers P_t at time t + δ_t (δ_t ≥ 0, unobserved when acting) or drops it.
- At system time s the layer first receives every packet arriving at s, keeps the newest one received so far
  (largest send time t*; a packet older than the one kept never replaces it, whatever order they arrive in),
  and applies a_s = A_{t*}[s − t*] if s − t* < h; otherwise a fallback: the kept packet's last row
  ("last_row") or the zero action ("zero"); before any packet arrives, zero.
- It reports, with the observation, which packet (send time) and row it applied at each step and the delays
  of the packets that arrived, so the applied actions and realised delays are known in hindsight.

Packets are held in a ring of max_delay + 1 slots: a packet sent at t arrives by t + max_delay, before its slot
is reused at t + max_delay + 1. Within one step the order is send, receive, apply, so a zero delay acts at once.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from icml26zoo.validation import check_choice, check_int, check_non_negative, check_unit_interval

__all__ = ["FALLBACKS", "NEVER", "DelayConfig", "LayerState", "LogEntry", "check_delays", "delayed_env",
           "init_layer", "interaction_step", "reconstruct_actions", "run_interaction", "sample_delays"]

FALLBACKS = ("last_row", "zero")
NEVER = np.iinfo(np.int32).max  # arrival time of a dropped packet


class DelayConfig(NamedTuple):
    """The delay process and the packet format (spec: geometric δ with mean 2 truncated at 10, 5 % loss, h = 8,
    observation delay 1). Hashable, so it can be static under `jit`."""

    horizon: int = 8
    mean_delay: float = 2.0
    max_delay: int = 10
    loss_prob: float = 0.05
    obs_delay: int = 1
    fallback: str = "last_row"

    def check(self) -> DelayConfig:
        """ValueError naming the first field out of range; returns self."""
        check_int("horizon", self.horizon)
        check_non_negative("mean_delay", self.mean_delay, finite=True)
        check_int("max_delay", self.max_delay, minimum=0)
        check_unit_interval("loss_prob", self.loss_prob)
        check_int("obs_delay", self.obs_delay, minimum=0)
        check_choice("fallback", self.fallback, FALLBACKS)
        return self


class LayerState(NamedTuple):
    """Packets in flight (ring of M = max_delay + 1 slots) and the newest packet received."""

    send_time: jax.Array  # [M] int32, −1 = empty slot
    arrival: jax.Array  # [M] int32, NEVER = dropped
    matrices: jax.Array  # [M, h, d_a]
    newest: jax.Array  # [] int32 send time of the newest packet received, −1 = none yet
    newest_matrix: jax.Array  # [h, d_a]


class LogEntry(NamedTuple):
    """What the layer reports about system step s (the hindsight log)."""

    packet: jax.Array  # [] int32 send time of the packet whose row was applied, −1 = none (zero action)
    row: jax.Array  # [] int32 row applied, −1 = the zero action
    fallback: jax.Array  # [] bool: the row was a fallback (s − t* ≥ h or no packet)
    arrived_delays: jax.Array  # [max_delay + 1] int32: how many packets arrived at s with each delay


def init_layer(horizon: int, action_dim: int, max_delay: int) -> LayerState:
    """An empty layer for packets of shape [horizon, action_dim] and delays up to max_delay."""
    check_int("horizon", horizon)
    check_int("action_dim", action_dim)
    check_int("max_delay", max_delay, minimum=0)
    slots = max_delay + 1
    return LayerState(send_time=jnp.full((slots,), -1, jnp.int32), arrival=jnp.full((slots,), NEVER, jnp.int32),
                      matrices=jnp.zeros((slots, horizon, action_dim)), newest=jnp.int32(-1),
                      newest_matrix=jnp.zeros((horizon, action_dim)))


def interaction_step(state: LayerState, s: jax.Array, matrix: jax.Array, delay: jax.Array, dropped: jax.Array,
                     *, fallback: str = "last_row") -> tuple[LayerState, jax.Array, LogEntry]:
    """System step s: send the agent's packet (s, matrix [h, d_a]) with `delay` (int, ≥ 0, ≤ max_delay) unless
    `dropped`, receive what arrives at s, apply. Returns (state, applied action [d_a], log entry)."""
    slots, horizon = state.send_time.shape[0], matrix.shape[0]
    s = jnp.asarray(s, jnp.int32)
    slot = s % slots
    arrival = jnp.where(dropped, NEVER, s + jnp.asarray(delay, jnp.int32))
    state = state._replace(send_time=state.send_time.at[slot].set(s), arrival=state.arrival.at[slot].set(arrival),
                           matrices=state.matrices.at[slot].set(matrix))
    now = (state.send_time >= 0) & (state.arrival == s)
    ages = jnp.clip(s - state.send_time, 0, slots - 1)
    arrived_delays = jnp.zeros(slots, jnp.int32).at[ages].add(now.astype(jnp.int32))
    # The newest-packet rule: only a packet sent after the one kept may replace it.
    fresher = (state.send_time >= 0) & (state.arrival <= s) & (state.send_time > state.newest)
    best = jnp.argmax(jnp.where(fresher, state.send_time, -1))
    take = jnp.any(fresher)
    state = state._replace(newest=jnp.where(take, state.send_time[best], state.newest),
                           newest_matrix=jnp.where(take, state.matrices[best], state.newest_matrix))
    k = s - state.newest
    have = state.newest >= 0
    in_range = have & (k < horizon)
    keep_last = have & jnp.bool_(fallback == "last_row")
    row = jnp.where(in_range, k, jnp.where(keep_last, horizon - 1, -1)).astype(jnp.int32)
    applied = jnp.where(row >= 0, state.newest_matrix[jnp.clip(row, 0, horizon - 1)], 0.0)
    entry = LogEntry(packet=jnp.where(row >= 0, state.newest, -1).astype(jnp.int32), row=row,
                     fallback=~in_range, arrived_delays=arrived_delays)
    return state, applied, entry


def check_delays(delays: Any, max_delay: int | None = None) -> None:
    """ValueError when concrete `delays` hold a negative value (or one above max_delay); tracers pass."""
    if isinstance(delays, jax.core.Tracer):
        return
    values = np.asarray(delays)
    if values.size and values.min() < 0:
        raise ValueError(f"delays must be integers >= 0, got a negative delay {int(values.min())}")
    if max_delay is not None and values.size and values.max() > max_delay:
        raise ValueError(f"delays must be <= max_delay={max_delay}, got {int(values.max())}")


def run_interaction(matrices: jax.Array, delays: jax.Array, dropped: jax.Array, *, max_delay: int | None = None,
                    fallback: str = "last_row") -> tuple[jax.Array, LogEntry]:
    """Runs the layer over T steps of given packets: matrices [T, h, d_a], delays [T] int, dropped [T] bool ->
    (applied actions [T, d_a], log with fields [T] / [T, max_delay + 1]). max_delay defaults to max(delays)."""
    if matrices.ndim != 3 or min(matrices.shape) < 1:
        raise ValueError(f"matrices must have shape [T, h, d_a] with T, h (horizon), d_a >= 1, got {matrices.shape}")
    check_choice("fallback", fallback, FALLBACKS)
    check_delays(delays, max_delay)
    if max_delay is None:
        max_delay = int(np.max(np.asarray(delays))) if np.size(delays) else 0
    return _run(matrices, jnp.asarray(delays, jnp.int32), jnp.asarray(dropped, bool), max_delay, fallback)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _run(matrices: jax.Array, delays: jax.Array, dropped: jax.Array, max_delay: int,
         fallback: str) -> tuple[jax.Array, LogEntry]:
    state = init_layer(matrices.shape[1], matrices.shape[2], max_delay)

    def body(state: LayerState, inputs: tuple) -> tuple[LayerState, tuple]:
        s, matrix, delay, drop = inputs
        state, applied, entry = interaction_step(state, s, matrix, delay, drop, fallback=fallback)
        return state, (applied, entry)

    steps = jnp.arange(matrices.shape[0], dtype=jnp.int32)
    _, (applied, log) = jax.lax.scan(body, state, (steps, matrices, delays, dropped))
    return applied, log


def reconstruct_actions(sent: jax.Array, log: LogEntry) -> jax.Array:
    """The applied actions [T, d_a] from the agent's own sent packets [T, h, d_a] (indexed by send time) and
    the hindsight log alone: sent[packet, row], zero where no row was applied."""
    packet, row = jnp.clip(log.packet, 0, None), jnp.clip(log.row, 0, None)
    return jnp.where((log.row >= 0)[:, None], sent[packet, row], 0.0)


def sample_delays(key: jax.Array, shape: tuple[int, ...], config: DelayConfig) -> tuple[jax.Array, jax.Array]:
    """Delays δ ~ Geometric on {0, 1, ...} with mean `mean_delay`, truncated at `max_delay`, and packet losses
    with probability `loss_prob`: (delays int32, dropped bool), both of `shape`."""
    config.check()
    k_delay, k_drop = jax.random.split(key)
    stay = config.mean_delay / (1.0 + config.mean_delay)  # P(δ ≥ k + 1 | δ ≥ k): mean stay / (1 − stay)
    u = jax.random.uniform(k_delay, shape, minval=1e-12, maxval=1.0)
    delay = jnp.floor(jnp.log(u) / jnp.log(stay)) if stay > 0 else jnp.zeros(shape)
    delays = jnp.minimum(delay, config.max_delay).astype(jnp.int32)
    return delays, jax.random.bernoulli(k_drop, config.loss_prob, shape)


# ------------------------------------------------------------------------------------------------ gymnax wrapper


@struct.dataclass
class DelayedState:
    """The wrapped environment's state, the layer, the system time and the last obs_delay + 1 (observation,
    log entry) pairs (ring, newest at index time % (obs_delay + 1))."""

    inner: Any
    layer: LayerState
    obs_ring: jax.Array  # [o + 1, d_o]
    log_ring: LogEntry  # fields [o + 1, ...]
    time: int


@functools.cache
def _delayed_class() -> type:
    try:
        from gymnax.environments import environment
    except ImportError as error:
        raise ImportError("the delayed environment needs gymnax: pip install 'icml26zoo[rl]'") from error

    class Delayed(environment.Environment):
        """A gymnax environment behind the interaction layer: the action is a packet A_t [h, d_a]; the
        observation is the inner one from obs_delay steps ago, and `info["log"]` the layer's log entry of
        that same step (both reach the agent together). Delays and losses are drawn per packet from the
        step key."""

        def __init__(self, inner: Any, config: DelayConfig) -> None:
            super().__init__()
            self.inner, self.config = inner, config.check()

        def step_env(self, key: jax.Array, state: DelayedState, action: jax.Array,
                     params: Any) -> tuple[jax.Array, DelayedState, jax.Array, jax.Array, dict]:
            cfg = self.config
            k_delay, k_env = jax.random.split(key)
            delay, dropped = sample_delays(k_delay, (), cfg)
            layer, applied, entry = interaction_step(state.layer, state.time, action, delay, dropped,
                                                     fallback=cfg.fallback)
            obs, inner, reward, terminated, _ = self.inner.step_env(k_env, state.inner, applied, params)
            t = state.time + 1
            ring = cfg.obs_delay + 1
            obs_ring = state.obs_ring.at[t % ring].set(obs)
            log_ring = jax.tree.map(lambda r, e: r.at[(t - 1) % ring].set(e), state.log_ring, entry)
            new = DelayedState(inner=inner, layer=layer, obs_ring=obs_ring, log_ring=log_ring, time=t)
            seen = jnp.maximum(t - cfg.obs_delay, 0)
            info = {"applied": applied, "delay": delay, "dropped": dropped,
                    "log": jax.tree.map(lambda r: r[(seen - 1) % ring], log_ring), "log_valid": seen >= 1}
            return obs_ring[seen % ring], new, reward, terminated, info

        def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, DelayedState]:
            obs, inner = self.inner.reset_env(key, params)
            cfg, ring = self.config, self.config.obs_delay + 1
            act_dim = self.inner.action_space(params).shape[0]
            layer = init_layer(cfg.horizon, act_dim, cfg.max_delay)
            empty = LogEntry(packet=jnp.int32(-1), row=jnp.int32(-1), fallback=jnp.bool_(True),
                             arrived_delays=jnp.zeros(cfg.max_delay + 1, jnp.int32))
            log_ring = jax.tree.map(lambda e: jnp.stack([e] * ring), empty)
            state = DelayedState(inner=inner, layer=layer, obs_ring=jnp.stack([obs] * ring), log_ring=log_ring,
                                 time=0)
            return obs, state

        def is_truncated(self, state: DelayedState, params: Any) -> jax.Array:
            return self.inner.is_truncated(state.inner, params)

        def observation_space(self, params: Any) -> Any:
            return self.inner.observation_space(params)

        def action_space(self, params: Any) -> Any:
            from gymnax.environments import spaces
            inner = self.inner.action_space(params)
            return spaces.Box(inner.low, inner.high, (self.config.horizon, inner.shape[0]), jnp.float32)

    return Delayed


def delayed_env(inner: Any, config: DelayConfig | None = None) -> Any:
    """`inner` (a gymnax environment) behind the interaction layer with `config`'s delays (the spec's
    defaults when None; needs `[rl]`)."""
    return _delayed_class()(inner, DelayConfig() if config is None else config)
