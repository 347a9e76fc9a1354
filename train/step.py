"""The pure training and evaluation steps, and the train state they carry.

`train_step(state, batch) -> (state, metrics)` is one optimizer micro-step; the trainer jits it with the
state donated and the shardings of `train.sharding`. The model is rebuilt from its graph definition and
the parameter dict inside the step (`nnx.merge`), so the step is an ordinary JAX function of arrays.
What the step minimizes is the run's objective (`zoo.losses.objectives`, chosen by `TrainConfig.objective`);
the step never names a loss itself.

Objective metrics (the contract of `zoo.losses.objectives`, enforced by `split_metrics`): names without a "/"
are summable statistics (loss_sum, weight, correct, X_sum, X_weight), which only evaluation uses (the eval
step returns them, `summarize_eval` divides their totals); names with a "/" ("moe/collapse") are train
diagnostics: scalars of the batch, returned by the train step beside its own "train/..." metrics under their
own names (the loop logs their mean over each logging window), never by the eval step. A diagnostic may not
be named like the trainer's own metrics ("train/", "eval/", "perf/", "spike/") and must be a scalar. The
names an objective lists in its attribute `plotted_metrics` are drawn on the end-of-run loss plot
(`plotted_metrics(objective)`). With the default update the diagnostics come out of the same forward pass as
the gradient (`has_aux`); an optimizer with its own update (`UpdateFn`, which differentiates a scalar loss)
gets them from one more forward pass at the step's parameters, which XLA drops when there are none.

Model variables: a model's `nnx.Variable`s other than `nnx.Param` (running statistics, prototype banks, caches:
state that gradient descent never touches) travel in `TrainState.variables`. Every step and evaluation merges
them into the model; the train step reads them back from the model after the objective's forward pass, so a
model or objective that assigns to them (`variable.set_value(...)`) carries the new values into the next step.
Evaluation never writes them back. Most models have none (`variables == {}`).

Trainer arguments: an objective that lists names in its attribute `trainer_arguments` gets those keywords:
"train" (True in the train step, False in evaluation; a Python bool, so it may pick code paths) and "step"
(int32 scalar, the micro-steps taken before this one; None in evaluation and wherever no step is given).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26zoo.losses import Objective
from icml26zoo.registry import UpdateFn

LossFn = Callable[[dict, dict[str, jax.Array]], jax.Array]
# The prefixes of the trainer's own metric names, which an objective's diagnostics may not take.
RESERVED_PREFIXES = ("train/", "eval/", "perf/", "spike/")


def is_diagnostic(name: str) -> bool:
    """Whether objective metric `name` is a train diagnostic (a "/" in the name) rather than a summable statistic."""
    return "/" in name


def split_metrics(metrics: dict[str, jax.Array]) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """An objective's metrics as (summable statistics, train diagnostics) (module docstring).

    Raises ValueError naming a diagnostic with a reserved prefix or a non-scalar shape.
    """
    sums, diagnostics = {}, {}
    for name, value in metrics.items():
        if not is_diagnostic(name):
            sums[name] = value
            continue
        if name.startswith(RESERVED_PREFIXES):
            raise ValueError(f"objective metric {name!r}: a train diagnostic may not start with one of "
                             f"{list(RESERVED_PREFIXES)} (the trainer's own metrics)")
        if jnp.ndim(value) != 0:
            raise ValueError(f"objective metric {name!r}: a train diagnostic must be a scalar, got shape "
                             f"{jnp.shape(value)}")
        diagnostics[name] = jnp.asarray(value, jnp.float32)
    return sums, diagnostics


def plotted_metrics(objective: Callable[..., Any]) -> tuple[str, ...]:
    """The diagnostics `objective` asks to have drawn on the loss plot (its `plotted_metrics`; an objective with
    its options bound by `functools.partial` is looked through)."""
    names = getattr(getattr(objective, "func", objective), "plotted_metrics", ())
    bad = [name for name in names if not isinstance(name, str) or not is_diagnostic(name)]
    if bad:
        raise ValueError(f"plotted_metrics must name train diagnostics (names with a '/'), got {bad}")
    return tuple(names)


TRAINER_ARGUMENTS = ("train", "step")


class TrainState(NamedTuple):
    """Everything a run needs to continue bit-exactly (with the data iterator's state)."""

    step: jax.Array  # int32 scalar: micro-steps taken
    params: dict  # pure nested dict of float32 arrays (nnx.to_pure_dict of the model's Params)
    opt_state: Any  # the optax state
    rng: jax.Array  # uint32 raw PRNG key data (jax.random.key_data), for stochastic models
    # pure nested dict of the model's non-Param variables (module docstring); {} for most models
    variables: dict = {}  # noqa: RUF012 (never mutated: states are replaced, not edited)


class _ParamsOnlyState(NamedTuple):
    """How a state without model variables is checkpointed: the four fields checkpoints had before
    `TrainState.variables` existed, so those checkpoints still restore and new ones keep their layout."""

    step: jax.Array
    params: dict
    opt_state: Any
    rng: jax.Array


def checkpointed(state: TrainState) -> TrainState | _ParamsOnlyState:
    """The tree a checkpoint holds for `state` (or for an abstract state): without `variables` when empty."""
    return state if state.variables else _ParamsOnlyState(*state[:4])


def from_checkpoint(tree: TrainState | _ParamsOnlyState) -> TrainState:
    """The `TrainState` of a restored `checkpointed` tree."""
    return tree if isinstance(tree, TrainState) else TrainState(*tree)


def split_model(model: nnx.Module) -> tuple[nnx.GraphDef, dict, dict]:
    """(graph definition, parameters, other variables) of `model`, both as pure nested dicts."""
    graphdef, params, variables = nnx.split(model, nnx.Param, ...)
    return graphdef, nnx.to_pure_dict(params), nnx.to_pure_dict(variables)


def merge_model(graphdef: nnx.GraphDef, params: dict, variables: dict | None = None) -> nnx.Module:
    """The model `graphdef` with `params` and its non-Param `variables` (None or {}: it has none)."""
    return nnx.merge(graphdef, params, variables or {})


def trainer_arguments(objective: Callable[..., Any]) -> tuple[str, ...]:
    """The trainer arguments `objective` asks for (its `trainer_arguments`, looked through `functools.partial`)."""
    names = tuple(getattr(getattr(objective, "func", objective), "trainer_arguments", ()))
    bad = [name for name in names if name not in TRAINER_ARGUMENTS]
    if bad:
        raise ValueError(f"trainer_arguments must be among {list(TRAINER_ARGUMENTS)}, got {bad}")
    return names


def call_objective(objective: Objective, model: nnx.Module, batch: dict[str, jax.Array], rng: jax.Array, *,
                   train: bool, step: jax.Array | None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """`objective(model, batch, rng)` plus the trainer arguments it declares (module docstring)."""
    given = {"train": train, "step": step}
    return objective(model, batch, rng, **{name: given[name] for name in trainer_arguments(objective)})


def objective_loss(graphdef: nnx.GraphDef, objective: Objective, rng: jax.Array,
                   variables: dict | None = None, step: jax.Array | None = None) -> LossFn:
    """`loss_fn(params, batch) -> loss`: the objective's float32 training loss of the model `graphdef` with
    `params` (and its non-Param `variables`, held fixed) at `step`."""

    def loss_fn(params: dict, batch: dict[str, jax.Array]) -> jax.Array:
        loss, _ = call_objective(objective, merge_model(graphdef, params, variables), batch, rng, train=True,
                                 step=step)
        return loss

    return loss_fn


def step_keys(state: TrainState) -> tuple[jax.Array, jax.Array]:
    """(the objective's key for the step `state` is about to take, the next state's key).

    The next key continues the state's chain (fold in the step); the objective's key is folded from it with
    0, which the chain itself never folds in (it folds in step + 1 >= 1 next), so the two never coincide.
    """
    next_key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
    return jax.random.fold_in(next_key, 0), next_key


def default_update(
    loss_fn: LossFn, params: dict, batch: dict[str, jax.Array], opt_state: Any,
    optimizer: optax.GradientTransformation,
) -> tuple[jax.Array, dict, Any, Any]:
    """One value_and_grad, then `optimizer.update`; returns (loss, grads, updates, opt_state)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return loss, grads, updates, opt_state


def make_train_step(
    graphdef: nnx.GraphDef,
    objective: Objective,
    optimizer: optax.GradientTransformation,
    schedule: Callable,
    accum_steps: int,
    update: UpdateFn | None = None,
) -> Callable[[TrainState, dict[str, jax.Array]], tuple[TrainState, dict[str, jax.Array]]]:
    """Returns `train_step(state, batch) -> (state, metrics)` minimizing `objective` with `optimizer`.

    metrics: "train/loss", "train/tokens", "train/grad_norm", "train/learning_rate" and the objective's train
    diagnostics under their own names (module docstring).
    `update(loss_fn, params, batch, opt_state, optimizer) -> (loss, grads, updates, opt_state)` replaces
    the default single-gradient update for optimizers that declare their own (`zoo.registry.OPTIMIZERS`).
    """

    def train_step(state: TrainState, batch: dict[str, jax.Array]) -> tuple[TrainState, dict[str, jax.Array]]:
        caller_promotion = jax.config.jax_numpy_dtype_promotion
        objective_key, next_key = step_keys(state)

        def loss_and_diagnostics(params: dict, batch: dict[str, jax.Array]) -> tuple[jax.Array, tuple]:
            # The model traces under the caller's promotion rules (strict in the tests), not optax's.
            with jax.numpy_dtype_promotion(caller_promotion):
                model = merge_model(graphdef, params, state.variables)
                loss, metrics = call_objective(objective, model, batch, objective_key, train=True, step=state.step)
                # Read back after the forward pass: what the model or objective assigned is the next state's.
                variables = split_model(model)[2] if state.variables else {}
                return loss, (split_metrics(metrics)[1], variables)

        def loss_fn(params: dict, batch: dict[str, jax.Array]) -> jax.Array:
            return loss_and_diagnostics(params, batch)[0]

        # optax mixes Python floats with int32 step counts (Adam's bias correction, schedules), which
        # strict dtype promotion rejects.
        with jax.numpy_dtype_promotion("standard"):
            if update is None:
                (loss, (diagnostics, variables)), grads = jax.value_and_grad(loss_and_diagnostics, has_aux=True)(
                    state.params, batch)
                updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
            else:
                loss, grads, updates, opt_state = update(loss_fn, state.params, batch, state.opt_state, optimizer)
                diagnostics, variables = loss_and_diagnostics(state.params, batch)[1]
            learning_rate = schedule(state.step // accum_steps)
        weight = jnp.sum(batch["weights"])
        params = optax.apply_updates(state.params, updates)
        metrics = {
            "train/loss": loss,
            "train/tokens": weight,
            "train/grad_norm": optax.global_norm(grads),
            "train/learning_rate": learning_rate,
            **diagnostics,
        }
        next_state = TrainState(state.step + 1, params, opt_state, jax.random.key_data(next_key), variables)
        return next_state, metrics

    return train_step


def make_eval_step(
    graphdef: nnx.GraphDef, objective: Objective, seed: int = 0
) -> Callable[[dict, dict, dict[str, jax.Array]], dict[str, jax.Array]]:
    """Returns `eval_step(params, variables, batch) -> metrics`, the objective's summable metrics (loss_sum,
    weight, ...) with the model's non-Param `variables` ({} for most models); its train diagnostics are left out.

    Stochastic objectives get the same key, from `seed`, on every evaluation, so evaluations compare.
    """

    def eval_step(params: dict, variables: dict, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
        model = merge_model(graphdef, params, variables)
        _, metrics = call_objective(objective, model, batch, jax.random.key(seed), train=False, step=None)
        return split_metrics(metrics)[0]

    return eval_step


def summarize_eval(sums: dict[str, float], bytes_per_token: float | None) -> dict[str, float]:
    """Mean loss, accuracy (when the objective counts "correct") and (for byte-level data) bits per byte from summed
    eval statistics.

    Any other metric an objective sums as "X_sum" is reported as eval/X = X_sum / X_weight, or X_sum / weight
    when the objective gives no "X_weight" (e.g. pcfg_lm's KL to the grammar: kl_sum, kl_weight).
    """
    weight = max(sums["weight"], 1.0)
    loss = sums["loss_sum"] / weight
    out = {"eval/loss": loss}
    if "correct" in sums:  # an objective without a notion of accuracy (a reconstruction loss) gives none
        out["eval/accuracy"] = sums["correct"] / weight
    if bytes_per_token:
        out["eval/bits_per_byte"] = loss / math.log(2) / bytes_per_token
    for key, total in sums.items():
        name = key.removesuffix("_sum")
        if key.endswith("_sum") and name != "loss":
            out[f"eval/{name}"] = total / max(sums.get(f"{name}_weight", weight), 1e-12)
    return out
