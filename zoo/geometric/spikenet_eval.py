"""Metrics of a trained point-cloud classifier (SpikeNet or any model of the geometric interface) on clouds.

- `accuracy(model, points, labels, batch)`: the fraction of clouds whose argmax logit is the label;
- `mean_firing_rates(model, points, batch)`: every SpikeNet neuron layer's firing rate (`spikenet.firing_rates`,
  the spec's energy proxy, which must lie strictly inside (0, 1) after training) averaged over batches.

The `spikenet` experiment (repro/spikenet.py) trains SpikeNet and its baseline with the shared trainer and
measures both on fresh clouds from the dataset's generator, canonical and rotated.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from icml26zoo.geometric import spikenet
from icml26zoo.validation import check_int

__all__ = ["accuracy", "mean_firing_rates"]

@nnx.jit
def _predict(model: nnx.Module, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
    return jax.numpy.argmax(model(points, features, weights), axis=-1)


def accuracy(model: nnx.Module, points: np.ndarray, labels: np.ndarray, batch: int) -> float:
    """Fraction of clouds points [E, P, 3] whose argmax logit equals labels [E] (full batches only)."""
    check_int("batch (at most the number of clouds)", batch, maximum=len(labels))
    correct = total = 0
    for start in range(0, len(labels) - batch + 1, batch):
        cloud = points[start:start + batch]
        predicted = _predict(model, cloud, np.zeros((*cloud.shape[:2], 0), np.float32),
                             np.ones(cloud.shape[:2], np.float32))
        correct += int(np.sum(np.asarray(predicted) == labels[start:start + batch]))
        total += batch
    return correct / total


def mean_firing_rates(model: spikenet.SpikeNet, points: np.ndarray, batch: int) -> dict[str, float]:
    """Each neuron layer's firing rate averaged over full batches of clouds points [E, P, 3]."""
    check_int("batch (at most the number of clouds)", batch, maximum=len(points))
    per_batch = []
    for start in range(0, len(points) - batch + 1, batch):
        cloud = points[start:start + batch]
        per_batch.append(spikenet.firing_rates(model, cloud, np.zeros((*cloud.shape[:2], 0), np.float32),
                                               np.ones(cloud.shape[:2], np.float32)))
    return {name: float(np.mean([rates[name] for rates in per_batch])) for name in per_batch[0]}
