"""Residual sublayer wrapper implementing the norm placement switch.

pre       x + f(norm(x))                  (GPT-2, Llama)
post      norm(x + f(x))                  (original Transformer)
sandwich  x + norm2(f(norm1(x)))          (CogView / Gemma 2 style)
none      x + f(x)                        (no normalization; ablations)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from flax import nnx

from icml26zoo.layers.norms import build_norm
from icml26zoo.validation import check_choice

NORM_PLACEMENTS = ("pre", "post", "sandwich", "none")


class Residual(nnx.Module):
    """Wraps a sublayer `f: h [B, T, D] -> (y [B, T, D], aux)` with a residual and norms of kind `norm`
    ("rmsnorm", the default, or "dyt"; see `layers.norms.build_norm`).

    `aux` (e.g. a mixer's updated decode cache) passes through untouched, so the same wrapper serves
    sublayers with and without state.
    """

    def __init__(self, placement: str, dim: int, *, eps: float = 1e-6, norm: str = "rmsnorm") -> None:
        check_choice("norm_placement", placement, NORM_PLACEMENTS)
        self.placement = placement
        # Only the norms a placement uses exist, so parameter counts reflect the architecture.
        self.norm = build_norm(norm, dim, eps=eps) if placement in ("pre", "post", "sandwich") else None
        self.norm_out = build_norm(norm, dim, eps=eps) if placement == "sandwich" else None

    def __call__(
        self, x: jax.Array, f: Callable[[jax.Array], tuple[jax.Array, Any]]
    ) -> tuple[jax.Array, Any]:
        """x: [B, T, D] -> (x + sublayer, aux) with the configured placement."""
        if self.placement == "pre":
            y, aux = f(self.norm(x))
            return x + y, aux
        if self.placement == "post":
            y, aux = f(x)
            return self.norm(x + y), aux
        if self.placement == "sandwich":
            y, aux = f(self.norm(x))
            return x + self.norm_out(y), aux
        y, aux = f(x)
        return x + y, aux
