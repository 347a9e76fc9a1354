"""`checked(op)`: the ops' value checks inside `jit`, built on `jax.experimental.checkify`.

The api value checks (finite gates and decays within their ranges, finite `beta`, `eta`, `scale`) read
concrete arrays; under `jit` the values are unknown and the checks are skipped, so a NaN gate passes
silently. Wrapping an op in `checked` traces it with those checks turned into `checkify.check`s and raises
the first failure when the compiled function runs:

    step = jax.jit(checked(gated_delta_rule))
    step(q, k, v, beta=beta_with_nan)   # raises: gated_delta_rule: `beta` must be finite and in [0, 2]; ...

Under `jit` the error surfaces as a `jax.errors.JaxRuntimeError` whose message is the check's; called
eagerly, the plain `ValueError` of the api is raised before anything is computed. The checks cost one
reduction per checked input, a host callback per call and a second trace of `fn` (its work is removed
again by XLA): an opt-in for debugging runs, not a default.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import numpy as np
from jax.experimental import checkify

from icml26zoo.kernels._common import checks

Out = TypeVar("Out")


def _throw(error: checkify.Error) -> None:
    """Raises the checkify error (runs on the host, with concrete error values)."""
    error.throw()


def _is_array(x: Any) -> bool:
    return isinstance(x, jax.Array | np.ndarray)


def _check_pass(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> checkify.Error:
    """The checkify error of `fn(*args, **kwargs)` with the value checks on; its outputs are dropped.

    The arrays go in without gradient and everything else (implementation names, chunk sizes) stays static.
    Dropping the outputs lets XLA remove the op's work from this pass, and keeping autodiff out of it avoids
    linearizing checkify's error state through the ops' inner `jit`s, which JAX does not support.
    """
    leaves, tree = jax.tree.flatten((args, kwargs))
    where = [i for i, x in enumerate(leaves) if _is_array(x)]

    def only_checks(arrays: list[jax.Array]) -> None:
        full = list(leaves)
        for i, x in zip(where, arrays, strict=True):
            full[i] = x
        call_args, call_kwargs = jax.tree.unflatten(tree, full)
        fn(*call_args, **call_kwargs)

    arrays = [jax.lax.stop_gradient(leaves[i]) for i in where]
    with checks.checkify_enabled():
        error, _ = checkify.checkify(only_checks)(arrays)
    return error


def checked(fn: Callable[..., Out]) -> Callable[..., Out]:
    """`fn` (a kernels op, or any function calling ops) with the ops' value checks enforced under `jit` too.

    Returns a function with `fn`'s signature and results. Under an outer `jax.jit` (or `grad`) a failed check
    raises when the compiled function runs: a `JaxRuntimeError` carrying the op's message, which names the
    op and the argument. Called on concrete arrays, `fn` runs as it is and the api's own ValueError is raised.
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Out:
        if all(checks.is_concrete(x) for x in jax.tree.leaves((args, kwargs)) if _is_array(x)):
            return fn(*args, **kwargs)
        error = _check_pass(fn, args, kwargs)
        # Traced error values: raise from a host callback once the compiled program has computed them.
        jax.debug.callback(_throw, error)
        return fn(*args, **kwargs)

    return run
