"""Node-classification scores: macro-F1 (GNNmim's model-selection and test metric) and accuracy, jit-able."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["accuracy", "macro_f1"]


def macro_f1(labels: jax.Array, predictions: jax.Array, num_classes: int, *,
             where: jax.Array | None = None) -> jax.Array:
    """Mean over classes of F1 = 2 TP / (2 TP + FP + FN), over the classes present in labels or predictions
    (scikit-learn's `f1_score(average="macro")`), for int labels/predictions [N]; `where` [N] bool selects the
    nodes scored (default all). Returns a scalar."""
    where = jnp.ones(labels.shape, bool) if where is None else where
    truth = jnp.where(where[:, None], jax.nn.one_hot(labels, num_classes), 0.0)
    guess = jnp.where(where[:, None], jax.nn.one_hot(predictions, num_classes), 0.0)
    tp = jnp.sum(truth * guess, axis=0)
    fp, fn = jnp.sum(guess, axis=0) - tp, jnp.sum(truth, axis=0) - tp
    present = (tp + fp + fn) > 0
    f1 = jnp.where(present, 2 * tp / jnp.maximum(2 * tp + fp + fn, 1.0), 0.0)
    return jnp.sum(f1) / jnp.maximum(jnp.sum(present.astype(f1.dtype)), 1.0)


def accuracy(labels: jax.Array, predictions: jax.Array, *, where: jax.Array | None = None) -> jax.Array:
    """Share of correct predictions among the nodes selected by `where` [N] (default all). Returns a scalar."""
    where = jnp.ones(labels.shape, bool) if where is None else where
    hits = jnp.sum(((labels == predictions) & where).astype(jnp.float32))
    return hits / jnp.maximum(jnp.sum(where.astype(jnp.float32)), 1.0)
