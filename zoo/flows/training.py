"""Fitting a velocity network to a fixed set of (design, label) pairs with optax (Adam, cosine decay).

The shared trainer trains token models on token batches; a flow on continuous vectors needs none of its data
pipeline, so this is a plain optax loop over a pure, jitted step on the network's parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26zoo.flows.pairs import Velocity, check_designs_and_labels, pairing_loss, state_dim
from icml26zoo.flows.velocity import VelocityMLP
from icml26zoo.validation import check_int, check_positive

__all__ = ["FitConfig", "Fitted", "fit_velocity"]


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """The network (width, depth) and its training: `steps` Adam steps of `batch_size` pairs, learning rate
    cosine-decayed from `learning_rate` to zero, the mean loss recorded every `log_every` steps."""

    width: int = 256
    depth: int = 4
    steps: int = 3000
    batch_size: int = 256
    learning_rate: float = 1e-3
    log_every: int = 100

    def __post_init__(self) -> None:
        for name in ("width", "depth", "steps", "batch_size", "log_every"):
            check_int(name, getattr(self, name))
        check_positive("learning_rate", self.learning_rate)
        if self.steps % self.log_every:
            raise ValueError(f"steps must be a multiple of log_every = {self.log_every} (the loop runs chunks "
                             f"of log_every steps), got {self.steps}")


@dataclasses.dataclass
class Fitted:
    """A trained field: `velocity(z [B, D], t [B])` with the parameters bound, `apply(params, z, t)` for
    jitted code that takes the parameters as an argument, and the logged (step, mean loss) curve."""

    model: VelocityMLP
    params: nnx.State
    apply: Callable[[nnx.State, jax.Array, jax.Array], jax.Array]
    curve: list[tuple[int, float]]

    @property
    def velocity(self) -> Velocity:
        return lambda z, t: self.apply(self.params, z, t)


def fit_velocity(x: jax.Array, y: jax.Array, pairing: str, config: FitConfig, *, seed: int = 0) -> Fitted:
    """Trains a `VelocityMLP` with the CFM loss of `pairing` on the pairs x [N, P], y [N, L] (minibatches
    drawn with replacement); returns it with its loss curve."""
    p, n_labels = check_designs_and_labels(x, y, pairing)
    check_int("seed", seed, minimum=0)
    init_key, data_key = jax.random.split(jax.random.key(seed))
    model = VelocityMLP(state_dim(p, n_labels, pairing), width=config.width, depth=config.depth,
                        rngs=nnx.Rngs(params=init_key))
    graphdef, params = nnx.split(model, nnx.Param)

    def apply(params: nnx.State, z: jax.Array, t: jax.Array) -> jax.Array:
        return nnx.merge(graphdef, params)(z, t)

    schedule = optax.cosine_decay_schedule(config.learning_rate, config.steps)
    optimizer = optax.adam(schedule)

    def loss(params, key):
        rows_key, loss_key = jax.random.split(key)
        rows = jax.random.randint(rows_key, (config.batch_size,), 0, x.shape[0])
        return pairing_loss(lambda z, t: apply(params, z, t), x[rows], y[rows], loss_key, pairing)

    @jax.jit
    def chunk(params, opt_state, key):
        def step(carry, step_key):
            params, opt_state = carry
            value, grads = jax.value_and_grad(loss)(params, step_key)
            # optax's bias correction and schedule mix Python floats with the int32 step count.
            with jax.numpy_dtype_promotion("standard"):
                updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), value

        (params, opt_state), values = jax.lax.scan(step, (params, opt_state), jax.random.split(key, config.log_every))
        return params, opt_state, jnp.mean(values)

    opt_state = optimizer.init(params)
    curve = []
    done = 0
    while done < config.steps:
        data_key, key = jax.random.split(data_key)
        params, opt_state, mean_loss = chunk(params, opt_state, key)
        done += config.log_every
        curve.append((done, float(mean_loss)))
    nnx.update(model, params)
    return Fitted(model=model, params=params, apply=apply, curve=curve)
