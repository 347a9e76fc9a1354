"""Training APB policies on the point-mass family by analytic (deterministic) policy gradients.

The spec trains with SAC for 50k steps per task; that is beyond this CPU budget, so this is a RECONSTRUCTION
that keeps the structure (frozen backbone, per-task linear layers, a meta-trained or random backbone) and swaps
the RL algorithm: the point mass is differentiable, so the policy gradient of the episode return is taken
exactly by backpropagating through the simulator (`point_mass_step`) over the whole episode, from a batch of
random start states, with Adam and global-norm clipping. The loop is a pure `lax.scan` (RL does not go
through the shared supervised trainer).

- `train_task`: one task's layers (APB, backbone frozen) or the whole network ("full" baseline);
  `train_tasks` trains K stacked tasks in one jitted program, `evaluate_tasks` scores them.
- `meta_train`: backbone and the heads of several tasks jointly (all trainable, mean return over tasks);
  the backbone is then frozen and reused by `train_task` on new tasks.
- `a2c_train_tasks`: the same per-task training by reinforcement learning instead, the zoo's actor-critic
  (`icml26zoo.rl.actor_critic`, A2C with GAE) on the point-mass gymnax environment, with APB's "gaussian"
  head ([μ, log σ], tanh-squashed) and APB's masked optimizer; it needs the `[rl]` extra.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from icml26zoo.rl import actor_critic, apb
from icml26zoo.rl.control_envs import PointMassTask, point_mass_env, point_mass_step
from icml26zoo.validation import check_choice, check_int, check_non_negative, check_positive

__all__ = ["TASK_AXES", "PGConfig", "a2c_policy", "a2c_train_tasks", "episode_return", "evaluate_tasks",
           "meta_train", "start_states", "train_task",
           "train_tasks"]

TASK_AXES = PointMassTask(goal=0, rotation=0, damping=None, dt=None)  # vmap axes of stacked tasks


class PGConfig(NamedTuple):
    """The policy-gradient loop: Adam steps, learning rate, start states per step, episode length, start
    spread (positions uniform in [−spread, spread]², zero velocity) and the gradient-norm clip."""

    steps: int = 300
    learning_rate: float = 3e-3
    batch_size: int = 16
    episode_length: int = 50
    start_spread: float = 0.5
    clip_norm: float = 1.0

    def check(self) -> PGConfig:
        for name in ("steps", "batch_size", "episode_length"):
            check_int(name, getattr(self, name))
        check_positive("learning_rate", self.learning_rate, finite=True)
        check_non_negative("start_spread", self.start_spread, finite=True)
        check_positive("clip_norm", self.clip_norm)
        return self


def start_states(key: jax.Array, batch: int, spread: float) -> jax.Array:
    """[batch, 4] start states: positions uniform in [−spread, spread]², zero velocity."""
    pos = jax.random.uniform(key, (batch, 2), minval=-spread, maxval=spread)
    return jnp.concatenate([pos, jnp.zeros((batch, 2))], axis=1)


def episode_return(policy: Any, task: PointMassTask, starts: jax.Array, length: int) -> jax.Array:
    """Mean over start states [B, 4] of the undiscounted return of `length` steps of `policy` ([B, 4] ->
    [B, 2]) on `task`, differentiable through the dynamics."""
    step = jax.vmap(point_mass_step, in_axes=(0, 0, None))

    def body(states: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
        states, reward = step(states, policy(states), task)
        return states, reward

    _, rewards = jax.lax.scan(body, starts, None, length=length)
    return jnp.mean(jnp.sum(rewards, axis=0))


def _fit(loss: Any, params: Any, key: jax.Array, pg: PGConfig, tx: optax.GradientTransformation) -> tuple:
    """`pg.steps` clipped-Adam steps on loss(params, starts); returns (params, per-step loss [steps])."""

    def body(carry: tuple, k: jax.Array) -> tuple[tuple, jax.Array]:
        params, state = carry
        value, grads = jax.value_and_grad(loss)(params, start_states(k, pg.batch_size, pg.start_spread))
        # optax's bias correction mixes Python floats with the int32 step count (strict promotion refuses it).
        with jax.numpy_dtype_promotion("standard"):
            updates, state = tx.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), value

    (params, _), losses = jax.lax.scan(body, (params, tx.init(params)), jax.random.split(key, pg.steps))
    return params, losses


def train_task(params: dict[str, Any], task: PointMassTask, key: jax.Array, *, config: apb.APBConfig,
               pg: PGConfig, mode: str = "apb") -> tuple[dict[str, Any], jax.Array]:
    """Trains one task's policy: the task layers only (mode "apb", backbone frozen and masked) or everything
    (mode "full"). Returns (params, per-step negative return [steps])."""
    tx = apb.optimizer(optax.chain(optax.clip_by_global_norm(pg.clip_norm), optax.adam(pg.learning_rate)),
                       mode=mode)

    def loss(p: dict[str, Any], starts: jax.Array) -> jax.Array:
        return -episode_return(lambda s: apb.action(p, s, config, mode=mode), task, starts, pg.episode_length)

    return _fit(loss, params, key, pg, tx)


@functools.partial(jax.jit, static_argnames=("config", "pg", "mode"))
def train_tasks(heads: dict[str, jax.Array], backbone: list, tasks: PointMassTask, keys: jax.Array, *,
                config: apb.APBConfig, pg: PGConfig, mode: str = "apb") -> tuple[dict[str, Any], jax.Array]:
    """`train_task` on K tasks at once from one shared starting backbone: heads, tasks and keys stacked on a
    leading axis K. Returns (params with every leaf stacked [K, ...], losses [K, steps])."""

    def one(head: dict, task: PointMassTask, key: jax.Array) -> tuple:
        return train_task({"task": head, "backbone": backbone}, task, key, config=config, pg=pg, mode=mode)

    return jax.vmap(one, in_axes=(0, TASK_AXES, 0))(heads, tasks, keys)


@functools.partial(jax.jit, static_argnames=("config", "length", "zero"))
def evaluate_tasks(params: dict[str, Any], tasks: PointMassTask, starts: jax.Array, *, config: apb.APBConfig,
                   length: int, zero: bool = False) -> jax.Array:
    """Return per task [K] of the deterministic policies (params stacked [K, ...]) from fixed starts [B, 4];
    with `zero`, the zero-action policy's return instead."""

    def one(p: dict, task: PointMassTask) -> jax.Array:
        def policy(s: jax.Array) -> jax.Array:
            a = apb.action(p, s, config, mode="full")
            return jnp.zeros_like(a) if zero else a
        return episode_return(policy, task, starts, length)

    return jax.vmap(one, in_axes=(0, TASK_AXES))(params, tasks)


