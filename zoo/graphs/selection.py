"""Adaptive node feature selection (Azizpour, Navarro, Segarra, ICML 2026): permutation importance of node
features during training and the pruning rule. A RECONSTRUCTION from the paper's abstract (no code is public).

Node-permutation score of feature k: NPT_k = M(f(X)) - (1/R) Σ_r M(f(X^(π_r, k))), where X^(π, k) permutes
column k over all nodes (graph and other columns fixed) and M is a validation score (higher is better),
computed in evaluation mode. Inactive features are zeroed in the input, so shapes stay fixed under `jit`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_int, check_number, check_shape, check_unit_interval

__all__ = ["permutation_importance", "prune_features"]


def permutation_importance(score_fn: Callable[[jax.Array], jax.Array], x: jax.Array, key: jax.Array, *,
                           repeats: int = 5) -> jax.Array:
    """NPT scores [D] of the columns of x [N, D] under `score_fn` (x [N, D] -> scalar, higher is better);
    column k uses R = `repeats` node permutations drawn from `key` (the same ones for every column). Jit-able;
    a column the model ignores scores exactly 0."""
    check_shape("x", x, (None, None), "[N, D]")
    check_int("repeats", repeats)
    num_nodes, dims = x.shape
    keys = jax.random.split(key, repeats)
    # The identity order rides in the same batch as the permutations, so the unpermuted score comes from the
    # same compiled program (a fused jit may reorder sums differently across programs) and an ignored column
    # gets base - score = 0 exactly, term by term.
    shuffles = jax.vmap(lambda k: jax.random.permutation(k, num_nodes))(keys)
    orders = jnp.concatenate([jnp.arange(num_nodes)[None], shuffles])

    def column_score(column: jax.Array) -> jax.Array:
        found = jax.vmap(lambda order: score_fn(x.at[:, column].set(x[order, column])))(orders)
        return jnp.mean(found[0] - found[1:])

    return jax.lax.map(column_score, jnp.arange(dims))


def prune_features(scores: Any, active: Any, *, threshold: float = 0.0, fraction: float = 0.1,
                   min_features: int = 1) -> np.ndarray:
    """The new active set [D] bool: among active features whose score is <= `threshold`, the lowest-scoring
    ceil(fraction · |A|) are dropped (at least one when any qualifies), never leaving fewer than
    `min_features` active."""
    scores, active = np.asarray(scores, dtype=np.float64), np.asarray(active, dtype=bool)
    check_shape("active", active, scores.shape, "[D] (as scores)")
    check_number("threshold", threshold)
    fraction = check_unit_interval("fraction", fraction, closed_right=True)
    check_int("min_features", min_features)
    candidates = np.flatnonzero(active & (scores <= threshold))
    budget = min(max(1, int(np.ceil(fraction * active.sum()))), max(0, int(active.sum()) - min_features))
    drop = candidates[np.argsort(scores[candidates], kind="stable")][:budget]
    kept = active.copy()
    kept[drop] = False
    return kept
