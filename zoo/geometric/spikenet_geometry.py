"""Point-set geometry of SpikeNet : k nearest neighbours, farthest point sampling, gathers.

Both are deterministic and permutation-equivariant for points in general position:
- k-NN ranks candidates by squared Euclidean distance; exact ties between distinct points break towards the
  lower index (`jax.lax.top_k` is stable), the only place where the input order can matter.
- Farthest point sampling starts at the real point farthest from the centroid (spec pitfall: a random start
  makes the model nondeterministic and not permutation-invariant), and the centroid is summed over
  coordinates sorted per axis, so that it is bitwise the same for every ordering of the points.
Padding (mask False) is never a neighbour and never sampled while real points remain.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def sorted_centroid(points: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of the real points: points [B, N, d], mask [B, N] bool -> [B, d] (zeros for an all-padding row).

    Sorting each coordinate before summing fixes the summation order, so the centroid (and everything computed
    from it) is bitwise invariant to permuting the points.
    """
    coords = jnp.sort(jnp.where(mask[:, :, None], points, 0.0), axis=1)
    count = jnp.sum(mask, axis=1, keepdims=True).astype(points.dtype)
    return jnp.sum(coords, axis=1) / jnp.maximum(count, 1.0)


def gather_points(values: jax.Array, index: jax.Array) -> jax.Array:
    """values [B, N, ...] gathered at index [B, *K] (ints into N) -> [B, *K, ...]."""
    return jax.vmap(lambda rows, idx: rows[idx])(values, index)


def knn(queries: jax.Array, points: jax.Array, mask: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """k nearest real points of each query: queries [B, M, d], points [B, N, d], mask [B, N] bool.

    Returns (index [B, M, k] int32 into N, valid [B, M, k] bool): a row with fewer than k real points repeats
    padding indices marked invalid. Neighbours come nearest first; a query is its own nearest neighbour when it
    is one of the points.
    """
    diff = queries[:, :, None, :] - points[:, None, :, :]
    distance = jnp.sum(diff * diff, axis=-1)
    distance = jnp.where(mask[:, None, :], distance, jnp.inf)
    neg_distance, index = jax.lax.top_k(-distance, k)
    return index.astype(jnp.int32), jnp.isfinite(neg_distance)


def farthest_point_sampling(points: jax.Array, mask: jax.Array, num_samples: int) -> tuple[jax.Array, jax.Array]:
    """Deterministic FPS: points [B, N, d], mask [B, N] bool -> (index [B, S] int32, valid [B, S] bool).

    The first sample is the real point farthest from the centroid; each next one maximizes the distance to the
    samples so far. Sample s is valid when s < the row's number of real points (after that FPS repeats points).
    """
    centroid = sorted_centroid(points, mask)
    from_centroid = jnp.sum((points - centroid[:, None, :]) ** 2, axis=-1)
    first = jnp.argmax(jnp.where(mask, from_centroid, -1.0), axis=1).astype(jnp.int32)

    def add_sample(step: int, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        index, nearest = carry
        latest = gather_points(points, index[:, step - 1])
        nearest = jnp.minimum(nearest, jnp.sum((points - latest[:, None, :]) ** 2, axis=-1))
        chosen = jnp.argmax(jnp.where(mask, nearest, -1.0), axis=1).astype(jnp.int32)
        return index.at[:, step].set(chosen), nearest

    batch, num_points = mask.shape
    index = jnp.zeros((batch, num_samples), jnp.int32).at[:, 0].set(first)
    nearest = jnp.full((batch, num_points), jnp.inf, points.dtype)
    index, _ = jax.lax.fori_loop(1, num_samples, add_sample, (index, nearest))
    valid = jnp.arange(num_samples)[None, :] < jnp.sum(mask, axis=1, keepdims=True)
    return index, valid
