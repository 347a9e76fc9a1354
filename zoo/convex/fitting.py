"""Fitting a GCF layer (or any NNX potential) with optax: Adam on its nnx.Param leaves, the learning rate
cosine-decayed to `final_fraction` of its start, every step a fresh batch drawn from a key.
Its losses: the negative semi-discrete OT dual and the negative menu revenue.

Why a loop here and not the shared trainer: both problems draw their data from an analytic distribution inside the
step (a fresh Gaussian or uniform batch from the step's key), so there is no dataset to pipe, and the experiments
fit many small models (seeds × methods) in seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26zoo.convex.finite import FiniteConvex
from icml26zoo.convex.mechanism import revenue
from icml26zoo.convex.transport import semi_discrete_dual
from icml26zoo.validation import check_int, check_positive, check_probability

Loss = Callable[[nnx.Module, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """`steps` Adam steps from `learning_rate`, cosine-decayed to learning_rate·final_fraction; `batch_size` draws."""

    steps: int = 400
    learning_rate: float = 0.1
    batch_size: int = 512
    final_fraction: float = 0.01

    def __post_init__(self) -> None:
        check_int("steps", self.steps)
        check_positive("learning_rate", self.learning_rate, finite=True)
        check_int("batch_size", self.batch_size)
        check_probability("final_fraction", self.final_fraction)


def fit(model: nnx.Module, loss: Loss, config: FitConfig, *, seed: int) -> jax.Array:
    """Minimise loss(model, key) over the model's nnx.Param leaves in place; returns the losses [steps]."""
    graph, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = optax.adam(optax.cosine_decay_schedule(config.learning_rate, config.steps, config.final_fraction))

    @jax.jit
    def step(params, opt_state, key):
        value, grads = jax.value_and_grad(lambda p: loss(nnx.merge(graph, p, rest), key))(params)
        # optax's bias correction and schedule mix Python floats with the int32 step count.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    opt_state, losses = optimizer.init(params), []
    for key in jax.random.split(jax.random.key(seed), config.steps):
        params, opt_state, value = step(params, opt_state, key)
        losses.append(value)
    nnx.update(model, params)
    return jnp.stack(losses)


def gaussian_ot_loss(source: tuple[float, float], batch_size: int, target_weights: jax.Array) -> Loss:
    """−D(b), the negative semi-discrete dual (icml26zoo.convex.transport) of μ = N(mean, std²) in 1-D against the
    layer's candidates carrying masses target_weights [J]."""

    def loss(model: FiniteConvex, key: jax.Array) -> jax.Array:
        x = source[0] + source[1] * jax.random.normal(key, (batch_size, 1))
        return -semi_discrete_dual(model(x), model.intercepts[...], target_weights)

    return loss


def uniform_auction_loss(num_goods: int, batch_size: int) -> Loss:
    """−revenue of the menu on a batch of buyer types uniform on [0, 1]^num_goods."""

    def loss(model: FiniteConvex, key: jax.Array) -> jax.Array:
        return -revenue(model, jax.random.uniform(key, (batch_size, num_goods)))

    return loss


def mean_payment_grid(menu: FiniteConvex, points_per_axis: int) -> jax.Array:
    """The hard-mode revenue of a 2-good menu on the midpoint grid of [0, 1]² (a deterministic evaluation)."""
    axis = (jnp.arange(points_per_axis, dtype=jnp.float32) + 0.5) / points_per_axis
    types = jnp.stack(jnp.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)
    return revenue(menu, types, mode="hard")
