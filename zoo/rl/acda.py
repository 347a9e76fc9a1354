"""ACDA (Actor-Critic with Delay Adaptation), small: a learned one-step model, an action matrix built by rolling
it out, and the delay-distribution adaptation of the effective horizon.

Paper: "Adaptive Reinforcement Learning for Unobservable Random Delays" (Wikman, Proutiere, Broman; ICML 2026,
arXiv 2506.14411). No official code: everything here is a RECONSTRUCTION, reduced to fit
a CPU budget; the interaction layer it talks to is `icml26zoo.rl.delays`.

- Model: an ensemble of E MLPs, f̂(s, a) = s + mean_e g_e([s, a]), fitted by MSE on transitions
  (s_u, a_u, s_{u+1}) whose applied action a_u comes from the hindsight log (`model_fit`).
- Policy: a deterministic tanh MLP π(s). Deviation from the spec's SAC actor-critic: it is trained by
  backpropagating the known reward through H-step rollouts of the learned model from observed states
  (`policy_fit`, a model-based deterministic policy gradient, no critic).
- Acting (`act`), at agent step t with the observation s_τ, τ = max(t − o, 0) (observation delay o):
  1. add the delays reported in the log to a histogram; d̂ = its `predict_quantile` quantile (prior d̂ while
     it is empty) and h_eff = min(h, its `horizon_quantile` quantile + 1) (h while empty): the adaptation;
  2. roll ŝ from s_τ to t through the actions the layer is expected to have applied at τ .. t − 1: at u,
     row min(d̂, h − 1) of the agent's own packet sent at u − d̂ (zero if u − d̂ < 0), i.e. as if every
     packet took d̂ steps;
  3. A_t[k] = π(ŝ_{t+k}) and ŝ_{t+k+1} = f̂(ŝ_{t+k}, â_{t+k}), where â_{t+k} is the action expected to be
     applied at t + k: row d̂ of the earlier packet sent at t + k − d̂ while k < d̂ (this packet has not
     arrived yet), A_t[k] from then on; rows k ≥ h_eff repeat row h_eff − 1.
- `naive_matrix` is the baseline acting as if undelayed: every row is π(latest observation).
With a perfect model, deterministic dynamics and a constant delay δ = d̂ < h, step 2 is exact, so every
applied action from time δ on is π(s_s) of the true state: the undelayed closed-loop trajectory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from icml26zoo.rl.delays import DelayConfig, LogEntry
from icml26zoo.validation import check_int, check_interval

__all__ = ["ACDAConfig", "AgentState", "act", "delay_quantile", "init_agent", "mlp_apply", "mlp_init",
           "model_apply", "model_fit", "model_init", "naive_matrix", "policy_apply", "policy_fit"]


class ACDAConfig(NamedTuple):
    """The agent's sizes and its adaptation quantiles (hashable: static under `jit`)."""

    obs_dim: int
    action_dim: int
    width: int = 64
    ensemble: int = 3
    predict_quantile: float = 0.5
    horizon_quantile: float = 0.95
    prior_delay: int = 0

    def check(self) -> ACDAConfig:
        check_int("obs_dim (observation dim)", self.obs_dim)
        check_int("action_dim", self.action_dim)
        check_int("width", self.width)
        check_int("ensemble", self.ensemble)
        check_interval("predict_quantile", self.predict_quantile, 0, 1)
        check_interval("horizon_quantile", self.horizon_quantile, 0, 1)
        check_int("prior_delay", self.prior_delay, minimum=0)
        return self


# ------------------------------------------------------------------------------------------------ networks


