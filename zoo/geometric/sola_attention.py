"""SoLA's attention operators: the 4-D direction lift, lifted scores, local softmax attention over geodesic
k-nearest neighbours and the softmax-free linear variant (Sekikawa, Nagata, Araki, Eto, "Spherical SO(3)
Equivariant Local Attention", ICML 2026).

RECONSTRUCTION: no paper code or full text was available; the maths is the zoo's own reading,
consistent with every sentence of the abstract. Per head h a token at the
unit direction u gets the 4-vector

    φ_h(u) = [a_h, b_h u_x, b_h u_y, b_h u_z],  a_h = cos α_h,  b_h = sin α_h,

and the query / key are lifted by the outer product Q̃_i = q_i ⊗ φ_h(u_i). Their Frobenius product is

    s_ij = ⟨Q̃_i, K̃_j⟩ = (q_i·k_j)(a_h² + b_h² cos θ_ij),

content affinity times a zonal kernel of the great-circle distance θ_ij only, so it is unchanged when every
direction is rotated by the same R ∈ SO(3) (φ moves by the orthogonal block-diag(1, R)). No absolute position
of a token enters anywhere.

Shapes: B examples, N tokens, H heads, head width Dh (queries / keys), Dv (values), K neighbours.
Padding tokens (mask 0) are never attended to.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from icml26zoo.geometric.common import masked_softmax

# The linear variant's denominator guard: Σ_j κ_ij >= 0 with ψ = elu + 1 > 0 and a = b, so ε only matters
# for a query whose every key is padding.
LINEAR_EPS = 1e-6
# The linear variant's fixed lift angle: a = b = 1/√2 gives the kernel cos²(θ/2) >= 0 (spec: keep it
# non-negative so the normalizer never vanishes or changes sign).
LINEAR_ALPHA = math.pi / 4


def direction_lift(directions: jax.Array, alpha: jax.Array) -> jax.Array:
    """directions [B, N, 3] (unit), alpha [H] -> φ [B, N, H, 4] = [cos α_h, sin α_h · u]."""
    a = jnp.cos(alpha).astype(directions.dtype)
    b = jnp.sin(alpha).astype(directions.dtype)
    constant = jnp.broadcast_to(a, (*directions.shape[:-1], alpha.shape[0]))[..., None]
    scaled = directions[..., None, :] * b[:, None]
    return jnp.concatenate([constant, scaled], axis=-1)


def lift(vectors: jax.Array, phi: jax.Array) -> jax.Array:
    """vectors [B, N, H, D], φ [B, N, H, 4] -> the flattened outer product v ⊗ φ: [B, N, H, 4 D]."""
    outer = vectors[..., :, None] * phi[..., None, :]
    return outer.reshape(*vectors.shape[:-1], vectors.shape[-1] * phi.shape[-1])


def lifted_scores(queries: jax.Array, keys: jax.Array, phi_queries: jax.Array, phi_keys: jax.Array) -> jax.Array:
    """Frobenius products of the lifted queries and keys, formed explicitly (the spec's definition).

    queries [B, N, H, Dh], keys [B, M, H, Dh], φ [B, N, H, 4] / [B, M, H, 4] -> s [B, H, N, M].
    """
    return jnp.einsum("bnhf,bmhf->bhnm", lift(queries, phi_queries), lift(keys, phi_keys))


def neighbour_table(directions: jax.Array, mask: jax.Array, num_neighbours: int) -> tuple[jax.Array, jax.Array]:
    """The k nearest real tokens of every token by great-circle distance.

    directions [B, N, 3] unit, mask [B, N] (1 real, 0 padding) -> (index int32 [B, N, K], valid bool [B, N, K]).
    θ is monotone decreasing in u_i·u_j, so the top-k of the cosines are the k nearest; `lax.top_k` puts the
    lower index first among equal cosines, so ties break deterministically by (distance, index). Padding
    columns get a cosine below -1 and are picked only when an example has fewer than K real tokens; `valid`
    marks those slots False. A token is its own nearest neighbour.
    """
    if not 1 <= num_neighbours <= directions.shape[1]:
        raise ValueError(f"num_neighbours must be in [1, N = {directions.shape[1]}], got {num_neighbours}")
    cosines = jnp.einsum("bnc,bmc->bnm", directions, directions)
    real_key = (mask > 0)[:, None, :]
    cosines = jnp.where(real_key, cosines, -3.0)
    _, index = jax.lax.top_k(cosines, num_neighbours)
    valid = jnp.take_along_axis(jnp.broadcast_to(real_key, cosines.shape), index, axis=-1)
    return index.astype(jnp.int32), valid


def gather_neighbours(values: jax.Array, index: jax.Array) -> jax.Array:
    """values [B, N, ...], index int32 [B, N, K] -> values at the neighbours [B, N, K, ...]."""
    return jax.vmap(lambda per_example, rows: per_example[rows])(values, index)


def local_softmax_attention(
    queries: jax.Array, keys: jax.Array, values: jax.Array, phi: jax.Array, index: jax.Array, valid: jax.Array
) -> jax.Array:
    """y_i = Σ_{j ∈ N(i)} softmax_j(s_ij / √(4 Dh)) v_j over the neighbour table.

    queries, keys [B, N, H, Dh], values [B, N, H, Dv], φ [B, N, H, 4], index [B, N, K], valid [B, N, K]
    -> [B, N, H, Dv]. s_ij is evaluated as (q_i·k_j)(φ_i·φ_j), equal to the lifted product without
    forming the 4 Dh-wide lifted vectors.
    """
    head_dim = queries.shape[-1]
    near_keys = gather_neighbours(keys, index)
    near_phi = gather_neighbours(phi, index)
    content = jnp.einsum("bnhd,bnkhd->bnhk", queries, near_keys)
    zonal = jnp.einsum("bnhf,bnkhf->bnhk", phi, near_phi)
    logits = content * zonal / math.sqrt(4 * head_dim)
    probs = masked_softmax(logits, valid[:, :, None, :].astype(logits.dtype))
    return jnp.einsum("bnhk,bnkhd->bnhd", probs, gather_neighbours(values, index))


def positive_feature(x: jax.Array) -> jax.Array:
    """ψ(x) = elu(x) + 1 > 0: the linear variant's non-negative content feature map."""
    return jax.nn.elu(x) + 1.0


def linear_lifted_attention(
    queries: jax.Array, keys: jax.Array, values: jax.Array, phi: jax.Array, mask: jax.Array
) -> jax.Array:
    """The softmax-free variant A: kernel κ_ij = (ψ(q_i)·ψ(k_j))(φ_i·φ_j) over all real tokens, in O(N).

    queries, keys [B, N, H, Dh], values [B, N, H, Dv], φ [B, N, H, 4], mask [B, N] -> [B, N, H, Dv]:
        y_i = Σ_a φ_ia ψ(q_i)ᵀ S_a / (Σ_a φ_ia ψ(q_i)ᵀ z_a + ε),
        S_a = Σ_j φ_ja ψ(k_j) v_jᵀ [Dh, Dv],  z_a = Σ_j φ_ja ψ(k_j) [Dh],
    i.e. ordinary linear attention on the 4 Dh lifted coordinates ψ(q) ⊗ φ. No neighbour list is formed;
    locality comes only from the cos²(θ/2) taper of φ·φ (the spec's option A: exactly SO(3)-equivariant).
    """
    lifted_queries = lift(positive_feature(queries), phi)
    lifted_keys = lift(positive_feature(keys), phi) * mask[:, :, None, None].astype(keys.dtype)
    state = jnp.einsum("bmhf,bmhe->bhfe", lifted_keys, values)
    normalizer = jnp.sum(lifted_keys, axis=1)
    numerator = jnp.einsum("bnhf,bhfe->bnhe", lifted_queries, state)
    denominator = jnp.einsum("bnhf,bhf->bnh", lifted_queries, normalizer)
    return numerator / (denominator[..., None] + LINEAR_EPS)


def linear_lifted_attention_reference(
    queries: jax.Array, keys: jax.Array, values: jax.Array, phi: jax.Array, mask: jax.Array
) -> jax.Array:
    """The same kernel evaluated by brute force in O(N²): the readable reference of `linear_lifted_attention`.

    Shapes as `linear_lifted_attention`.
    """
    content = jnp.einsum("bnhd,bmhd->bhnm", positive_feature(queries), positive_feature(keys))
    zonal = jnp.einsum("bnhf,bmhf->bhnm", phi, phi)
    kernel = content * zonal * mask[:, None, None, :].astype(queries.dtype)
    numerator = jnp.einsum("bhnm,bmhe->bnhe", kernel, values)
    denominator = jnp.sum(kernel, axis=-1).transpose(0, 2, 1)
    return numerator / (denominator[..., None] + LINEAR_EPS)


__all__ = [
    "LINEAR_ALPHA",
    "LINEAR_EPS",
    "direction_lift",
    "gather_neighbours",
    "lift",
    "lifted_scores",
    "linear_lifted_attention",
    "linear_lifted_attention_reference",
    "local_softmax_attention",
    "neighbour_table",
    "positive_feature",
]
