"""CAMP's geometric regularisers, modality dropout and explanations (RECONSTRUCTION, docs/papers/camp.md).

    anti-dominance  L_dom = Var_m( mean over the rows where m is present of mean_c |E_m(c)| ): no modality's
                    evidence may dwarf the others' (population variance over the M modalities)
    anti-collapse   L_uni = mean_m log mean_{(c,j) ≠ (c',j')} exp(2 ⟨p_{m,c,j}, p_{m,c',j'}⟩): the uniformity
                    loss of Wang & Isola (2020) with t = 2 over each modality's C·J prototypes, low when they
                    spread over the sphere instead of collapsing onto a few directions
    modality dropout  each present modality of a row is dropped with probability `rate` (training), a row
                    keeping at least one: a row whose draw dropped all keeps its present modalities unchanged
    explanations    per row and modality the top-k prototypes (class, index, similarity ⟨z, p⟩) by similarity
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_float_array, check_int, check_probability


def dominance_penalty(evidence: jax.Array, present: jax.Array) -> jax.Array:
    """L_dom (scalar) from evidence [B, M, C] and present [B, M]; a modality present in no row counts 0."""
    check_float_array("evidence", evidence, (None, None, None), "[B, M, C]")
    present = present.astype(evidence.dtype)
    magnitude = jnp.mean(jnp.abs(evidence), axis=-1)  # [B, M]
    per_modality = jnp.sum(magnitude * present, axis=0) / jnp.maximum(jnp.sum(present, axis=0), 1.0)
    return jnp.var(per_modality)


def uniformity_penalty(prototypes: jax.Array, t: float = 2.0) -> jax.Array:
    """L_uni (scalar) from unit prototypes [M, C, J, D]: mean over modalities of log mean_{k ≠ l} exp(t ⟨p_k, p_l⟩)
    over the modality's K = C·J prototypes (needs K >= 2)."""
    check_float_array("prototypes", prototypes, (None, None, None, None), "[M, C, J, D]")
    modalities, classes, count, dim = prototypes.shape
    flat = prototypes.reshape(modalities, classes * count, dim)
    size = classes * count
    if size < 2:
        raise ValueError(f"prototypes must hold at least 2 prototypes per modality (C·J), got shape "
                         f"{list(prototypes.shape)}")
    gram = t * jnp.einsum("mkd,mld->mkl", flat, flat)
    off = ~jnp.eye(size, dtype=bool)
    # log mean exp over the off-diagonal pairs, stably: logsumexp with the diagonal masked out, minus log count.
    masked = jnp.where(off[None], gram, -jnp.inf)
    per_modality = jax.nn.logsumexp(masked.reshape(modalities, -1), axis=-1) - jnp.log(size * (size - 1.0))
    return jnp.mean(per_modality)


def modality_dropout(key: jax.Array, present: jax.Array, rate: float) -> jax.Array:
    """present [B, M] with each present modality dropped with probability `rate`; a row whose every modality
    was dropped keeps its present ones (module docstring). float32 [B, M]."""
    check_probability("rate", rate)
    present = present.astype(jnp.float32)
    keep = jax.random.bernoulli(key, 1.0 - rate, present.shape).astype(jnp.float32)
    dropped = present * keep
    return jnp.where(jnp.sum(dropped, axis=1, keepdims=True) > 0, dropped, present)


class Explanation(NamedTuple):
    """Per row and modality the top-k prototypes: classes int32 [B, M, k], indices int32 [B, M, k] (j within
    the class), similarity ⟨z, p⟩ [B, M, k] in decreasing order, and present [B, M] (an absent modality's
    prototypes explain nothing)."""

    classes: jax.Array
    indices: jax.Array
    similarity: jax.Array
    present: jax.Array


def explain(similarities: jax.Array, present: jax.Array, k: int, temperature: float = 1.0) -> Explanation:
    """The top-k prototypes of every modality from similarities [B, M, C, J] (⟨z, p⟩ / τ; multiplied back by
    `temperature` to report cosines) and present [B, M]."""
    check_float_array("similarities", similarities, (None, None, None, None), "[B, M, C, J]")
    batch, modalities, classes, count = similarities.shape
    check_int("k", k, maximum=classes * count)
    values, flat = jax.lax.top_k(similarities.reshape(batch, modalities, classes * count), k)
    return Explanation((flat // count).astype(jnp.int32), (flat % count).astype(jnp.int32), values * temperature,
                       present.astype(jnp.float32))
