"""Cache-coherent resampling: reorder every particle-bound tensor by ancestry instead of recomputing prefixes.

After resampling with ancestors a [N], particle i continues particle a_i's prefix. Rather than re-running the
model over the new prefixes, every tensor that belongs to a particle is gathered along its particle axis,
`x ← x[a]`: the decode cache's per-layer leaves (KV buffers of attention-family mixers, recurrent states and
convolution windows of the linear mixers), and the sampler's own per-particle state (emitted tokens, weights,
RNG keys, done flags). The cache's write index is shared by all particles (they decode in lockstep, so every
particle's next position is the same) and stays as it is.

The particle axis of each cache leaf is found from the model itself: `particle_axes` compares the abstract
shapes of `init_cache` at two batch sizes, so it holds for any registered mixer and for layers stacked over
[L, N, ...] (`cfg.scan_layers`) or kept as a tuple of per-layer caches; leaves whose shape does not depend on
the batch (scalar indices) are shared.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_int

__all__ = ["broadcast_cache", "gather_particles", "particle_axes", "reorder_cache"]


def particle_axes(model: Any, max_len: int) -> Any:
    """The particle (batch) axis of each leaf of `model.init_cache(N, max_len).layers`, or None if shared.

    Returns a pytree of ints / None shaped like the cache's `layers`. Nothing is allocated.
    """
    small = jax.eval_shape(lambda: model.init_cache(2, max_len)).layers
    large = jax.eval_shape(lambda: model.init_cache(3, max_len)).layers

    def axis(a: jax.ShapeDtypeStruct, b: jax.ShapeDtypeStruct) -> int | None:
        differing = [i for i, (m, n) in enumerate(zip(a.shape, b.shape, strict=True)) if m != n]
        if len(differing) > 1:
            raise ValueError(f"a cache leaf changes shape along several axes with the batch: {a.shape} vs {b.shape}")
        return differing[0] if differing else None

    return jax.tree.map(axis, small, large)


def gather_particles(tree: Any, ancestors: jax.Array, axes: Any = 0) -> Any:
    """Each leaf x of `tree` with x[..., a, ...] along its particle axis; ancestors [N] int.

    axes: an int for every leaf, or a pytree (prefix) of ints / None matching `tree`; None leaves are shared.
    """
    if not isinstance(axes, int):
        return jax.tree.map(
            lambda axis, x: x if axis is None else jnp.take(x, ancestors, axis=axis), axes, tree,
            is_leaf=lambda node: node is None,
        )
    return jax.tree.map(lambda x: jnp.take(x, ancestors, axis=axes), tree)


def _check_ancestors(ancestors: Any, num_particles: int) -> None:
    shape = getattr(ancestors, "shape", None)
    if shape is None or len(shape) != 1 or not jnp.issubdtype(ancestors.dtype, jnp.integer):
        raise ValueError(f"ancestors must be an integer array of shape [N], got "
                         f"{getattr(ancestors, 'dtype', type(ancestors))} with shape {shape}")
    if shape[0] != num_particles:
        raise ValueError(f"cache must hold one row per particle: ancestors has {shape[0]} particles, but the "
                         f"cache's batch_size is {num_particles}")


def reorder_cache(model: Any, cache: Any, ancestors: jax.Array) -> Any:
    """The decode cache of N particles reordered by ancestors [N]: row i becomes row a_i of every leaf.

    Raises ValueError naming `cache` when its batch size is not the number of particles N.
    """
    _check_ancestors(ancestors, cache.batch_size)
    return cache.replace(layers=gather_particles(cache.layers, ancestors, particle_axes(model, cache.max_len)))


def broadcast_cache(model: Any, cache: Any, num_particles: int) -> Any:
    """A batch-1 cache (a prompt prefilled once) copied to num_particles rows, as a cache of that batch size."""
    if cache.batch_size != 1:
        raise ValueError(f"cache must have batch_size 1 to be broadcast, got {cache.batch_size}")
    check_int("num_particles", num_particles)
    rows = jnp.zeros((num_particles,), jnp.int32)
    layers = gather_particles(cache.layers, rows, particle_axes(model, cache.max_len))
    return cache.replace(layers=layers, batch_size=num_particles)
