"""The pieces of the cubic-damping reproduction: the compared methods, their damping scales, and the
ill-conditioned test problems run as one jitted scan per (problem, method) over all seeds.

Methods (name -> registered optimizer): `msgd` heavy-ball SGD (`sgd`), `cd_sgd` cubic-damped SGD, `adam`,
`cd_adam` cubic-damped Adam, `af_sgd` the adaptive-friction heavy ball (`icml26zoo.optim.cubic_damping`).

Every damping coefficient comes from one scale and one rule (the spec's "1/√c a few times the typical |v|
at the start"), fixed before any run and never tuned: a reference velocity v_ref = k · rms(g₀), k =
`damping_multiple`, with g₀ the gradient at the start, gives

- `cd_sgd`: c = 1 / v_ref²  (so every coordinate step is bounded by η v_ref);
- `af_sgd`: coupling a = (1 − μ) / v_ref² (a velocity at v_ref adds the linear friction 1 − μ once more
  per step) and temperature τ = v_ref² / 4 (the friction drains while |ṽ| < v_ref / 2);
- `cd_adam`: c = 1 / k², Adam's preconditioned step u being O(1) per coordinate at the start.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26zoo.optim import cubic_damping as cd
from icml26zoo.optim.hparams import with_standard_promotion

__all__ = ["LABELS", "METHODS", "PROBLEMS", "Problem", "make_problem", "method_options", "problem_losses",
           "transform"]

METHODS = {"msgd": "sgd", "cd_sgd": "cubic_damped_sgd", "adam": "adam", "cd_adam": "cubic_damped_adam",
           "af_sgd": "adaptive_friction_sgd"}
LABELS = {"msgd": "mSGD", "cd_sgd": "CD-SGD", "adam": "Adam", "cd_adam": "CD-Adam", "af_sgd": "AF-SGD"}
SGD_FAMILY = ("msgd", "cd_sgd", "af_sgd")
PROBLEMS = ("quadratic", "noisy_quadratic", "rosenbrock")
ROSENBROCK_START = (-1.2, 1.0)
# Learning rates per problem, set from the curvature before any run: SGD family, Adam family. The quadratic's
# eigenvalues lie in [1/condition, 1]: η = 3 puts the top mode past gradient descent's edge ηλ = 2 and inside
# the heavy ball's 2(1 + μ) = 3.8, the regime the spec names. Rosenbrock's top curvature is ~1.5e3 at the
# start and ~1e3 at the minimum: η = 2e-3 gives ηλ <= 3 there.
PROBLEM_LRS = {"quadratic": (3.0, 0.01), "noisy_quadratic": (3.0, 0.01), "rosenbrock": (2e-3, 0.01)}


@dataclasses.dataclass(frozen=True)
class Problem:
    """A test problem: `loss(x, data)` for one seed's x [D], per-seed `data` (a tree with leading axis [S]),
    starts `x0` [S, D], the reference gradient scale `g_rms` (rms of the start gradient, seed-free), the
    (SGD, Adam) learning rates, and `noise`: the std of N(0, noise²) added to every gradient coordinate
    (drawn from `keys` [S, 2]); the recorded loss is the exact one."""

    name: str
    loss: Callable[[jax.Array, Any], jax.Array]
    x0: jax.Array
    data: Any
    g_rms: float
    learning_rates: tuple[float, float]
    noise: float = 0.0
    keys: Any = None


def _quadratic_loss(x: jax.Array, data: Mapping[str, jax.Array]) -> jax.Array:
    """½ xᵀ Q diag(λ) Qᵀ x for one seed: x [D], data["q"] [D, D] orthogonal, data["lam"] [D]."""
    y = data["q"].T @ x
    return 0.5 * jnp.sum(data["lam"] * y * y)


def _rosenbrock_loss(x: jax.Array, data: Any) -> jax.Array:
    """(1 − x₀)² + 100 (x₁ − x₀²)² for one seed, x [2]."""
    del data
    return (1.0 - x[0]) ** 2 + 100.0 * (x[1] - x[0] ** 2) ** 2


def make_problem(name: str, seeds: Sequence[int], *, dim: int, condition: float, noise: float) -> Problem:
    """The problem `name` for every seed: the quadratics draw their rotation Q and start x0 ~ N(0, I) [D] from
    the seed (eigenvalues geometric in [1/condition, 1]; `noisy_quadratic` adds N(0, noise²) to each gradient
    coordinate); Rosenbrock starts at (−1.2, 1) + 0.1 N(0, I)."""
    keys = [jax.random.PRNGKey(seed) for seed in seeds]
    if name in ("quadratic", "noisy_quadratic"):
        lam = jnp.geomspace(1.0 / condition, 1.0, dim, dtype=jnp.float32)
        rotations, starts = [], []
        for key in keys:
            k_rot, k_x = jax.random.split(key)
            rotations.append(jnp.linalg.qr(jax.random.normal(k_rot, (dim, dim), jnp.float32))[0])
            starts.append(jax.random.normal(k_x, (dim,), jnp.float32))
        data = {"q": jnp.stack(rotations), "lam": jnp.tile(lam, (len(keys), 1))}
        # E‖Q diag(λ) Qᵀ x0‖² / D = mean(λ²) for x0 ~ N(0, I): the same scale for every seed.
        g_rms = math.sqrt(float(jnp.mean(lam * lam)))
        noise = noise if name == "noisy_quadratic" else 0.0
        # The gradient scale includes the noise: rms(g0)² = mean(λ²) + noise².
        g_rms = math.sqrt(g_rms**2 + noise**2)
        noise_keys = jnp.stack([jax.random.fold_in(key, 1) for key in keys])
        return Problem(name, _quadratic_loss, jnp.stack(starts), data, g_rms, PROBLEM_LRS[name], noise, noise_keys)
    if name == "rosenbrock":
        start = jnp.asarray(ROSENBROCK_START, jnp.float32)
        starts = jnp.stack([start + 0.1 * jax.random.normal(key, (2,), jnp.float32) for key in keys])
        g0 = jax.grad(_rosenbrock_loss)(start, None)
        g_rms = float(jnp.sqrt(jnp.mean(g0 * g0)))
        return Problem(name, _rosenbrock_loss, starts, jnp.zeros((len(keys),), jnp.float32), g_rms,
                       PROBLEM_LRS[name], 0.0, jnp.stack(keys))
    raise ValueError(f"problem must be one of {list(PROBLEMS)}, got {name!r}")


def method_options(method: str, *, g_rms: float, damping_multiple: float, momentum: float) -> dict[str, float]:
    """The optimizer options of `method` by the module's rule (v_ref = damping_multiple · g_rms)."""
    v_ref = damping_multiple * g_rms
    if method == "cd_sgd":
        return {"damping": 1.0 / v_ref**2}
    if method == "af_sgd":
        return {"coupling": (1.0 - momentum) / v_ref**2, "temperature": v_ref**2 / 4.0}
    if method == "cd_adam":
        return {"damping": 1.0 / damping_multiple**2}
    return {}


