"""One seed of the APB experiment (`repro/apb.py`): meta-train a backbone on in-distribution point-mass
tasks, then train fresh tasks (in- and out-of-distribution goals, random action rotations) with a
random-frozen backbone, the meta-trained frozen backbone, and a fully-trained MLP of the same shape."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.rl import apb
from icml26zoo.rl.apb_train import PGConfig, evaluate_tasks, meta_train, start_states, train_tasks
from icml26zoo.rl.control_envs import PointMassTask, make_point_mass_task

METHODS = ("random", "meta", "mlp")
SPLITS = {"in_dist": 1.0, "out_dist": 2.0}  # goal radius of each split (spec: ring 1 in, radius 2 out)
EVAL_STARTS = 64


@functools.partial(jax.jit, static_argnames=("count", "radius"))
def make_tasks(key: jax.Array, count: int, radius: float) -> PointMassTask:
    """`count` tasks stacked on a leading axis (goal [K, 2], rotation [K, 2, 2])."""
    tasks = jax.vmap(lambda k: make_point_mass_task(k, radius))(jax.random.split(key, count))
    return PointMassTask(goal=tasks.goal, rotation=tasks.rotation)


def run_seed(seed: int, *, config: apb.APBConfig, pg: PGConfig, meta_pg: PGConfig, meta_tasks: int,
             eval_tasks: int, methods: tuple[str, ...]) -> dict:
    """The seed's scores: {split: {"zero": [K], method: {"return": [K], "curve": [steps]}}}."""
    k_meta, k_tasks, k_bb, k_heads, k_train, k_starts = jax.random.split(jax.random.key(seed), 6)
    random_bb = apb.init_backbone(k_bb, config)
    backbones = {"random": random_bb, "mlp": random_bb}
    if "meta" in methods:
        heads = jax.vmap(lambda k: apb.init_task(k, config))(jax.random.split(k_heads, meta_tasks))
        train_set = make_tasks(k_meta, meta_tasks, SPLITS["in_dist"])
        backbones["meta"], _, _ = meta_train(random_bb, heads, train_set, k_train, config=config, pg=meta_pg)
    starts = start_states(k_starts, EVAL_STARTS, pg.start_spread)
    out: dict = {}
    for i, (split, radius) in enumerate(SPLITS.items()):
        tasks = make_tasks(jax.random.fold_in(k_tasks, i), eval_tasks, radius)
        keys = jax.random.split(jax.random.fold_in(k_train, i + 1), eval_tasks)
        heads = jax.vmap(lambda k: apb.init_task(k, config))(keys)
        zero = {"task": heads, "backbone": jax.tree.map(lambda x: jnp.stack([x] * eval_tasks), random_bb)}
        length = pg.episode_length
        zero_return = evaluate_tasks(zero, tasks, starts, config=config, length=length, zero=True)
        out[split] = {"zero": np.asarray(zero_return).tolist()}
        for method in methods:
            mode = "full" if method == "mlp" else "apb"
            params, losses = train_tasks(heads, backbones[method], tasks, keys, config=config, pg=pg, mode=mode)
            returns = evaluate_tasks(params, tasks, starts, config=config, length=length)
            out[split][method] = {"return": np.asarray(returns).tolist(),
                                  "curve": (-np.asarray(losses).mean(axis=0)).tolist()}
            if mode == "apb":  # the frozen backbone must come back bit-identical from training
                same = jax.tree.map(lambda a, b: bool(jnp.all(a == b[None])), params["backbone"], backbones[method])
                out[split][method]["backbone_unchanged"] = all(jax.tree.leaves(same))
    return out
