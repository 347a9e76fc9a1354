"""A single buyer's menu as a GCF (arXiv 2509.04477, its mechanism-design application; RochetNet is the case
k(x, y) = ⟨x, y⟩ with allocations in [0, 1]^m).

Menu item j: allocation y_j (the candidate) at price b_j (the intercept), plus the default item (0, 0). A buyer of type
x takes the item that maximises k(x, y_j) − b_j, so u(x) = max_j [k(x, y_j) − b_j] is her utility: incentive
compatibility holds by construction (she already takes her best item) and the default makes u ≥ 0 (individual
rationality). The seller's revenue from type x is what she pays, k(x, y_{j*}) − u(x) = b_{j*} (in soft mode, the
weighted price Σ_j w_j b_j).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.convex.finite import FiniteConvex, with_default


class Outcome(NamedTuple):
    """utility [B], allocation [B, m], payment [B] of the buyer types."""

    utility: jax.Array
    allocation: jax.Array
    payment: jax.Array


def menu_outcome(menu: FiniteConvex, types: jax.Array, *, mode: str | None = None) -> Outcome:
    """What each type x [B, m] takes from the menu (a FiniteConvex with sense "max"), in the menu's mode or `mode`."""
    if menu.sense != "max":
        raise ValueError(f"a menu is a FiniteConvex with sense 'max', got sense {menu.sense!r}")
    mode = menu.mode if mode is None else mode
    selection = menu.select(types, mode=mode)
    _, prices = with_default(menu.active_candidates(), menu.intercepts[...], menu.default)
    payment = selection.weights @ prices  # one-hot weights in hard mode: the chosen price
    if mode == "ste":
        payment = payment + jax.lax.stop_gradient(prices[selection.index] - payment)
    return Outcome(selection.value, selection.choice, payment)


def revenue(menu: FiniteConvex, types: jax.Array, *, mode: str | None = None) -> jax.Array:
    """Mean payment over types x [B, m]."""
    return jnp.mean(menu_outcome(menu, types, mode=mode).payment)
