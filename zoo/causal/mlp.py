"""Per-node MLPs of the NOTEARS-MLP construction (Zheng et al., "Learning Sparse Nonparametric DAGs",
arXiv 1909.13189), vectorised over the d nodes: node j predicts x_j from all d inputs through its own
one-hidden-layer MLP, and its first-layer column k carries every use of input k, so A[k, j] = ‖W1[j, :, k]‖₂ is
the strength of the edge k → j. The self column W1[j, :, j] is masked to 0 (no self-loops).

Inputs enter standardised per column and node j's output is mapped back to x_j's scale
(prediction_j = mean_j + std_j · g_j(x̃)), so the edge strengths, the threshold on them and the optimiser's step
sizes do not depend on the units of each variable; the targets (and so the MSE loss) stay in the data's units.
This scaling is the zoo's design choice, stated on docs/papers/notime.md.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_int

__all__ = ["MLPParams", "Scaling", "data_scaling", "edge_strengths", "init_mlp", "predict", "self_mask"]


class MLPParams(NamedTuple):
    """w1 [d, m, d] (node, hidden, input), b1 [d, m], w2 [d, m], b2 [d]."""

    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    b2: jax.Array


class Scaling(NamedTuple):
    """Per-column mean [d] and standard deviation [d] of the data the model is fitted to."""

    mean: jax.Array
    std: jax.Array


def self_mask(d: int) -> jax.Array:
    """[d, 1, d] 0 at input j of node j, 1 elsewhere (broadcasts over the hidden axis of w1)."""
    return (1.0 - jnp.eye(d, dtype=jnp.float32))[:, None, :]


def init_mlp(key: jax.Array, num_nodes: int, hidden: int, *, first_scale: float = 1.0) -> MLPParams:
    """Glorot-uniform first and second layers (fan_in d, fan_out m for w1; m, 1 for w2), w1 times `first_scale`
    (< 1 starts near the empty graph, where h ≈ 0), zero biases, the self columns zeroed."""
    d, m = check_int("num_nodes", num_nodes, minimum=2), check_int("hidden", hidden)
    k1, k2 = jax.random.split(key)
    limit1, limit2 = (6.0 / (d + m)) ** 0.5, (6.0 / (m + 1)) ** 0.5
    w1 = first_scale * jax.random.uniform(k1, (d, m, d), minval=-limit1, maxval=limit1) * self_mask(d)
    w2 = jax.random.uniform(k2, (d, m), minval=-limit2, maxval=limit2)
    return MLPParams(w1, jnp.zeros((d, m)), w2, jnp.zeros((d,)))


def data_scaling(x: jax.Array) -> Scaling:
    """The column means and standard deviations of x [n, d] (a constant column gets std 1)."""
    std = jnp.std(x, axis=0)
    return Scaling(jnp.mean(x, axis=0), jnp.where(std > 0, std, 1.0))


def predict(params: MLPParams, scaling: Scaling, x: jax.Array) -> jax.Array:
    """f(x) [n, d]: column j is node j's MLP (sigmoid hidden layer) applied to the standardised x [n, d] with its
    own column masked, mapped back to column j's scale."""
    d = x.shape[1]
    z = (x - scaling.mean) / scaling.std
    hidden = jax.nn.sigmoid(jnp.einsum("jhk,nk->njh", params.w1 * self_mask(d), z) + params.b1)
    g = jnp.einsum("njh,jh->nj", hidden, params.w2) + params.b2
    return scaling.mean + scaling.std * g


def edge_strengths(w1: jax.Array) -> jax.Array:
    """A [d, d] with A[k, j] = ‖w1[j, :, k]‖₂ (edge k → j) from w1 [d, m, d]; the diagonal is 0."""
    d = w1.shape[0]
    squares = jnp.sum((w1 * self_mask(d)) ** 2, axis=1)  # [node j, input k]
    # sqrt of 0 has an infinite derivative: guard it so a pruned column gives gradient 0, not NaN.
    safe = jnp.where(squares > 0, squares, 1.0)
    return jnp.where(squares > 0, jnp.sqrt(safe), 0.0).T
