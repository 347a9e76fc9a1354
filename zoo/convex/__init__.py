"""Generalized convex functions (GCF) and their gradients, after "Universal Representation of Generalized Convex
Functions and their Gradients" (M. Nehzati, arXiv 2509.04477; docs/papers/gcf_layer.md).

    selection   hard / soft / straight-through max or min over candidates, the adaptive temperature
    kernels     surplus kernels k(x, y) on all pairs (inner product, ± squared distance, any callable)
    finite      f(x) = max_j or min_j [k(x, y_j) − b_j]: the pure function and the `FiniteConvex` module
    transport   the quadratic-cost Kantorovich dual (semi-discrete and with a c-transform), closed-form Gaussian maps
    mechanism   a single-buyer menu: utility, allocation, payment, revenue
    fitting     an optax loop (one jitted scan) and the OT and auction losses
"""

from icml26zoo.convex.finite import FiniteConvex, FixedCandidates, finite_convex, with_default
from icml26zoo.convex.fitting import FitConfig, fit, gaussian_ot_loss, mean_payment_grid, uniform_auction_loss
from icml26zoo.convex.kernels import (
    KERNELS,
    inner_product,
    negative_squared_distance,
    pairwise,
    resolve_kernel,
    squared_distance,
)
from icml26zoo.convex.mechanism import Outcome, menu_outcome, revenue
from icml26zoo.convex.selection import MODES, SENSES, Selection, adaptive_temperature, select

__all__ = [
    "KERNELS",
    "MODES",
    "SENSES",
    "FiniteConvex",
    "FitConfig",
    "Outcome",
    "FixedCandidates",
    "Selection",
    "adaptive_temperature",
    "finite_convex",
    "fit",
    "gaussian_ot_loss",
    "mean_payment_grid",
    "menu_outcome",
    "revenue",
    "uniform_auction_loss",
    "inner_product",
    "negative_squared_distance",
    "pairwise",
    "resolve_kernel",
    "select",
    "squared_distance",
    "with_default",
]
