"""Local log-gate sums for the softmax-attention ops with forget gates (FoX, FiX); usable inside Pallas kernels.

Numerics rule: every exponent is a sum of log-gates over exactly the positions it spans, never a
difference of a global float32 cumsum. For a query block I starting at b_I and a key block J < I ending at
e_J the pairwise bias is split as

    Λ_i − Λ_j = λ_i + gap(J, I) + ρ_j,
    λ_i = Σ_{l=b_I..i} a_l          (inclusive prefix sum inside the query block)
    ρ_j = Σ_{l=j+1..e_J} a_l        (exclusive suffix sum inside the key block)
    gap = Σ_{J<K<I} tot_K           (block totals in between, a running sum while walking blocks)

and inside the diagonal block it is the masked-cumsum segment sum Σ_{l=j+1..i} a_l. All terms are ≤ 0,
so nothing cancels. Only forward cumsums and masked reductions are used (Pallas Triton has no reverse
cumsum) and no sum is obtained by subtracting two others.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.segments import reverse_cumsum


def prefix_sums(a: jax.Array) -> jax.Array:
    """λ: inclusive cumsum along the last axis. a [..., C] float32 -> [..., C]."""
    return jnp.cumsum(a, axis=-1)


def suffix_sums(a: jax.Array) -> jax.Array:
    """ρ_j = Σ_{l>j} a_l along the last axis (exclusive), a masked reduction. a [..., C] -> [..., C]."""
    c = a.shape[-1]
    later = lax.broadcasted_iota(jnp.int32, (c, c), 1) > lax.broadcasted_iota(jnp.int32, (c, c), 0)
    return jnp.sum(jnp.where(later, a[..., None, :], 0.0), axis=-1)


def segment_sums(a: jax.Array) -> jax.Array:
    """S[i, j] = Σ_{j<l≤i} a_l for j ≤ i and 0 above the diagonal. a [..., C] -> [..., C, C].

    Built as a cumsum over l of the matrix M[l, j] = a_l·[l > j], so every entry is a plain sum of its
    own terms (the stable `segsum` of Mamba-2, Dao & Gu, arXiv 2405.21060).
    """
    c = a.shape[-1]
    row = lax.broadcasted_iota(jnp.int32, (c, c), 0)
    col = lax.broadcasted_iota(jnp.int32, (c, c), 1)
    m = jnp.where(row > col, a[..., :, None], 0.0)
    return jnp.cumsum(m, axis=-2)


def segmented_reverse_cumsum(x: jax.Array, seg: jax.Array | None) -> jax.Array:
    """Σ_{i ≥ t, i in t's segment} x_i along the last axis; x [..., T] float32, seg broadcastable or None.

    Restarting the sum at every segment end keeps gate gradients exactly zero across packed segments: a
    plain reverse cumsum adds later segments' contributions, which cancel only up to rounding.
    """
    if seg is None:
        return reverse_cumsum(x)
    seg = jnp.broadcast_to(seg, x.shape)
    is_last = jnp.concatenate([seg[..., 1:] != seg[..., :-1], jnp.ones_like(seg[..., :1], bool)], axis=-1)

    def combine(left: tuple[jax.Array, jax.Array], right: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        value_l, reset_l = left
        value_r, reset_r = right
        return jnp.where(reset_r, value_r, value_l + value_r), reset_l | reset_r

    flipped, _ = lax.associative_scan(combine, (jnp.flip(x, -1), jnp.flip(is_last, -1)), axis=x.ndim - 1)
    return jnp.flip(flipped, -1)
