"""DQN on gymnax's CartPole-v1 with a scheduled hard target update (constant or adaptive period).

Paper: "The Role of Target Update Frequencies in Q-Learning" (Weissmann et al., ICML 2026, arXiv 2602.03911).

One environment, one `lax.scan` over environment steps t = 0 .. T−1, all jitted:

1. act ε-greedily with the online network (ε falls linearly from `eps_start` to `eps_end` over the first
   `explore_fraction` · T steps), step the environment (gymnax resets it automatically at episode end);
2. write (o, a, r, o', terminated) into a circular replay buffer of `buffer_size` rows, where o' is the true
   next observation (gymnax's `final_observation`, not the reset one) and truncation at 500 steps does not
   cut the bootstrap;
3. from step `learning_starts` on, one Adam step on the Huber TD loss of a uniform batch from the buffer,
   target y = r + γ (1 − terminated) max_a' Q_θ̄(o', a'), then `schedule.maybe_sync` counts the gradient step
   and hard-copies θ into θ̄ when the period K_n is complete. The schedule therefore counts gradient steps,
   not environment steps (they differ by `learning_starts`).

The trace records the per-step reward and episode ends, from which `episode_returns` recovers the
undiscounted return of every finished episode; `greedy_returns` evaluates the final network greedily.

gymnax is optional (the `[rl]` extra) and imported only when a run starts.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.rl.dqn import QNetwork
from icml26zoo.rl.schedules import GeometricTargetSchedule
from icml26zoo.validation import check_int, check_interval, check_positive, check_probability

ENV_NAME = "CartPole-v1"


def make_cartpole() -> tuple[Any, Any]:
    """gymnax's CartPole-v1 (env, params); ImportError naming the `[rl]` extra when gymnax is missing."""
    try:
        import gymnax
    except ImportError as error:
        raise ImportError("the CartPole DQN needs gymnax: pip install 'icml26zoo[rl]'") from error
    return gymnax.make(ENV_NAME)


class CartPoleTrace(NamedTuple):
    """Per-environment-step outputs of T steps (shape [T]) and the final online parameters."""

    reward: jax.Array  # float32: reward received at step t
    done: jax.Array  # bool: an episode ended at step t (terminated or truncated)
    loss: jax.Array  # float32: TD loss of the gradient step at t (0 before learning_starts)
    synced: jax.Array  # bool: θ̄ ← θ after step t
    params: Any  # final online parameters (pure dict)


class DQNConfig(NamedTuple):
    """Hyperparameters of `train_cartpole_dqn` (hashable: the jitted loop is cached per config)."""

    num_steps: int = 20_000
    batch_size: int = 64
    buffer_size: int = 10_000
    learning_starts: int = 1_000
    learning_rate: float = 1e-3
    gamma: float = 0.99
    hidden: int = 64
    eps_start: float = 1.0
    eps_end: float = 0.05
    explore_fraction: float = 0.3
    huber_delta: float = 1.0


def check_config(config: DQNConfig) -> None:
    """ValueError naming the first field out of range."""
    for name in ("num_steps", "batch_size", "buffer_size", "hidden"):
        check_int(name, getattr(config, name))
    check_int("learning_starts", config.learning_starts, minimum=0)
    check_interval("gamma", config.gamma, 0, 1, closed="neither")
    check_positive("learning_rate", config.learning_rate)
    for name in ("eps_start", "eps_end"):
        check_probability(name, getattr(config, name))
    check_interval("explore_fraction", config.explore_fraction, 0, 1, closed="right")
    check_positive("huber_delta", config.huber_delta)


def epsilon(t: jax.Array, config: DQNConfig) -> jax.Array:
    """ε at environment step t: linear from eps_start to eps_end over explore_fraction · num_steps steps."""
    span = max(1.0, config.explore_fraction * config.num_steps)
    frac = jnp.minimum(t.astype(jnp.float32) / jnp.float32(span), 1.0)
    return jnp.float32(config.eps_start) + frac * jnp.float32(config.eps_end - config.eps_start)


