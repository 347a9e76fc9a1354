"""The pure training and evaluation steps, and the train state they carry.

`train_step(state, batch) -> (state, metrics)` is one optimizer micro-step; the trainer jits it with the
state donated and the shardings of `train.sharding`. The model is rebuilt from its graph definition and
the parameter dict inside the step (`nnx.merge`), so the step is an ordinary JAX function of arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from zoo.losses import weighted_cross_entropy


class TrainState(NamedTuple):
    """Everything a run needs to continue bit-exactly (with the data iterator's state)."""

    step: jax.Array  # int32 scalar: micro-steps taken
    params: dict  # pure nested dict of float32 arrays (nnx.to_pure_dict of the model's Params)
    opt_state: Any  # the optax state
    rng: jax.Array  # uint32 raw PRNG key data (jax.random.key_data), for stochastic models


def model_logits(graphdef: nnx.GraphDef, params: dict, batch: dict[str, jax.Array]) -> jax.Array:
    model = nnx.merge(graphdef, params)
    return model(batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"])


def default_update(loss_fn, params, batch, opt_state, optimizer):
    """One value_and_grad, then `optimizer.update`; returns (loss, grads, updates, opt_state)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return loss, grads, updates, opt_state


def make_train_step(
    graphdef: nnx.GraphDef,
    optimizer: optax.GradientTransformation,
    schedule: Callable,
    accum_steps: int,
    update: Callable | None = None,
) -> Callable:
    """Returns `train_step(state, batch) -> (state, metrics)` for a fixed model graph and optimizer.

    `update(loss_fn, params, batch, opt_state, optimizer) -> (loss, grads, updates, opt_state)` replaces
    the default single-gradient update for optimizers that need more (see `train.optim.custom_update`).
    """
    update = default_update if update is None else update

    def train_step(state: TrainState, batch: dict[str, jax.Array]) -> tuple[TrainState, dict[str, jax.Array]]:
        caller_promotion = jax.config.jax_numpy_dtype_promotion

        def loss_fn(params, batch):
            # The model traces under the caller's promotion rules (strict in the tests), not optax's.
            with jax.numpy_dtype_promotion(caller_promotion):
                loss_sum, weight, _ = weighted_cross_entropy(
                    model_logits(graphdef, params, batch), batch["targets"], batch["weights"]
                )
                return loss_sum / jnp.maximum(weight, 1.0)

        # optax mixes Python floats with int32 step counts (Adam's bias correction, schedules), which
        # strict dtype promotion rejects.
        with jax.numpy_dtype_promotion("standard"):
            loss, grads, updates, opt_state = update(loss_fn, state.params, batch, state.opt_state, optimizer)
            learning_rate = schedule(state.step // accum_steps)
        weight = jnp.sum(batch["weights"])
        params = optax.apply_updates(state.params, updates)
        rng = jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step))
        metrics = {
            "train/loss": loss,
            "train/tokens": weight,
            "train/grad_norm": optax.global_norm(grads),
            "train/learning_rate": learning_rate,
        }
        return TrainState(state.step + 1, params, opt_state, rng), metrics

    return train_step


def make_eval_step(graphdef: nnx.GraphDef) -> Callable:
    """Returns `eval_step(params, batch) -> sums` of loss (nats), weight and correct predictions."""

    def eval_step(params: dict, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
        loss_sum, weight, correct = weighted_cross_entropy(
            model_logits(graphdef, params, batch), batch["targets"], batch["weights"]
        )
        return {"loss_sum": loss_sum, "weight": weight, "correct": correct}

    return eval_step


def summarize_eval(sums: dict[str, float], bytes_per_token: float | None) -> dict[str, float]:
    """Mean loss, accuracy and (for byte-level data) bits per byte from summed eval statistics."""
    weight = max(sums["weight"], 1.0)
    loss = sums["loss_sum"] / weight
    out = {"eval/loss": loss, "eval/accuracy": sums["correct"] / weight}
    if bytes_per_token:
        out["eval/bits_per_byte"] = loss / math.log(2) / bytes_per_token
    return out