def mlp_init(key: jax.Array, sizes: tuple[int, ...]) -> list[dict[str, jax.Array]]:
    """An MLP with layer sizes `sizes` (input first): Glorot-uniform weights, zero biases."""
    keys = jax.random.split(key, len(sizes) - 1)
    init = jax.nn.initializers.glorot_uniform()
    return [{"w": init(k, (m, n)), "b": jnp.zeros(n)} for k, m, n in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def mlp_apply(layers: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    """tanh hidden layers, linear output: [..., sizes[0]] -> [..., sizes[-1]]."""
    for layer in layers[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def policy_apply(params: list, obs: jax.Array) -> jax.Array:
    """π(s) = tanh(MLP(s)): [..., d_o] -> [..., d_a]."""
    return jnp.tanh(mlp_apply(params, obs))


def model_init(key: jax.Array, config: ACDAConfig) -> list:
    """E stacked MLPs [d_o + d_a] -> width -> width -> [d_o] (leading axis E on every leaf)."""
    config.check()
    sizes = (config.obs_dim + config.action_dim, config.width, config.width, config.obs_dim)
    return jax.vmap(lambda k: mlp_init(k, sizes))(jax.random.split(key, config.ensemble))


def model_apply(params: list, obs: jax.Array, action: jax.Array) -> jax.Array:
    """f̂(s, a) = s + mean over the ensemble of g_e([s, a]): [..., d_o], [..., d_a] -> [..., d_o]."""
    x = jnp.concatenate([obs, action], axis=-1)
    return obs + jnp.mean(jax.vmap(mlp_apply, in_axes=(0, None))(params, x), axis=0)


def _adam_loop(loss: Callable, params: Any, key: jax.Array, steps: int, lr: float) -> tuple[Any, jax.Array]:
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))

    def body(carry: tuple, k: jax.Array) -> tuple[tuple, jax.Array]:
        p, state = carry
        value, grads = jax.value_and_grad(loss)(p, k)
        # optax's bias correction mixes Python floats with the int32 step count (strict promotion refuses it).
        with jax.numpy_dtype_promotion("standard"):
            updates, state = tx.update(grads, state, p)
        return (optax.apply_updates(p, updates), state), value

    (params, _), losses = jax.lax.scan(body, (params, tx.init(params)), jax.random.split(key, steps))
    return params, losses


@functools.partial(jax.jit, static_argnames=("steps", "batch_size", "lr"))
def model_fit(params: list, obs: jax.Array, actions: jax.Array, next_obs: jax.Array, weights: jax.Array,
              key: jax.Array, *, steps: int, batch_size: int, lr: float = 1e-3) -> tuple[list, jax.Array]:
    """MSE fit of f̂ on N transitions obs [N, d_o], applied actions [N, d_a], next_obs [N, d_o]; `weights`
    [N] (0/1) marks the usable ones (those whose applied action the log has reported). Each member sees its
    own minibatches. Returns (params, per-step loss [steps])."""
    prob = weights / jnp.sum(weights)

    def loss(p: list, k: jax.Array) -> jax.Array:
        idx = jax.random.choice(k, obs.shape[0], (params_count(p), batch_size), p=prob)

        def member(layers: list, i: jax.Array) -> jax.Array:
            x = jnp.concatenate([obs[i], actions[i]], axis=-1)
            return jnp.mean((obs[i] + mlp_apply(layers, x) - next_obs[i]) ** 2)

        return jnp.mean(jax.vmap(member)(p, idx))

    return _adam_loop(loss, params, key, steps, lr)


def params_count(model: list) -> int:
    """Ensemble size E of stacked model params."""
    return jax.tree.leaves(model)[0].shape[0]


@functools.partial(jax.jit, static_argnames=("reward", "steps", "batch_size", "horizon", "lr"))
def policy_fit(params: list, model: list, starts: jax.Array, key: jax.Array, *, reward: Callable,
               reward_params: Any, steps: int, batch_size: int, horizon: int,
               lr: float = 3e-3) -> tuple[list, jax.Array]:
    """Maximises the return of `horizon`-step rollouts of the learned model f̂ under π from minibatches of
    observed states `starts` [N, d_o], with the known reward(reward_params, next_obs [d_o], action [d_a]) -> []
    (`reward` static, `reward_params` traced: a new task does not recompile). Returns (params, per-step
    negative mean return [steps])."""

    def loss(p: list, k: jax.Array) -> jax.Array:
        s = starts[jax.random.randint(k, (batch_size,), 0, starts.shape[0])]

        def body(s: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
            a = policy_apply(p, s)
            nxt = model_apply(model, s, a)
            return nxt, jax.vmap(reward, in_axes=(None, 0, 0))(reward_params, nxt, a)

        _, rewards = jax.lax.scan(body, s, None, length=horizon)
        return -jnp.mean(jnp.sum(rewards, axis=0))

    return _adam_loop(loss, params, key, steps, lr)


# ------------------------------------------------------------------------------------------------ acting


class AgentState(NamedTuple):
    """The agent's memory: its own packets by send time (ring of `slots`) and the delay histogram."""

    sent: jax.Array  # [slots, h, d_a]
    counts: jax.Array  # [max_delay + 1] realised delays reported so far


def init_agent(config: ACDAConfig, delays: DelayConfig) -> AgentState:
    """Empty memory; the ring holds the packets of the last max_delay + obs_delay + 1 steps."""
    config.check()
    delays.check()
    slots = delays.max_delay + delays.obs_delay + 1
    return AgentState(sent=jnp.zeros((slots, delays.horizon, config.action_dim)),
                      counts=jnp.zeros(delays.max_delay + 1, jnp.int32))


def delay_quantile(counts: jax.Array, q: float, prior: int) -> jax.Array:
    """The smallest d with P̂(δ ≤ d) ≥ q under the histogram `counts` [D]; `prior` when it is empty."""
    total = jnp.sum(counts).astype(jnp.float32)
    cdf = jnp.cumsum(counts).astype(jnp.float32)
    d = jnp.argmax(cdf >= q * total)
    return jnp.where(total > 0, d, prior).astype(jnp.int32)


def naive_matrix(policy: Callable, obs: jax.Array, horizon: int) -> jax.Array:
    """The undelayed agent's packet: policy(latest observation [d_o]) in every row, [h, d_a]."""
    a = policy(obs)
    return jnp.broadcast_to(a, (horizon, a.shape[-1]))


def act(state: AgentState, t: jax.Array, obs: jax.Array, log: LogEntry, log_valid: jax.Array, policy: Callable,
        step: Callable, *, config: ACDAConfig, delays: DelayConfig) -> tuple[AgentState, jax.Array, jax.Array]:
    """ACDA's packet at agent step t from the observation s_τ [d_o] (τ = max(t − o, 0)) and the log entry that
    came with it; `policy(s) -> a` and `step(s, a) -> s'` (the learned model f̂, e.g.
    `functools.partial(model_apply, params)`, or the true dynamics as a perfect model). Returns (state,
    A_t [h, d_a], h_eff [])."""
    h, o = delays.horizon, delays.obs_delay
    counts = state.counts + jnp.where(log_valid, log.arrived_delays, 0)
    d_hat = delay_quantile(counts, config.predict_quantile, config.prior_delay)
    h_eff = jnp.minimum(h, delay_quantile(counts, config.horizon_quantile, h - 1) + 1)
    slots = state.sent.shape[0]
    s_hat = obs
    for j in range(o):  # the o actions applied since the observation, as if every packet took d̂ steps
        u = t - o + j
        packet = u - d_hat
        a_hat = jnp.where(packet >= 0, state.sent[packet % slots, jnp.minimum(d_hat, h - 1)], 0.0)
        s_hat = jnp.where(u >= 0, step(s_hat, a_hat), s_hat)

    def row(s: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array]:
        # Until this packet is expected to arrive (k < d̂) the layer applies rows of earlier packets still in
        # flight: roll the model through those, while the row itself is π(ŝ_{t+k}) in case it arrives early.
        a = policy(s)
        packet = t + k - d_hat
        earlier = jnp.where(packet >= 0, state.sent[packet % slots, jnp.minimum(d_hat, h - 1)], 0.0)
        return step(s, jnp.where(k < d_hat, earlier, a)), a

    _, rows = jax.lax.scan(row, s_hat, jnp.arange(h))
    k = jnp.arange(h)
    matrix = jnp.where((k < h_eff)[:, None], rows, rows[h_eff - 1])
    state = AgentState(sent=state.sent.at[t % slots].set(matrix), counts=counts)
    return state, matrix, h_eff
