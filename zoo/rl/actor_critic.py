"""A small on-policy actor-critic (A2C with GAE(λ)) for gymnax-style environments, as pure functions.

Used by the APB and ACDA experiments to train their policies by reinforcement learning (the papers use SAC; this
is a simpler on-policy stand-in that fits a CPU budget). It is generic:

- the environment is anything with gymnax's interface, `env.reset(key, params) -> (obs, state)` and
  `env.step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)` with auto-reset and
  `info["final_observation"]` (the observation before the reset), as gymnax's `Environment.step` returns;
- the policy is a function argument `policy_apply(params, obs [N, d_o]) -> (mean [N, *a], log_std [*a] or
  [N, *a])` of a diagonal Gaussian over a pre-squash variable u; the action is a = tanh(u) ("tanh", default) or
  clip(u, −1, 1) ("clip"), so an APB policy (`apb.apply` + `split_gaussian`) and a plain MLP both plug in;
- `to_env` maps one policy action [*a] to the environment's action (e.g. one action repeated over a packet's
  rows for the delay layer); the log-probability is always that of the policy's own action;
- the critic is a separate MLP V(obs) (`value_init`, `value_apply`); the policy's optax optimizer is an argument,
  so APB's masked optimizer (`apb.optimizer`, backbone frozen) is used as it is.

One update: N environments under `jax.vmap` run T steps (`lax.scan`) with the current policy; V gives values
of the observations and of the true next observations (`final_observation`, so a truncated episode is
bootstrapped while a terminated one is not); GAE(λ) (`gae`) gives advantages, normalised over the batch; the
policy minimises −mean(log π(a|s) Â) − c_ent · H, the critic 0.5 · mean((V − R̂)²), each with its own optimizer.
The whole training is one `lax.scan` over updates (`make_train` returns the pure function, `train` jits it).

Log-probability of a = tanh(u): Σ_i [log N(u_i; μ_i, σ_i) − log(1 − tanh² u_i)]; with "clip" it is the Gaussian
log-density of u (clipping is part of the environment, as in common PPO code). The entropy reported and used in
the bonus is that of the Gaussian over u (the squashed one has no closed form).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from icml26zoo.optim.hparams import with_standard_promotion
from icml26zoo.rl.acda import mlp_apply, mlp_init
from icml26zoo.validation import (
    check_bool,
    check_choice,
    check_int,
    check_non_negative,
    check_positive,
    check_probability,
)

__all__ = ["SQUASHES", "A2CConfig", "Trace", "deterministic_action", "evaluate", "gae", "gaussian_entropy",
           "log_prob", "make_train", "repeat_rows", "sample", "split_gaussian", "train", "value_apply", "value_init"]

SQUASHES = ("tanh", "clip")
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # bounds of split_gaussian's log σ (σ in [0.007, 7.4])

PolicyApply = Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]]


class A2CConfig(NamedTuple):
    """Settings of the actor-critic (hashable: static under `jit`).

    num_envs: N parallel environments; rollout: T steps per update; updates: number of updates;
    gamma: discount in [0, 1]; gae_lambda: GAE's λ in [0, 1]; entropy_coef: weight c_ent ≥ 0 of the entropy bonus;
    reward_scale: rewards are multiplied by it before the critic and GAE see them (> 0);
    normalize_advantages: advantages standardised over the N·T batch; squash: "tanh" or "clip".
    """

    num_envs: int = 16
    rollout: int = 16
    updates: int = 200
    gamma: float = 0.99
    gae_lambda: float = 0.95
    entropy_coef: float = 0.0
    reward_scale: float = 1.0
    normalize_advantages: bool = True
    squash: str = "tanh"

    def check(self) -> A2CConfig:
        """ValueError naming the first field out of range; returns self."""
        for name in ("num_envs", "rollout", "updates"):
            check_int(name, getattr(self, name))
        check_probability("gamma", self.gamma)
        check_probability("gae_lambda", self.gae_lambda)
        check_non_negative("entropy_coef", self.entropy_coef, finite=True)
        check_positive("reward_scale", self.reward_scale, finite=True)
        check_bool("normalize_advantages", self.normalize_advantages)
        check_choice("squash", self.squash, SQUASHES)
        return self


class Trace(NamedTuple):
    """Per-update diagnostics, each [updates]: the mean return of the episodes that ended during the update's
    rollout (NaN when none ended), the policy's mean Gaussian entropy, the critic's loss before its step."""

    episode_return: jax.Array
    entropy: jax.Array
    value_loss: jax.Array


# ------------------------------------------------------------------------------------------------ distribution


def split_gaussian(y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A network output y [..., 2·d_a] as (mean [..., d_a], log_std [..., d_a] clipped to [−5, 2]) — e.g. APB's
    "gaussian" head ([μ, log σ])."""
    d = y.shape[-1] // 2
    return y[..., :d], jnp.clip(y[..., d:2 * d], LOG_STD_MIN, LOG_STD_MAX)