@functools.partial(jax.jit, static_argnames=("graphdef", "schedule", "config"))
def _run(params: dict, key: jax.Array, *, graphdef: nnx.GraphDef, schedule: GeometricTargetSchedule,
         config: DQNConfig) -> CartPoleTrace:
    env, env_params = make_cartpole()
    optimizer = optax.adam(config.learning_rate)
    obs_dim = env.observation_space(env_params).shape[0]

    def q_values(p: dict, obs: jax.Array) -> jax.Array:
        return nnx.merge(graphdef, p)(obs)  # [..., 4] -> [..., 2]

    def loss_fn(p: dict, target_p: dict, batch: tuple[jax.Array, ...]) -> jax.Array:
        o, a, r, o_next, term = batch
        q_sa = jnp.take_along_axis(q_values(p, o), a[:, None], axis=1)[:, 0]
        q_next = jax.lax.stop_gradient(jnp.max(q_values(target_p, o_next), axis=1))
        y = r + jnp.float32(config.gamma) * (1.0 - term.astype(jnp.float32)) * q_next
        return jnp.mean(optax.losses.huber_loss(q_sa, y, delta=config.huber_delta))

    def learn(args: tuple) -> tuple:
        p, target_p, opt_state, sync, buffer, size, k = args
        idx = jax.random.randint(k, (config.batch_size,), 0, size)
        loss, grads = jax.value_and_grad(loss_fn)(p, target_p, tuple(b[idx] for b in buffer))
        updates, opt_state = optimizer.update(grads, opt_state, p)
        p = optax.apply_updates(p, updates)
        target_p, sync, synced = schedule.maybe_sync(p, target_p, sync)
        return p, target_p, opt_state, sync, loss, synced

    def skip(args: tuple) -> tuple:
        p, target_p, opt_state, sync, _, _, _ = args
        return p, target_p, opt_state, sync, jnp.float32(0.0), jnp.bool_(False)

    def body(carry: tuple, t: jax.Array) -> tuple[tuple, tuple[jax.Array, ...]]:
        p, target_p, opt_state, sync, buffer, obs, env_state = carry
        k_act, k_explore, k_env, k_batch = jax.random.split(jax.random.fold_in(key, t), 4)
        greedy = jnp.argmax(q_values(p, obs)).astype(jnp.int32)
        explore = jax.random.uniform(k_explore) < epsilon(t, config)
        action = jnp.where(explore, jax.random.randint(k_act, (), 0, 2, dtype=jnp.int32), greedy)
        obs_next, env_state, reward, terminated, truncated, info = env.step(k_env, env_state, action, env_params)
        slot = t % config.buffer_size
        row = (obs, action, reward.astype(jnp.float32), info["final_observation"], terminated)
        buffer = tuple(b.at[slot].set(v) for b, v in zip(buffer, row, strict=True))
        size = jnp.minimum(t + 1, config.buffer_size)
        p, target_p, opt_state, sync, loss, synced = jax.lax.cond(
            t >= config.learning_starts, learn, skip, (p, target_p, opt_state, sync, buffer, size, k_batch))
        done = jnp.logical_or(terminated, truncated)
        return (p, target_p, opt_state, sync, buffer, obs_next, env_state), (reward, done, loss, synced)

    cap = config.buffer_size
    buffer = (jnp.zeros((cap, obs_dim), jnp.float32), jnp.zeros((cap,), jnp.int32), jnp.zeros((cap,), jnp.float32),
              jnp.zeros((cap, obs_dim), jnp.float32), jnp.zeros((cap,), jnp.bool_))
    obs, env_state = env.reset(jax.random.fold_in(key, config.num_steps), env_params)
    init = (params, params, optimizer.init(params), schedule.init(), buffer, obs, env_state)
    (p, *_), (reward, done, loss, synced) = jax.lax.scan(body, init, jnp.arange(config.num_steps, dtype=jnp.int32))
    return CartPoleTrace(reward.astype(jnp.float32), done, loss, synced, p)


def init_params(key: jax.Array, hidden: int) -> tuple[nnx.GraphDef, dict]:
    """The Q-network (4 observations -> H -> H -> 2 actions) split into (graphdef, pure parameter dict)."""
    model = QNetwork(4, 2, hidden, rngs=nnx.Rngs(params=key))
    graphdef, state = nnx.split(model, nnx.Param)
    return graphdef, nnx.to_pure_dict(state)


def train_cartpole_dqn(schedule: GeometricTargetSchedule, key: jax.Array,
                       config: DQNConfig | None = None) -> CartPoleTrace:
    """Runs `config.num_steps` environment steps of DQN on CartPole-v1; `key` seeds init, exploration and
    environment, so a key gives the same trace every time. The target starts equal to the online net.
    config: the hyperparameters (default `DQNConfig()`)."""
    config = DQNConfig() if config is None else config
    check_config(config)
    make_cartpole()  # fail with the [rl] hint before tracing
    init_key, run_key = jax.random.split(key)
    graphdef, params = init_params(init_key, config.hidden)
    # gymnax and optax mix weak Python scalars with int32/float32 arrays; strict promotion would reject them.
    with jax.numpy_dtype_promotion("standard"):
        return _run(params, run_key, graphdef=graphdef, schedule=schedule, config=config)


def episode_returns(trace: CartPoleTrace) -> tuple[np.ndarray, np.ndarray]:
    """(end step [E] int64, undiscounted return [E] float64) of every episode that finished in the trace."""
    reward = np.asarray(trace.reward, np.float64)
    done = np.asarray(trace.done)
    ends = np.nonzero(done)[0]
    cumulative = np.cumsum(reward)
    starts = np.concatenate([[0.0], cumulative[ends[:-1]]]) if ends.size else np.zeros(0)
    return ends.astype(np.int64), cumulative[ends] - starts


@functools.partial(jax.jit, static_argnames=("graphdef", "episodes"))
def _greedy(params: dict, key: jax.Array, *, graphdef: nnx.GraphDef, episodes: int) -> jax.Array:
    env, env_params = make_cartpole()
    model = nnx.merge(graphdef, params)

    def one(k: jax.Array) -> jax.Array:
        obs, state = env.reset(k, env_params)

        def body(carry: tuple, _: None) -> tuple[tuple, None]:
            obs, state, total, alive = carry
            action = jnp.argmax(model(obs)).astype(jnp.int32)
            obs, state, reward, terminated, truncated, _ = env.step(k, state, action, env_params)
            total = total + jnp.where(alive, reward, 0.0)
            return (obs, state, total, jnp.logical_and(alive, ~jnp.logical_or(terminated, truncated))), None

        init = (obs, state, jnp.float32(0.0), jnp.bool_(True))
        (_, _, total, _), _ = jax.lax.scan(body, init, None, length=env_params.max_steps_in_episode)
        return total

    return jax.vmap(one)(jax.random.split(key, episodes))


def greedy_returns(params: dict, key: jax.Array, *, hidden: int, episodes: int = 10) -> np.ndarray:
    """Undiscounted returns [episodes] of the greedy policy of `params` (at most 500 each)."""
    graphdef, _ = init_params(jax.random.key(0), hidden)
    with jax.numpy_dtype_promotion("standard"):
        return np.asarray(_greedy(params, key, graphdef=graphdef, episodes=episodes), np.float64)