@functools.partial(jax.jit, static_argnames=("config", "pg"))
def meta_train(backbone: list[dict[str, jax.Array]], heads: dict[str, jax.Array], tasks: PointMassTask,
               key: jax.Array, *, config: apb.APBConfig, pg: PGConfig) -> tuple[list, dict, jax.Array]:
    """Trains the shared backbone with the stacked heads of K tasks (leading axis K on `heads` and on the
    task's goal and rotation) to maximise the mean return over the tasks. Returns (backbone, heads, per-step
    negative mean return [steps])."""
    tx = optax.chain(optax.clip_by_global_norm(pg.clip_norm), optax.adam(pg.learning_rate))

    def one(head: dict, task: PointMassTask, bb: list, starts: jax.Array) -> jax.Array:
        p = {"task": head, "backbone": bb}
        return -episode_return(lambda s: apb.action(p, s, config, mode="full"), task, starts, pg.episode_length)

    def loss(p: dict[str, Any], starts: jax.Array) -> jax.Array:
        return jnp.mean(jax.vmap(one, in_axes=(0, TASK_AXES, None, None))(p["heads"], tasks, p["backbone"],
                                                                            starts))

    params, losses = _fit(loss, {"backbone": backbone, "heads": heads}, key, pg, tx)
    return params["backbone"], params["heads"], losses


@functools.cache
def a2c_policy(mode: str) -> actor_critic.PolicyApply:
    """APB as an actor-critic policy: (params, obs [..., d_o]) -> (μ, log σ) [..., d_a] from a "gaussian"
    head; in "apb" mode no gradient reaches the backbone (cached per mode: the jitted loop keys on it)."""
    check_choice("mode", mode, apb.MODES)

    def policy(params: dict[str, Any], obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return actor_critic.split_gaussian(apb.apply(params, obs, mode=mode))
    return policy


@functools.partial(jax.jit, static_argnames=("config", "a2c", "learning_rate", "mode", "episode_length"))
def a2c_train_tasks(heads: dict[str, jax.Array], backbone: list, tasks: PointMassTask, keys: jax.Array, *,
                    config: apb.APBConfig, a2c: actor_critic.A2CConfig, learning_rate: float = 1e-3,
                    mode: str = "apb", episode_length: int = 50) -> tuple[dict[str, Any], actor_critic.Trace]:
    """Trains K tasks' policies (heads and keys stacked [K, ...], tasks' goal [K, 2] and rotation [K, 2, 2])
    from one shared backbone with the actor-critic on the point-mass gymnax environment: the task layers only
    ("apb": `apb.optimizer` masks the backbone) or everything ("full"); clipped Adam(learning_rate) for the
    policy, a width-64 critic per task. `config.head` must be "gaussian". Returns (params stacked [K, ...],
    Trace with fields [K, a2c.updates])."""
    if config.head != "gaussian":
        raise ValueError(f"config.head must be 'gaussian' for the actor-critic, got {config.head!r}")
    env, base = point_mass_env(PointMassTask(jnp.zeros(2), jnp.eye(2)), episode_length=episode_length)
    tx = apb.optimizer(optax.chain(optax.clip_by_global_norm(0.5), optax.adam(learning_rate)), mode=mode)
    fit = actor_critic.make_train(env, a2c_policy(mode), policy_tx=tx, config=a2c)

    def one(head: dict, goal: jax.Array, rotation: jax.Array, key: jax.Array) -> tuple:
        k_value, k_fit = jax.random.split(key)
        params, _, trace = fit(k_fit, base.replace(goal=goal, rotation=rotation),
                               {"task": head, "backbone": backbone}, actor_critic.value_init(k_value, config.obs_dim))
        return params, trace

    return jax.vmap(one)(heads, tasks.goal, tasks.rotation, keys)
