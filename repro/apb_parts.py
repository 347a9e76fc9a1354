"""One seed of the APB experiment (`repro/apb.py`): meta-train a backbone on in-distribution point-mass
tasks, then train fresh tasks (in- and out-of-distribution goals, random action rotations) with a
random-frozen backbone, the meta-trained frozen backbone, and a fully-trained MLP of the same shape, by analytic
policy gradients ("random", "meta", "mlp") or by the zoo's actor-critic on the gymnax point mass ("a2c_random",
"a2c_meta", "a2c_mlp": same backbones, APB's "gaussian" head)."""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.rl import apb
from icml26zoo.rl.actor_critic import A2CConfig
from icml26zoo.rl.apb_train import PGConfig, a2c_train_tasks, evaluate_tasks, meta_train, start_states, train_tasks
from icml26zoo.rl.control_envs import PointMassTask, make_point_mass_task

METHODS = ("random", "meta", "mlp")
A2C_METHODS = ("a2c_random", "a2c_meta", "a2c_mlp")  # the same three, trained by the actor-critic
ALL_METHODS = METHODS + A2C_METHODS
SPLITS = {"in_dist": 1.0, "out_dist": 2.0}  # goal radius of each split (spec: ring 1 in, radius 2 out)
EVAL_STARTS = 64


@functools.partial(jax.jit, static_argnames=("count", "radius"))
def make_tasks(key: jax.Array, count: int, radius: float) -> PointMassTask:
    """`count` tasks stacked on a leading axis (goal [K, 2], rotation [K, 2, 2])."""
    tasks = jax.vmap(lambda k: make_point_mass_task(k, radius))(jax.random.split(key, count))
    return PointMassTask(goal=tasks.goal, rotation=tasks.rotation)


def _filled(curve: np.ndarray) -> list[float]:
    """A per-update return curve with NaN (no episode ended in that update) replaced by the last value seen
    (leading NaNs by the first one), so it stays plain JSON."""
    finite = np.isfinite(curve)
    if not finite.any():
        return [0.0] * len(curve)
    index = np.maximum.accumulate(np.where(finite, np.arange(len(curve)), 0))
    index[:np.argmax(finite)] = np.argmax(finite)
    return curve[index].astype(float).tolist()


def _train(method: str, heads: dict, backbone: list, tasks: PointMassTask, keys: jax.Array, *,
           config: apb.APBConfig, pg: PGConfig, a2c: A2CConfig | None, a2c_lr: float) -> tuple[dict, list[float]]:
    """One method on K tasks: (params stacked [K, ...], training-return curve: mean over tasks per step)."""
    mode = "full" if method.endswith("mlp") else "apb"
    if method in A2C_METHODS:
        params, trace = a2c_train_tasks(heads, backbone, tasks, keys, config=config._replace(head="gaussian"),
                                        a2c=a2c, learning_rate=a2c_lr, mode=mode, episode_length=pg.episode_length)
        with warnings.catch_warnings():  # an update in which no task ended an episode is NaN for every task
            warnings.simplefilter("ignore", RuntimeWarning)
            curve = np.nanmean(np.asarray(trace.episode_return), axis=0)
        return params, _filled(curve)
    params, losses = train_tasks(heads, backbone, tasks, keys, config=config, pg=pg, mode=mode)
    return params, (-np.asarray(losses).mean(axis=0)).tolist()


def run_seed(seed: int, *, config: apb.APBConfig, pg: PGConfig, meta_pg: PGConfig, meta_tasks: int,
             eval_tasks: int, methods: tuple[str, ...], a2c: A2CConfig | None = None, a2c_lr: float = 1e-3) -> dict:
    """The seed's scores: {split: {"zero": [K], method: {"return": [K], "curve": [steps]}}}; the a2c_* methods
    need `a2c` (their heads are "gaussian", initialised from the same keys)."""
    k_meta, k_tasks, k_bb, k_heads, k_train, k_starts = jax.random.split(jax.random.key(seed), 6)
    random_bb = apb.init_backbone(k_bb, config)
    backbones = {"random": random_bb, "mlp": random_bb}
    if "meta" in methods or "a2c_meta" in methods:
        heads = jax.vmap(lambda k: apb.init_task(k, config))(jax.random.split(k_heads, meta_tasks))
        train_set = make_tasks(k_meta, meta_tasks, SPLITS["in_dist"])
        backbones["meta"], _, _ = meta_train(random_bb, heads, train_set, k_train, config=config, pg=meta_pg)
    starts = start_states(k_starts, EVAL_STARTS, pg.start_spread)
    out: dict = {}
    for i, (split, radius) in enumerate(SPLITS.items()):
        tasks = make_tasks(jax.random.fold_in(k_tasks, i), eval_tasks, radius)
        keys = jax.random.split(jax.random.fold_in(k_train, i + 1), eval_tasks)
        heads = jax.vmap(lambda k: apb.init_task(k, config))(keys)
        gaussian = jax.vmap(lambda k: apb.init_task(k, config._replace(head="gaussian")))(keys)
        zero = {"task": heads, "backbone": jax.tree.map(lambda x: jnp.stack([x] * eval_tasks), random_bb)}
        length = pg.episode_length
        zero_return = evaluate_tasks(zero, tasks, starts, config=config, length=length, zero=True)
        out[split] = {"zero": np.asarray(zero_return).tolist()}
        for method in methods:
            base = method.removeprefix("a2c_")
            params, curve = _train(method, gaussian if method in A2C_METHODS else heads, backbones[base], tasks,
                                   keys, config=config, pg=pg, a2c=a2c, a2c_lr=a2c_lr)
            # apb.action reads μ only, so the Gaussian policies are scored by their deterministic action tanh(μ)
            returns = evaluate_tasks(params, tasks, starts, config=config, length=length)
            out[split][method] = {"return": np.asarray(returns).tolist(), "curve": curve}
            if base != "mlp":  # the frozen backbone must come back bit-identical from training
                same = jax.tree.map(lambda a, b: bool(jnp.all(a == b[None])), params["backbone"], backbones[base])
                out[split][method]["backbone_unchanged"] = all(jax.tree.leaves(same))
    return out
