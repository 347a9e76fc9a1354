"""Hard, soft and straight-through selection of the best candidate, with the adaptive temperature of the GCF layer
("Universal Representation of Generalized Convex Functions and their Gradients", arXiv 2509.04477).

scores [B, J] (one row per input, one column per candidate), candidates [J, m]. For sense "max":
    hard   value = max_j s_j, choice = y_{argmax}                     (the exact finitely-convex function)
    soft   w = softmax(β·s), value = Σ_j w_j s_j, choice = Σ_j w_j y_j  (a weighted average, not a log-sum-exp)
    ste    the hard value and choice forward, the soft ones' gradient backward
β is per row: β = clip(temp / span, temp, max_effective_temp) with span = max_j s_j − min_j s_j (at least 1e-3), so a
row whose scores are close together is sharpened, and a row with a wide span keeps at least the base temperature.
The soft value is below the max by at most H(w)/β ≤ log J / β. Sense "min" is the same on −scores.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_choice, check_positive

MODES = ("hard", "soft", "ste")
SENSES = ("max", "min")
MIN_SPAN = 1e-3


class Selection(NamedTuple):
    """value [B]: the selected score; choice [B, m]: the selected (or weighted) candidate; index [B]: the
    arg-best candidate (every mode); weights [B, J]: the soft weights (one-hot in hard mode)."""

    value: jax.Array
    choice: jax.Array
    index: jax.Array
    weights: jax.Array


def adaptive_temperature(scores: jax.Array, temp: float, max_effective_temp: float) -> jax.Array:
    """β [B, 1] = clip(temp / span, temp, max_effective_temp) of scores [B, J] (module docstring)."""
    span = jnp.max(scores, axis=-1, keepdims=True) - jnp.min(scores, axis=-1, keepdims=True)
    beta = temp / jnp.maximum(span, MIN_SPAN)
    # jnp.clip raises to `temp` first and then caps, so a base temperature above the cap is capped.
    return jnp.clip(beta, temp, max_effective_temp)


def _select_max(scores: jax.Array, candidates: jax.Array, mode: str, temp: float,
                max_effective_temp: float) -> Selection:
    index = jnp.argmax(scores, axis=-1)
    # The chosen score by index, not jnp.max: max's gradient divides by the count of entries equal to the max, and
    # when the compiler evaluates the scores twice a last-bit difference left that count 0 (an infinite gradient).
    hard_value = jnp.take_along_axis(scores, index[:, None], axis=-1)[:, 0]
    hard_choice = candidates[index]
    if mode == "hard":
        return Selection(hard_value, hard_choice, index, jax.nn.one_hot(index, scores.shape[-1], dtype=scores.dtype))
    beta = jax.lax.stop_gradient(adaptive_temperature(scores, temp, max_effective_temp))
    weights = jax.nn.softmax(beta * scores, axis=-1)
    soft_value = jnp.sum(weights * scores, axis=-1)
    soft_choice = weights @ candidates
    if mode == "soft":
        return Selection(soft_value, soft_choice, index, weights)
    value = soft_value + jax.lax.stop_gradient(hard_value - soft_value)
    choice = soft_choice + jax.lax.stop_gradient(hard_choice - soft_choice)
    return Selection(value, choice, index, weights)


def select(scores: jax.Array, candidates: jax.Array, *, sense: str = "max", mode: str = "hard", temp: float = 50.0,
           max_effective_temp: float = 5000.0) -> Selection:
    """Select among candidates [J, m] by scores [B, J] (module docstring); sense "max" or "min"."""
    check_choice("sense", sense, SENSES)
    check_choice("mode", mode, MODES)
    check_positive("temp", temp, finite=True)
    check_positive("max_effective_temp", max_effective_temp, finite=True)
    if scores.ndim != 2 or candidates.ndim != 2 or scores.shape[1] != candidates.shape[0]:
        raise ValueError(f"scores must have shape [B, J] and candidates [J, m] with the same J, got scores "
                         f"{list(scores.shape)} and candidates {list(candidates.shape)}")
    if sense == "max":
        return _select_max(scores, candidates, mode, temp, max_effective_temp)
    flipped = _select_max(-scores, candidates, mode, temp, max_effective_temp)
    return flipped._replace(value=-flipped.value)
