"""Public entry point of the grouped matmul (mixture-of-experts dispatch): validation and dispatch."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common import checks, segments
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
    num_groups = w.shape[0]
    checks.check_values(_NAME, "group_ids", group_ids, f"in [0, G] = [0, {num_groups}] (G marks a dropped row)",
                        lo=0, hi=num_groups)


def _dropped_outside(group_ids: jax.Array, num_groups: int) -> jax.Array:
    """[M] ids with every id outside [0, G) set to G (a dropped row), so that both paths read it alike."""
    return jnp.where((group_ids >= 0) & (group_ids < num_groups), group_ids, num_groups)


def _quarantine_experts(w: jax.Array, group_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """w [G, K, N] with every non-finite expert zeroed, and the [M] bool rows that read such an expert.

    Both paths contract with the weights of experts a row does not use (the one-hot sum, and ragged_dot's
    dense CPU form), where 0 · NaN is still NaN: zeroing keeps a bad expert from reaching the other rows.
    """
    bad = ~jnp.isfinite(w).reshape(w.shape[0], -1).all(axis=-1)  # [G]
    clean = jnp.where(bad[:, None, None], jnp.zeros((), w.dtype), w)
    return clean, jnp.concatenate([bad, jnp.zeros((1,), bool)])[group_ids]


def grouped_matmul(
    x: jax.Array, w: jax.Array, group_ids: jax.Array, *, implementation: None | str | Sequence[str] = None
) -> jax.Array:
    """Row m of x times the matrix of its group: out[m] = x[m] @ w[group_ids[m]].

    Args:
      x: [M, K] rows (e.g. tokens, one row per (token, expert slot)), any floating dtype.
      w: [G, K, N] one matrix per group (expert); cast to x's dtype.
      group_ids: [M] int in [0, G]. The id G marks a dropped row (an assignment over an expert's capacity):
        its output row is exactly zero and it contributes nothing to the gradients. An id outside [0, G]
        (e.g. -1) raises a ValueError on concrete ids (under `jit` only inside `kernels.checked`); unchecked,
        every path reads it as a dropped row.
      implementation: None (the backend default, "xla"), "reference" (one-hot contraction, O(M·G·N) memory),
        "xla" (`jax.lax.ragged_dot` on rows sorted by group, memory independent of G), or a sequence.
    Returns:
      [M, N] in x's dtype, accumulated in float32.

    A NaN or inf in one expert's weights reaches only the rows of that expert (NaN rows, the api zeroes the
    expert before any path runs and poisons its rows after); an expert no row uses affects nothing.
    """
    _check(x, w, group_ids)
    fn = select_implementation(_NAME, implementation, _IMPLEMENTATIONS, XLA_EVERYWHERE)
    ids = _dropped_outside(group_ids, w.shape[0])
    clean, tainted = _quarantine_experts(w, ids)
    return segments.poison(fn(x, clean, ids), tainted)
