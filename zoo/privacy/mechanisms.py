"""Noise mechanisms by name, for DP-SGD: each draws the noise added to a sum of per-example gradients clipped to
ℓ2 norm 1 (the caller scales it by the clip norm).

    noise = noise_sampler("sgg", scale=2.0, p=1.5, a_ratio=1.0)
    z = clip_norm * noise(key, dim)          # float32 [dim]

- "gaussian": N(0, scale² I) (scale is DP-SGD's noise multiplier); privacy: `accounting.gaussian_pld`.
- "sgg": SGG noise in R^dim with σ = scale, shape p and a = a_ratio · dim (a_ratio = 1, p = 2 is the Gaussian
  with std scale/√2; p = 1 the ℓ2 mechanism); privacy: `accounting.sgg_pld` at dim.
- "mog": the scalar MoG noise on every coordinate independently (σ = scale, weights
  `mog.geometric_weights(decay, radius)`, means k·spacing). A vector of per-coordinate mixtures is not a
  mechanism the MoG paper analyses for ℓ2 sensitivity: the only guarantee here is the crude one that each
  coordinate has sensitivity ≤ 1, composed over the coordinates. Provided for experiments, not for claims.

`register_noise(name)` adds a sampler factory `factory(**params) -> sample(key, dim) -> [dim]`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from icml26zoo.privacy import mog, sgg
from icml26zoo.privacy._checks import check_dimension
from icml26zoo.validation import check_positive

__all__ = ["NOISE_MECHANISMS", "noise_sampler", "register_noise"]

Sampler = Callable[[jax.Array, int], jax.Array]
NOISE_MECHANISMS: dict[str, Callable[..., Sampler]] = {}


def register_noise(name: str) -> Callable[[Callable[..., Sampler]], Callable[..., Sampler]]:
    """Decorator registering a noise-sampler factory under `name` (a taken name raises ValueError)."""

    def decorator(factory: Callable[..., Sampler]) -> Callable[..., Sampler]:
        if name in NOISE_MECHANISMS and NOISE_MECHANISMS[name] is not factory:
            raise ValueError(f"noise mechanism {name!r} is already registered")
        NOISE_MECHANISMS[name] = factory
        return factory

    return decorator


def noise_sampler(name: str, **params: Any) -> Sampler:
    """The sampler `sample(key, dim) -> float32 [dim]` of mechanism `name` with `params` (unit sensitivity)."""
    if name not in NOISE_MECHANISMS:
        raise ValueError(f"noise must be one of {sorted(NOISE_MECHANISMS)}, got {name!r}")
    try:
        return NOISE_MECHANISMS[name](**params)
    except TypeError as error:
        raise ValueError(f"noise mechanism {name!r} got parameters it does not take: {error}") from None


@register_noise("gaussian")
def _gaussian(scale: float = 1.0) -> Sampler:
    scale = check_positive("scale", scale, finite=True)

    def sample(key: jax.Array, dim: int) -> jax.Array:
        return scale * jax.random.normal(key, (check_dimension(dim),), jnp.float32)

    return sample


@register_noise("sgg")
def _sgg(scale: float = 1.0, p: float = 2.0, a_ratio: float = 1.0) -> Sampler:
    scale, p = check_positive("scale", scale, finite=True), check_positive("p", p, finite=True)
    a_ratio = check_positive("a_ratio", a_ratio, finite=True)

    def sample(key: jax.Array, dim: int) -> jax.Array:
        return sgg.sgg_sample(key, scale, a_ratio * check_dimension(dim), p, dim)

    return sample


@register_noise("mog")
def _mog(scale: float = 1.0, decay: float = 1.0, radius: int = 3, spacing: float = 1.0) -> Sampler:
    weights = mog.geometric_weights(decay, radius)
    scale, spacing = check_positive("scale", scale, finite=True), check_positive("spacing", spacing, finite=True)

    def sample(key: jax.Array, dim: int) -> jax.Array:
        return mog.mog_sample(key, scale, weights, spacing, 1.0, (check_dimension(dim),))

    return sample
