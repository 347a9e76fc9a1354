"""Weighted softmax cross-entropy over integer labels: the one loss the LM and classification objectives share.

Every objective reduces to sums (loss, weight, correct predictions) so that evaluation can add them over
batches and devices before dividing; the training loss is the weighted mean of the same sums.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class CrossEntropySums(NamedTuple):
    """Summed statistics of one batch; each a float32 scalar."""

    loss_sum: jax.Array  # Σ weight · cross-entropy, in nats
    weight: jax.Array  # Σ weight
    correct: jax.Array  # Σ weight · [argmax(logits) == label]


def weighted_cross_entropy(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> CrossEntropySums:
    """Summed weighted cross-entropy (nats), its weight and the weighted correct count.

    logits [..., C] (any float dtype; the loss is computed in float32); labels [...] int; weights [...]
    float32. Next-token prediction passes logits [B, T, V], targets [B, T] and weights [B, T]; sequence
    classification passes one row each: [B, C], [B] and [B].
    """
    losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return CrossEntropySums(jnp.sum(losses * weights), jnp.sum(weights), jnp.sum(correct * weights))


def weighted_mean(sums: CrossEntropySums) -> jax.Array:
    """The weighted mean loss `loss_sum / max(weight, 1)` (float32 scalar; 0 for an all-padding batch)."""
    return sums.loss_sum / jnp.maximum(sums.weight, 1.0)
