"""Codebook usage statistics of a quantiser's indices (FSQ or VQ), to tell a healthy bottleneck from a collapsed one.

    counts       how often each of K codes is used, over the (weighted) indices
    perplexity   exp(entropy of the usage distribution): K when every code is used equally, 1 when one code is
                 used; the "effective number of codes"
    dead codes   how many of the K codes are never used
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.vq.vq import check_codebook_size


def code_counts(indices: jax.Array, num_codes: int, weights: jax.Array | None = None) -> jax.Array:
    """int indices [...] in [0, num_codes) -> float32 counts [num_codes]; `weights` [...] (0 marks padding)."""
    check_codebook_size(num_codes)
    if weights is None:
        weights = jnp.ones(indices.shape, jnp.float32)
    if weights.shape != indices.shape:
        raise ValueError(f"weights must have the shape of indices {list(indices.shape)}, got {list(weights.shape)}")
    return jnp.zeros(num_codes, jnp.float32).at[indices.reshape(-1)].add(weights.reshape(-1).astype(jnp.float32))


def perplexity(counts: jax.Array) -> jax.Array:
    """counts [K] -> exp(−Σ p log p) with p = counts / Σ counts (1.0 when nothing was counted)."""
    probabilities = counts / jnp.maximum(jnp.sum(counts), 1e-12)
    entropy = -jnp.sum(jnp.where(probabilities > 0, probabilities * jnp.log(jnp.where(probabilities > 0,
                                                                                      probabilities, 1.0)), 0.0))
    return jnp.exp(entropy)


def dead_code_count(counts: jax.Array) -> jax.Array:
    """counts [K] -> the number of codes never used (int32)."""
    return jnp.sum(counts <= 0).astype(jnp.int32)


def usage_statistics(indices: jax.Array, num_codes: int, weights: jax.Array | None = None) -> dict[str, jax.Array]:
    """{"used_codes", "dead_codes", "perplexity", "usage_fraction"} of `indices` over a codebook of num_codes."""
    counts = code_counts(indices, num_codes, weights)
    dead = dead_code_count(counts)
    return {"used_codes": num_codes - dead, "dead_codes": dead, "perplexity": perplexity(counts),
            "usage_fraction": (num_codes - dead).astype(jnp.float32) / num_codes}
