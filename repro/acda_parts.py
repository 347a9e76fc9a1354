"""One seed of the ACDA experiment (`repro/acda.py`): explore the delayed point mass with random action
matrices, fit the one-step model on the hindsight log, fit the policy through the model, then run the same
policy as a naive agent, as ACDA's action-matrix agent, and undelayed."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.rl import acda
from icml26zoo.rl.acda_run import hindsight_transitions, run_episode
from icml26zoo.rl.control_envs import PointMassTask, point_mass_env, point_mass_reward
from icml26zoo.rl.delays import DelayConfig, delayed_env

AGENTS = ("naive", "acda", "undelayed")
UNDELAYED = DelayConfig(mean_delay=0.0, loss_prob=0.0, obs_delay=0)
MODEL_BATCH = 128
POLICY_BATCH = 16


@functools.cache
def environments(delays: DelayConfig, length: int) -> tuple:
    """(delayed env, undelayed env) around one point-mass gymnax env (cached: jitted loops key on them); the
    task goes in the env params."""
    inner, _ = point_mass_env(PointMassTask(jnp.zeros(2), jnp.eye(2)), episode_length=length)
    return delayed_env(inner, delays), delayed_env(inner, UNDELAYED._replace(horizon=delays.horizon))


@functools.cache
def _random_agent(horizon: int, dim: int) -> object:
    """Explores with uniform random packets [horizon, dim] (cached per shape, like the other agents)."""

    def agent(state: tuple, t: jax.Array, obs: jax.Array, log: object, valid: jax.Array, key: jax.Array) -> tuple:
        return state, jax.random.uniform(key, (horizon, dim), minval=-1.0, maxval=1.0)
    return agent


@functools.cache
def _naive_agent(horizon: int) -> object:
    """Sends π(latest observation) in every row; the state is the policy's params."""

    def agent(policy: list, t: jax.Array, obs: jax.Array, log: object, valid: jax.Array, key: jax.Array) -> tuple:
        return policy, acda.naive_matrix(functools.partial(acda.policy_apply, policy), obs, horizon)
    return agent


@functools.cache
def _acda_agent(config: acda.ACDAConfig, delays: DelayConfig) -> object:
    """The ACDA agent for these static settings (cached, so the jitted episode loop is compiled once)."""

    def agent(state: tuple, t: jax.Array, obs: jax.Array, log: object, valid: jax.Array, key: jax.Array) -> tuple:
        memory, policy, model = state
        memory, matrix, _ = acda.act(memory, t, obs, log, valid, functools.partial(acda.policy_apply, policy),
                                     functools.partial(acda.model_apply, model), config=config, delays=delays)
        return (memory, policy, model), matrix
    return agent


def _reward(task: PointMassTask, next_obs: jax.Array, action: jax.Array) -> jax.Array:
    return point_mass_reward(next_obs, action, task)


@functools.partial(jax.jit, static_argnames=("env", "agent", "length", "episodes"))
def episodes(env: object, params: object, key: jax.Array, state: object, *, agent: object, length: int,
             episodes: int) -> object:
    """`episodes` independent episodes (vmapped) of `agent` on `env`."""
    return jax.vmap(lambda k: run_episode(env, params, k, agent, state, length))(jax.random.split(key, episodes))


def run_seed(seed: int, *, delays: DelayConfig, config: acda.ACDAConfig, length: int, explore_episodes: int,
             model_steps: int, policy_steps: int, imagine: int, eval_episodes: int,
             agents: tuple[str, ...]) -> dict:
    """{agent: [per-episode returns]} plus the model's last loss and the realised delays of the seed."""
    k_goal, k_explore, k_model, k_fit, k_pol, k_pfit, k_eval = jax.random.split(jax.random.key(seed), 7)
    phi = float(jax.random.uniform(k_goal, (), maxval=2 * np.pi))
    goal = jnp.array([np.cos(phi), np.sin(phi)], jnp.float32)
    env, undelayed = environments(delays, length)
    _, params = point_mass_env(PointMassTask(goal, jnp.eye(2)), episode_length=length)
    explored = episodes(env, params, k_explore, (), agent=_random_agent(delays.horizon, config.action_dim),
                        length=length, episodes=explore_episodes)
    obs, actions, next_obs, usable = jax.vmap(lambda e: hindsight_transitions(e, delays.obs_delay))(explored)
    flat = [x.reshape(-1, *x.shape[2:]) for x in (obs, actions, next_obs, usable)]
    model, model_loss = acda.model_fit(acda.model_init(k_model, config), *flat, k_fit, steps=model_steps,
                                       batch_size=MODEL_BATCH)
    task = PointMassTask(goal, jnp.eye(2))
    policy = acda.mlp_init(k_pol, (config.obs_dim, config.width, config.width, config.action_dim))
    policy, _ = acda.policy_fit(policy, model, flat[0], k_pfit, reward=_reward, reward_params=task, steps=policy_steps,
                                batch_size=POLICY_BATCH, horizon=imagine)
    runs = {"naive": (env, _naive_agent(delays.horizon), policy),
            "acda": (env, _acda_agent(config, delays), (acda.init_agent(config, delays), policy, model)),
            "undelayed": (undelayed, _naive_agent(delays.horizon), policy)}
    out = {"model_loss": float(model_loss[-1]),
           "realised_delay": float(np.mean(np.asarray(explored.log.arrived_delays).sum(axis=(0, 1))
                                           @ np.arange(delays.max_delay + 1)
                                           / max(1, np.asarray(explored.log.arrived_delays).sum())))}
    for name in agents:
        target, agent, state = runs[name]
        lived = episodes(target, params, k_eval, state, agent=agent, length=length, episodes=eval_episodes)
        out[name] = np.asarray(lived.rewards.sum(axis=1)).tolist()
    return out