def _squash(u: jax.Array, squash: str) -> jax.Array:
    return jnp.tanh(u) if squash == "tanh" else jnp.clip(u, -1.0, 1.0)


def sample(key: jax.Array, mean: jax.Array, log_std: jax.Array, squash: str = "tanh") -> tuple[jax.Array, jax.Array]:
    """(u, a): u ~ N(mean, exp(log_std)²) of mean's shape, a = tanh(u) or clip(u, −1, 1)."""
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    return u, _squash(u, squash)


def deterministic_action(mean: jax.Array, squash: str = "tanh") -> jax.Array:
    """The evaluation action: tanh(mean) or clip(mean, −1, 1)."""
    return _squash(mean, squash)


def log_prob(mean: jax.Array, log_std: jax.Array, u: jax.Array, squash: str = "tanh", *,
             action_ndim: int = 1) -> jax.Array:
    """log π(a) of a = squash(u), summed over the last `action_ndim` axes: mean, log_std, u [..., *a] -> [...].
    "tanh" includes the change of variables −log(1 − tanh² u) = 2 (u + softplus(−2u) − log 2)."""
    z = (u - mean) * jnp.exp(-log_std)
    logp = -0.5 * z ** 2 - log_std - 0.5 * jnp.log(2.0 * jnp.pi)
    if squash == "tanh":
        logp = logp - 2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.sum(logp, axis=tuple(range(-action_ndim, 0)))


def gaussian_entropy(log_std: jax.Array, *, action_ndim: int = 1) -> jax.Array:
    """Entropy of the diagonal Gaussian over u, summed over the last `action_ndim` axes: Σ (log σ + ½ log 2πe)."""
    return jnp.sum(log_std + 0.5 * jnp.log(2.0 * jnp.pi * jnp.e), axis=tuple(range(-action_ndim, 0)))


# ---------------------------------------------------------------------------------------------------- critic


def value_init(key: jax.Array, obs_dim: int, *, width: int = 64, depth: int = 2) -> list[dict[str, jax.Array]]:
    """The critic: a tanh MLP obs_dim -> width (depth layers) -> 1 (Glorot weights, zero biases)."""
    check_int("obs_dim (observation dim)", obs_dim)
    check_int("width", width)
    check_int("depth", depth)
    return mlp_init(key, (obs_dim, *([width] * depth), 1))


def value_apply(params: list[dict[str, jax.Array]], obs: jax.Array) -> jax.Array:
    """V(obs): [..., d_o] -> [...]."""
    return mlp_apply(params, obs)[..., 0]


# ------------------------------------------------------------------------------------------------------- GAE