def transform(method: str, learning_rate: float, options: Mapping[str, float], *, momentum: float,
              b1: float = 0.9, b2: float = 0.999) -> optax.GradientTransformation:
    """The optax transformation of `method` at a constant `learning_rate` (no weight decay, no clipping)."""
    if method == "msgd":
        return optax.sgd(learning_rate, momentum=momentum)
    if method == "cd_sgd":
        return cd.cubic_damped_sgd(learning_rate, momentum=momentum, **options)
    if method == "af_sgd":
        return cd.adaptive_friction_sgd(learning_rate, momentum=momentum, **options)
    if method == "adam":
        return with_standard_promotion(optax.adam(learning_rate, b1=b1, b2=b2))
    if method == "cd_adam":
        return cd.cubic_damped_adam(learning_rate, b1=b1, b2=b2, **options)
    raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")


def problem_losses(problem: Problem, tx: optax.GradientTransformation, steps: int) -> np.ndarray:
    """Loss before each step and after the last, per seed: [S, steps + 1] (inf once a run overflows)."""

    def one_seed(x0, data, key):
        def step(carry, t):
            x, state = carry
            loss, grad = jax.value_and_grad(problem.loss)(x, data)
            if problem.noise:
                grad = grad + problem.noise * jax.random.normal(jax.random.fold_in(key, t), grad.shape, grad.dtype)
            updates, state = tx.update(grad, state, x)
            return (optax.apply_updates(x, updates), state), loss

        (x, _), losses = jax.lax.scan(step, (x0, tx.init(x0)), jnp.arange(steps))
        return jnp.concatenate([losses, problem.loss(x, data)[None]])

    losses = np.asarray(jax.jit(jax.vmap(one_seed))(problem.x0, problem.data, problem.keys), dtype=np.float64)
    return np.where(np.isfinite(losses), losses, np.inf)
