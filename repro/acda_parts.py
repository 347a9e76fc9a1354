"""One seed of the ACDA experiment (`repro/acda.py`): explore the delayed point mass with random action
matrices, fit the one-step model on the hindsight log, fit the policy through the model, then run the same
policy as a naive agent, as ACDA's action-matrix agent, and undelayed. Opt-in, model-free: Gaussian MLP policies
trained by the zoo's actor-critic on the delayed environment itself, one sending a single action repeated over the
packet's rows (`a2c_repeat`), one sending a whole matrix, row k for k steps later (`a2c_matrix`), and the repeating
policy trained and run undelayed (`a2c_undelayed`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26zoo.rl import acda, actor_critic
from icml26zoo.rl.acda_run import hindsight_transitions, run_episode
from icml26zoo.rl.control_envs import PointMassTask, point_mass_env, point_mass_reward
from icml26zoo.rl.delays import DelayConfig, delayed_env

AGENTS = ("naive", "acda", "undelayed")
A2C_AGENTS = ("a2c_repeat", "a2c_matrix", "a2c_undelayed")
ALL_AGENTS = AGENTS + A2C_AGENTS
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


@functools.cache
def _gaussian_mlp(rows: int) -> actor_critic.PolicyApply:
    """(params, obs [..., d_o]) -> (μ [..., d_a], or [..., rows, d_a] when rows > 0; a state-independent log σ):
    the actor-critic's policies (cached per shape: the jitted loops key on them)."""

    def policy(params: dict, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean = acda.mlp_apply(params["net"], obs)
        if rows:
            mean = mean.reshape(*mean.shape[:-1], rows, -1)
        return mean, params["log_std"]
    return policy


@functools.cache
def _a2c_programs(env: object, rows: int, horizon: int, a2c: actor_critic.A2CConfig, lr: float, length: int,
                  episodes: int) -> tuple:
    """(jitted training, jitted evaluation) of one actor-critic agent: a matrix policy of `rows` rows sent as
    is (rows > 0) or one action repeated over the packet's `horizon` rows (rows == 0)."""
    policy = _gaussian_mlp(rows)
    to_env = None if rows else actor_critic.repeat_rows(horizon)
    tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(lr))
    fit = jax.jit(actor_critic.make_train(env, policy, policy_tx=tx, config=a2c, to_env=to_env,
                                          action_ndim=2 if rows else 1))
    score = jax.jit(lambda key, params, p: actor_critic.evaluate(key, env, params, policy, p, episodes=episodes,
                                                                 length=length, to_env=to_env))
    return fit, score


def _a2c_agent(name: str, key: jax.Array, params: object, *, delays: DelayConfig, config: acda.ACDAConfig,
               length: int, eval_episodes: int, a2c: actor_critic.A2CConfig, a2c_lr: float) -> dict:
    """Trains one actor-critic agent on the seed's task; returns its evaluation returns and training curve."""
    env, undelayed = environments(delays, length)
    rows = delays.horizon if name == "a2c_matrix" else 0
    fit, score = _a2c_programs(undelayed if name == "a2c_undelayed" else env, rows, delays.horizon, a2c, a2c_lr,
                               length, eval_episodes)
    k_pol, k_value, k_fit, k_eval = jax.random.split(key, 4)
    out_dim = config.action_dim * max(rows, 1)
    policy = {"net": acda.mlp_init(k_pol, (config.obs_dim, config.width, config.width, out_dim)),
              "log_std": jnp.zeros((rows, config.action_dim) if rows else (config.action_dim,))}
    policy, _, trace = fit(k_fit, params, policy, actor_critic.value_init(k_value, config.obs_dim))
    curve = np.asarray(trace.episode_return)
    return {"returns": np.asarray(score(k_eval, params, policy)).tolist(),
            "curve": [float(v) for v in curve[np.isfinite(curve)]],
            "entropy": float(trace.entropy[-1])}


def run_seed(seed: int, *, delays: DelayConfig, config: acda.ACDAConfig, length: int, explore_episodes: int,
             model_steps: int, policy_steps: int, imagine: int, eval_episodes: int,
             agents: tuple[str, ...], a2c: actor_critic.A2CConfig | None = None, a2c_lr: float = 1e-3) -> dict:
    """{agent: [per-episode returns]} plus the model's last loss and the realised delays of the seed (the
    model-based part runs only for the agents of AGENTS); the a2c_* agents need `a2c` and add
    "<agent>_curve" (the training returns of the episodes that ended) and "<agent>_entropy"."""
    k_goal, k_explore, k_model, k_fit, k_pol, k_pfit, k_eval = jax.random.split(jax.random.key(seed), 7)
    phi = float(jax.random.uniform(k_goal, (), maxval=2 * np.pi))
    goal = jnp.array([np.cos(phi), np.sin(phi)], jnp.float32)
    env, undelayed = environments(delays, length)
    _, params = point_mass_env(PointMassTask(goal, jnp.eye(2)), episode_length=length)
    out: dict = {}
    for name in (a for a in agents if a in A2C_AGENTS):  # one key for all: same initial critic, same evaluation
        lived = _a2c_agent(name, jax.random.fold_in(k_eval, 100), params, delays=delays, config=config,
                           length=length, eval_episodes=eval_episodes, a2c=a2c, a2c_lr=a2c_lr)
        out.update({name: lived["returns"], f"{name}_curve": lived["curve"], f"{name}_entropy": lived["entropy"]})
    if not set(agents) & set(AGENTS):
        return out
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
    out |= {"model_loss": float(model_loss[-1]),
            "realised_delay": float(np.mean(np.asarray(explored.log.arrived_delays).sum(axis=(0, 1))
                                            @ np.arange(delays.max_delay + 1)
                                            / max(1, np.asarray(explored.log.arrived_delays).sum())))}
    for name in (a for a in agents if a in AGENTS):
        target, agent, state = runs[name]
        lived = episodes(target, params, k_eval, state, agent=agent, length=length, episodes=eval_episodes)
        out[name] = np.asarray(lived.rewards.sum(axis=1)).tolist()
    return out