def gae(rewards: jax.Array, values: jax.Array, next_values: jax.Array, terminated: jax.Array, done: jax.Array,
        gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimates over a rollout, all inputs [T, N] (time first):
    δ_t = r_t + γ (1 − terminated_t) V(s'_t) − V(s_t) with s'_t the true next observation (before any reset),
    Â_t = δ_t + γ λ (1 − done_t) Â_{t+1}, Â_T = 0 (the last step bootstraps through V(s'_{T−1})).
    done = terminated or truncated: a truncated step still bootstraps, but no advantage flows across a reset.
    Returns (advantages [T, N], value targets Â + V [T, N])."""
    not_term = 1.0 - terminated.astype(values.dtype)
    not_done = 1.0 - done.astype(values.dtype)
    deltas = rewards + gamma * not_term * next_values - values

    def back(carry: jax.Array, inputs: tuple) -> tuple[jax.Array, jax.Array]:
        delta, keep = inputs
        carry = delta + gamma * lam * keep * carry
        return carry, carry

    _, adv = jax.lax.scan(back, jnp.zeros_like(values[0]), (deltas, not_done), reverse=True)
    return adv, adv + values


# ------------------------------------------------------------------------------------------------- training


class _Carry(NamedTuple):
    policy: Any
    value: Any
    policy_opt: Any
    value_opt: Any
    env_state: Any
    obs: jax.Array  # [N, d_o]
    running: jax.Array  # [N] return of each environment's current episode so far (unscaled)
    key: jax.Array


def _identity(action: jax.Array) -> jax.Array:
    return action


def make_train(env: Any, policy_apply: PolicyApply, *, policy_tx: optax.GradientTransformation,
               value_tx: optax.GradientTransformation | None = None, config: A2CConfig | None = None,
               to_env: Callable[[jax.Array], jax.Array] | None = None, action_ndim: int = 1) -> Callable:
    """The pure training function `fn(key, env_params, policy_params, value_params) -> (policy_params,
    value_params, Trace)` (jit or vmap it, e.g. over tasks' env params).

    Args:
      env: a gymnax-style environment (see the module docstring).
      policy_apply: (params, obs [N, d_o]) -> (mean [N, *a], log_std broadcastable to it).
      policy_tx: the policy's optax optimizer (e.g. `apb.optimizer(...)`, which freezes APB's backbone).
      value_tx: the critic's optimizer; default Adam(1e-3) with global-norm clipping at 0.5.
      config: `A2CConfig` (validated here; None = the defaults).
      to_env: one policy action [*a] -> the environment's action (default: unchanged).
      action_ndim: number of trailing action axes, len(a) (1 for [d_a], 2 for a packet [h, d_a]).
    """
    config = (A2CConfig() if config is None else config).check()
    check_int("action_ndim", action_ndim)
    value_tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(1e-3)) if value_tx is None else value_tx
    policy_tx, value_tx = with_standard_promotion(policy_tx), with_standard_promotion(value_tx)
    to_env = _identity if to_env is None else to_env
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    n, squash = config.num_envs, config.squash

    def policy(params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean, log_std = policy_apply(params, obs)
        return mean, jnp.broadcast_to(log_std, mean.shape)

    def rollout_step(carry: _Carry, env_params: Any) -> tuple[_Carry, tuple]:
        key, k_act, k_env = jax.random.split(carry.key, 3)
        mean, log_std = policy(carry.policy, carry.obs)
        u, action = sample(k_act, mean, log_std, squash)
        obs, state, reward, terminated, truncated, info = step(jax.random.split(k_env, n), carry.env_state,
                                                               jax.vmap(to_env)(action), env_params)
        done = terminated | truncated
        running = carry.running + reward
        ended = (jnp.sum(jnp.where(done, running, 0.0)), jnp.sum(done.astype(jnp.float32)))
        seen = carry.obs
        carry = carry._replace(env_state=state, obs=obs, running=jnp.where(done, 0.0, running), key=key)
        return carry, (seen, u, reward, terminated, done, info["final_observation"], ended)

    def update(carry: _Carry, env_params: Any) -> tuple[_Carry, tuple]:
        # [T, N, ...] each: the observation acted on, u, reward, terminated, done, the true next observation
        carry, (observed, u, rewards, terminated, done, next_obs, ended) = jax.lax.scan(
            lambda c, _: rollout_step(c, env_params), carry, None, length=config.rollout)
        rewards = config.reward_scale * rewards
        next_values = value_apply(carry.value, next_obs)
        values = value_apply(carry.value, observed)
        adv, targets = gae(rewards, values, next_values, terminated, done, config.gamma, config.gae_lambda)
        if config.normalize_advantages:
            adv = (adv - jnp.mean(adv)) / (jnp.std(adv) + 1e-8)
        adv, targets = jax.lax.stop_gradient(adv), jax.lax.stop_gradient(targets)

        def policy_loss(params: Any) -> tuple[jax.Array, jax.Array]:
            mean, log_std = policy(params, observed)
            entropy = jnp.mean(gaussian_entropy(log_std, action_ndim=action_ndim))
            logp = log_prob(mean, log_std, u, squash, action_ndim=action_ndim)
            return -jnp.mean(logp * adv) - config.entropy_coef * entropy, entropy

        def value_loss(params: Any) -> jax.Array:
            return 0.5 * jnp.mean((value_apply(params, observed) - targets) ** 2)

        (_, entropy), p_grads = jax.value_and_grad(policy_loss, has_aux=True)(carry.policy)
        v_loss, v_grads = jax.value_and_grad(value_loss)(carry.value)
        p_updates, policy_opt = policy_tx.update(p_grads, carry.policy_opt, carry.policy)
        v_updates, value_opt = value_tx.update(v_grads, carry.value_opt, carry.value)
        carry = carry._replace(policy=optax.apply_updates(carry.policy, p_updates), policy_opt=policy_opt,
                               value=optax.apply_updates(carry.value, v_updates), value_opt=value_opt)
        total, count = jnp.sum(ended[0]), jnp.sum(ended[1])
        mean_return = jnp.where(count > 0, total / jnp.maximum(count, 1.0), jnp.nan)
        return carry, (mean_return, entropy, v_loss)

    def fn(key: jax.Array, env_params: Any, policy_params: Any, value_params: Any) -> tuple[Any, Any, Trace]:
        k_reset, k_run = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, n), env_params)
        carry = _Carry(policy=policy_params, value=value_params, policy_opt=policy_tx.init(policy_params),
                       value_opt=value_tx.init(value_params), env_state=state, obs=obs,
                       running=jnp.zeros(n), key=k_run)
        carry, (returns, entropy, v_loss) = jax.lax.scan(lambda c, _: update(c, env_params), carry, None,
                                                         length=config.updates)
        return carry.policy, carry.value, Trace(episode_return=returns, entropy=entropy, value_loss=v_loss)

    return fn


def train(key: jax.Array, env: Any, env_params: Any, policy_apply: PolicyApply, policy_params: Any,
          value_params: Any, *, policy_tx: optax.GradientTransformation,
          value_tx: optax.GradientTransformation | None = None, config: A2CConfig | None = None,
          to_env: Callable[[jax.Array], jax.Array] | None = None,
          action_ndim: int = 1) -> tuple[Any, Any, Trace]:
    """`make_train(...)` jitted and run once: returns (policy_params, value_params, Trace with fields
    [config.updates]). Compiles on every call; cache `jax.jit(make_train(...))` to train repeatedly."""
    fn = make_train(env, policy_apply, policy_tx=policy_tx, value_tx=value_tx, config=config, to_env=to_env,
                    action_ndim=action_ndim)
    return jax.jit(fn)(key, env_params, policy_params, value_params)


def evaluate(key: jax.Array, env: Any, env_params: Any, policy_apply: PolicyApply, policy_params: Any, *,
             episodes: int = 16, length: int = 50, squash: str = "tanh",
             to_env: Callable[[jax.Array], jax.Array] | None = None) -> jax.Array:
    """Returns [episodes] of the deterministic policy squash(mean) over `length` steps from fresh resets
    (rewards after an episode's first end are not counted). Pure: jit it with env, policy_apply, episodes,
    length, squash and to_env static."""
    check_int("episodes", episodes)
    check_int("length", length)
    check_choice("squash", squash, SQUASHES)
    to_env = _identity if to_env is None else to_env

    def one(k: jax.Array) -> jax.Array:
        k_reset, k_run = jax.random.split(k)
        obs, state = env.reset(k_reset, env_params)

        def body(carry: tuple, k_step: jax.Array) -> tuple[tuple, jax.Array]:
            obs, state, alive = carry
            mean, _ = policy_apply(policy_params, obs)
            obs, state, reward, terminated, truncated, _ = env.step(k_step, state,
                                                                    to_env(deterministic_action(mean, squash)),
                                                                    env_params)
            return (obs, state, alive & ~(terminated | truncated)), jnp.where(alive, reward, 0.0)

        _, rewards = jax.lax.scan(body, (obs, state, jnp.bool_(True)), jax.random.split(k_run, length))
        return jnp.sum(rewards)

    return jax.vmap(one)(jax.random.split(key, episodes))


@functools.cache
def repeat_rows(rows: int) -> Callable[[jax.Array], jax.Array]:
    """to_env for a packet of `rows` rows: one action [d_a] -> [rows, d_a] (the same action in every row)."""
    check_int("rows", rows)

    def to_env(action: jax.Array) -> jax.Array:
        return jnp.broadcast_to(action, (rows, *action.shape))
    return to_env
