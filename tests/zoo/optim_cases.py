"""Shared pieces of the optimizer battery (test_optim_battery.py, test_optim_multisteps.py): every registered
optimizer built from a small OptimConfig, the update call with `value=` (the loss, which Polyak-type optimizers
need and the others ignore), a small parameter tree and two losses on it."""

import contextlib

import jax
import jax.numpy as jnp
import optax

from icml26zoo.registry import OPTIMIZERS
from icml26zoo.train.config import OptimConfig

NAMES = OPTIMIZERS.names()
# Peak learning rates for the convergence checks (a cosine schedule decays them to 0); anything
# registered later gets DEFAULT_LR.
LEARNING_RATES = {"sgd": 0.1, "cubic_damped_sgd": 0.1, "sam_polyak": 1.0, "lion": 0.03, "muon": 0.3}
DEFAULT_LR = 0.05
NOT_STRICT_CLEAN = {"adam", "adamw"}  # optax.scale_by_adam's bias correction (test_optim_battery.py)


@contextlib.contextmanager
def standard_promotion():
    """optax's Adam bias correction fails under the suite's strict promotion (see test_optim_battery.py)."""
    with jax.numpy_dtype_promotion("standard"):
        yield


def build(name, learning_rate=None, **overrides):
    """The registered optimizer `name` with a tiny config; `learning_rate` may be a schedule."""
    cfg = OptimConfig(name=name, learning_rate=LEARNING_RATES.get(name, DEFAULT_LR), weight_decay=1e-4,
                      **overrides)
    return OPTIMIZERS.get(name)(cfg.learning_rate if learning_rate is None else learning_rate, cfg), cfg


def update(tx, grads, state, params, loss):
    return optax.with_extra_args_support(tx).update(grads, state, params, value=loss)


def params_tree(dtype=jnp.float32):
    key = jax.random.PRNGKey(0)
    return {"w": (0.5 * jax.random.normal(key, (8, 16))).astype(dtype), "b": jnp.zeros(16, dtype),
            "v": (0.5 * jax.random.normal(jax.random.fold_in(key, 1), (16, 8))).astype(dtype)}


def quadratic(params):
    """Σ_leaves ½ Σ d_i (p_i − t_i)², curvatures d in [0.5, 2], targets in [−1, 1]."""
    def leaf(p):
        flat = p.astype(jnp.float32).reshape(-1)
        d = jnp.linspace(0.5, 2.0, flat.size)
        return 0.5 * jnp.sum(d * (flat - jnp.linspace(-1.0, 1.0, flat.size)) ** 2)
    return sum(leaf(p) for p in jax.tree.leaves(params))


def mlp_loss(params, data=None):
    """Regression 8 → 16 (tanh) → 8 on 64 fixed random points, targets from a random teacher."""
    x = jax.random.normal(jax.random.PRNGKey(2), (64, 8))
    teacher = jnp.sin(x @ jax.random.normal(jax.random.PRNGKey(3), (8, 8)))
    pred = jnp.tanh(x @ params["w"] + params["b"]) @ params["v"]
    return jnp.mean((pred - teacher) ** 2)
