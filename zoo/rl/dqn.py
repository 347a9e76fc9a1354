"""A small DQN with a scheduled hard target update, on a finite MDP whose Q* is known exactly.

The network maps a one-hot state e_s ∈ R^S to Q_θ(s, ·) ∈ R^A (an NNX MLP, S → H → H → A, ReLU). Each
gradient step draws a batch of B transitions (s, a, r, s') from the uniform behaviour distribution (the
generative-model version of a replay buffer holding every state-action pair equally often) and takes one
Adam step on the DQN regression loss

    L(θ) = (1/B) Σ_i huber(Q_θ(s_i, a_i) − [r_i + γ max_a' Q_θ̄(s'_i, a')]),

with θ̄ the target parameters. After each step the schedule's `maybe_sync` counts the step and, when the
current period K_n is complete, hard-copies θ into θ̄ (the hard target update of a DQN). The whole loop
is one jitted `lax.scan`; the trace holds ‖Q_θ − Q*‖_∞ over all S·A entries after every step.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.rl.envs import FiniteMDP, sample_transitions
from icml26zoo.rl.schedules import GeometricTargetSchedule


class QNetwork(nnx.Module):
    """Q_θ: one-hot states [..., S] float32 -> Q-values [..., A] float32 (two hidden ReLU layers of width H)."""

    def __init__(self, num_states: int, num_actions: int, hidden: int, *, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(num_states, hidden, rngs=rngs)
        self.l2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, num_actions, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jax.nn.relu(self.l2(jax.nn.relu(self.l1(x)))))


class DQNTrace(NamedTuple):
    """Per-step outputs of T gradient steps (shape [T]) and the final online parameters."""

    error: jax.Array  # float32: ‖Q_θ_t − Q*‖_∞ over all (s, a) after step t
    target_error: jax.Array  # float32: ‖Q_θ̄_t − Q*‖_∞ after step t
    loss: jax.Array  # float32: the batch loss at step t (before the update)
    synced: jax.Array  # bool: θ̄ ← θ after step t
    params: Any  # the final online parameters (pure dict)


def _q_all(graphdef: nnx.GraphDef, params: dict, num_states: int) -> jax.Array:
    """Q_θ on every state: [S, A]."""
    return nnx.merge(graphdef, params)(jnp.eye(num_states, dtype=jnp.float32))


_STATIC = ("graphdef", "schedule", "learning_rate", "gamma", "num_steps", "batch_size", "huber_delta")


@functools.partial(jax.jit, static_argnames=_STATIC)
def _run(
    params: dict,
    key: jax.Array,
    P: jax.Array,
    R: jax.Array,
    q_star: jax.Array,
    *,
    graphdef: nnx.GraphDef,
    schedule: GeometricTargetSchedule,
    learning_rate: float,
    gamma: float,
    num_steps: int,
    batch_size: int,
    huber_delta: float,
) -> DQNTrace:
    mdp = FiniteMDP(P, R, gamma)
    # Built here from the static learning rate (not passed in) so equal settings hit the jit cache.
    optimizer = optax.adam(learning_rate)
    num_states = P.shape[0]

    def loss_fn(p: dict, target_p: dict, batch: tuple[jax.Array, ...]) -> jax.Array:
        s, a, r, s_next = batch
        q_sa = jnp.take_along_axis(_q_all(graphdef, p, num_states)[s], a[:, None], axis=1)[:, 0]
        # The bootstrap target reads θ̄ only and is held constant in the gradient (semi-gradient TD).
        q_next = jax.lax.stop_gradient(_q_all(graphdef, target_p, num_states)[s_next])
        y = r + jnp.float32(gamma) * jnp.max(q_next, axis=1)
        return jnp.mean(optax.losses.huber_loss(q_sa, y, delta=huber_delta))

    def body(carry: tuple, t: jax.Array) -> tuple[tuple, tuple[jax.Array, ...]]:
        p, target_p, opt_state, sync = carry
        batch = sample_transitions(mdp, jax.random.fold_in(key, t), batch_size)
        loss, grads = jax.value_and_grad(loss_fn)(p, target_p, batch)
        # optax's Adam mixes Python floats with its int32 step count; strict promotion would reject that.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimizer.update(grads, opt_state, p)
        p = optax.apply_updates(p, updates)
        target_p, sync, synced = schedule.maybe_sync(p, target_p, sync)
        out = (
            jnp.max(jnp.abs(_q_all(graphdef, p, num_states) - q_star)),
            jnp.max(jnp.abs(_q_all(graphdef, target_p, num_states) - q_star)),
            loss,
            synced,
        )
        return (p, target_p, opt_state, sync), out

    with jax.numpy_dtype_promotion("standard"):
        opt_state = optimizer.init(params)
    init = (params, params, opt_state, schedule.init())
    (p, _, _, _), (err, terr, loss, synced) = jax.lax.scan(body, init, jnp.arange(num_steps, dtype=jnp.int32))
    return DQNTrace(err, terr, loss, synced, p)


def train_dqn(
    mdp: FiniteMDP,
    schedule: GeometricTargetSchedule,
    key: jax.Array,
    num_steps: int,
    q_star: np.ndarray,
    *,
    hidden: int = 64,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    huber_delta: float = 1.0,
) -> DQNTrace:
    """Trains a `QNetwork` for `num_steps` gradient steps with Adam and the scheduled hard target update.

    key seeds both the initialisation and the transition stream; q_star [S, A] is the exact Q* the error is
    measured against. The target network starts equal to the online one (θ̄_0 = θ_0).
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if hidden < 1:
        raise ValueError(f"hidden must be >= 1, got {hidden}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
    init_key, data_key = jax.random.split(key)
    model = QNetwork(mdp.num_states, mdp.num_actions, hidden, rngs=nnx.Rngs(params=init_key))
    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    return _run(
        params, data_key, mdp.P, mdp.R, jnp.asarray(q_star, jnp.float32),
        graphdef=graphdef, schedule=schedule, learning_rate=float(learning_rate), gamma=mdp.gamma,
        num_steps=int(num_steps), batch_size=int(batch_size), huber_delta=float(huber_delta),
    )
