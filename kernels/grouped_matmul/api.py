"""Public entry point of the grouped matmul (mixture-of-experts dispatch): validation and dispatch."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common import checks
from icml26zoo.kernels._dispatch import ALL_BACKENDS, XLA_EVERYWHERE, Implementations, select_implementation
from icml26zoo.kernels.grouped_matmul import reference, xla

_NAME = "grouped_matmul"

# name -> (function, backends). "reference" is the one-hot contraction (O(M·G·N) memory), never a default.
_IMPLEMENTATIONS: Implementations = {
    "reference": (reference.grouped_matmul, ALL_BACKENDS),
    "xla": (xla.grouped_matmul, ALL_BACKENDS),
}
IMPLEMENTATIONS = tuple(_IMPLEMENTATIONS)


def _check(x: jax.Array, w: jax.Array, group_ids: jax.Array) -> None:
    """Raises ValueError naming the argument, its shape or dtype and what was expected."""
    checks.require_arrays(_NAME, {"x": x, "w": w, "group_ids": group_ids})
    if x.ndim != 2:
        checks.fail_shape(_NAME, "x", x.shape, "[M, K]")
    if w.ndim != 3 or w.shape[1] != x.shape[1]:
        checks.fail_shape(_NAME, "w", w.shape, f"[G, K, N] with K = {x.shape[1]} (x's)")
    if group_ids.shape != x.shape[:1]:
        checks.fail_shape(_NAME, "group_ids", group_ids.shape, f"[M] = ({x.shape[0]},)")
    if not jnp.issubdtype(group_ids.dtype, jnp.integer):
        raise ValueError(f"{_NAME}: `group_ids` has dtype {group_ids.dtype}, expected an integer dtype")
    checks.require_floating(_NAME, {"x": x, "w": w})


def grouped_matmul(
    x: jax.Array, w: jax.Array, group_ids: jax.Array, *, implementation: None | str | Sequence[str] = None
) -> jax.Array:
    """Row m of x times the matrix of its group: out[m] = x[m] @ w[group_ids[m]].

    Args:
      x: [M, K] rows (e.g. tokens, one row per (token, expert slot)), any floating dtype.
      w: [G, K, N] one matrix per group (expert); cast to x's dtype.
      group_ids: [M] int in [0, G]. The id G marks a dropped row (an assignment over an expert's capacity):
        its output row is exactly zero and it contributes nothing to the gradients.
      implementation: None (the backend default, "xla"), "reference" (one-hot contraction, O(M·G·N) memory),
        "xla" (`jax.lax.ragged_dot` on rows sorted by group, memory independent of G), or a sequence.
    Returns:
      [M, N] in x's dtype, accumulated in float32.

    Ids outside [0, G] are not checked (they would need concrete values); the reference path treats them
    as dropped rows.
    """
    _check(x, w, group_ids)
    fn = select_implementation(_NAME, implementation, _IMPLEMENTATIONS, XLA_EVERYWHERE)
    return fn(x, w, group_ids)
