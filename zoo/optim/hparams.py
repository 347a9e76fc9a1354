"""Construction-time checks of optimizer hyperparameters that also pass under `optax.inject_hyperparams`.

`inject_hyperparams` calls an alias again inside `init`/`update` with its numeric hyperparameters as
arrays, which may be tracers under `jax.jit`. A tracer has no value to check, so the checks below test
what is concrete (Python numbers, concrete arrays, a schedule's value at step 0) and let tracers through:
the values they stand for were checked when the alias was first built from plain numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from icml26zoo.layers.options import build_options

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of an optimizer that has none: any name in `optim.options` is unknown."""


def optimizer_options(cfg: Any, optimizer: str, cls: type[T] = NoOptions) -> T:
    """The typed options `cls` of `optimizer`, read from `cfg.options` (the `optim.options` pairs).

    An unknown name raises ValueError naming the optimizer and the name and listing the valid ones.
    """
    return build_options(cls, cfg.options, owner=f"{optimizer} optimizer")


def concrete_value(value: Any) -> float | None:
    """`value` as a Python float when it is a concrete scalar (a schedule is read at step 0), else None."""
    if callable(value):
        value = value(0)
    try:
        return float(value)
    except TypeError:  # a tracer (ConcretizationTypeError is a TypeError) or a non-scalar array
        return None


def check_concrete(check: Callable[..., Any], name: str, value: Any) -> None:
    """Applies a `icml26zoo.validation` check (e.g. `check_positive`) to `value` when it is concrete (a number, a
    concrete array, or a schedule read at step 0); a tracer passes unchecked (see the module docstring)."""
    number = concrete_value(value)
    if number is not None:
        check(name, number)


def as_float32(value: Any) -> jnp.ndarray:
    """A hyperparameter as a float32 array: `inject_hyperparams` stores it in the params' dtype (e.g.
    bfloat16), and strict dtype promotion forbids mixing it with float32 maths implicitly."""
    return jnp.asarray(value, dtype=jnp.float32)


def with_standard_promotion(tx: Any) -> Any:
    """`tx` with init and update traced under standard dtype promotion.

    optax's Adam-family bias correction computes `decay ** count` from a Python float and an int32, which
    strict promotion (the zoo's test setting) rejects; the arithmetic is the same under standard
    promotion. Wrapping keeps the zoo's optax-based optimizers usable in strict code.
    """
    import optax

    tx = optax.with_extra_args_support(tx)

    def init_fn(params):
        with jax.numpy_dtype_promotion("standard"):
            return tx.init(params)

    def update_fn(updates, state, params=None, **extra_args):
        with jax.numpy_dtype_promotion("standard"):
            return tx.update(updates, state, params, **extra_args)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
