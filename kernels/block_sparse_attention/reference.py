"""Materialized block-sparse attention: the readable oracle (float32, O(T²) memory).

The token mask is the block mask expanded to tokens, intersected with causality and equal segment ids:
query t sees the key in slot s iff pos(s) ≤ t, block(s) is listed for block(t), and seg(s) = seg(t), where
pos(s) = s unless the keys were permuted (`key_positions`). Optional additive logit terms: a per-query
`query_bias` a_t and a per-key-slot `key_bias` b_s (the logit is scale·q_t·k_s + a_t + b_s), which carry the
separable biases of the softmax-family mixers (FoX's Λ_t − Λ_s, GOAT's recency slope). Gradients come from
JAX autodiff.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels.block_sparse_attention.lists import block_mask


def token_mask(block_indices: jax.Array, length: int, block_size: int, segment_ids: jax.Array | None,
               key_positions: jax.Array | None = None) -> jax.Array:
    """The effective mask bool [B, H, T, T] (query t, key slot s) of the lists [B, H, N, S].

    key_positions: [B, Hkv, T] original position of each key slot (None: the slot index).
    """
    b, h, n, _ = block_indices.shape
    blocks = block_mask(block_indices, n)
    tokens = jnp.repeat(jnp.repeat(blocks, block_size, axis=2), block_size, axis=3)[..., :length, :length]
    t = jnp.arange(length)
    if key_positions is None:
        causal = (t[None, :] <= t[:, None])[None, None]
    else:
        per_head = jnp.repeat(key_positions, h // key_positions.shape[1], axis=1)  # [B, H, T]
        causal = per_head[:, :, None, :] <= t[:, None]
    mask = tokens & causal
    if segment_ids is not None:
        mask = mask & (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]
    return mask


def pair_bias(query_bias: jax.Array | None, key_bias: jax.Array | None) -> jax.Array | float:
    """a_t + b_s as float32 [B, H, T, S] (0.0 when both are None); query_bias, key_bias [B, T, H]."""
    bias = 0.0
    if query_bias is not None:
        bias = jnp.transpose(query_bias.astype(jnp.float32), (0, 2, 1))[..., :, None]
    if key_bias is not None:
        bias = bias + jnp.transpose(key_bias.astype(jnp.float32), (0, 2, 1))[..., None, :]
    return bias


def block_sparse_attention(q: jax.Array, k: jax.Array, v: jax.Array, block_indices: jax.Array, *,
                           block_size: int, scale: float | None = None, segment_ids: jax.Array | None = None,
                           key_positions: jax.Array | None = None, query_bias: jax.Array | None = None,
                           key_bias: jax.Array | None = None) -> jax.Array:
    """Softmax attention under the token mask of `block_indices`, by materializing the logits.

    q [B, T, H, D]; k [B, T, Hkv, D]; v [B, T, Hkv, Dv]; block_indices [B, H, N, S] (lists.py); segment_ids
    [B, T] or None; key_positions [B, Hkv, T] or None; query_bias, key_bias [B, T, H] float32 or None (the
    key bias in key-slot order). Returns o [B, T, H, Dv] in q.dtype.
    """
    _, t, h, d = q.shape
    groups = h // k.shape[2]
    scale = d**-0.5 if scale is None else scale
    kf = jnp.repeat(k.astype(jnp.float32), groups, axis=2)
    vf = jnp.repeat(v.astype(jnp.float32), groups, axis=2)
    s = jnp.einsum("bthd,bshd->bhts", q.astype(jnp.float32), kf, precision=HIGHEST) * scale
    s = s + pair_bias(query_bias, key_bias)
    # Every query sees at least one key (its own, see lists.py), so no softmax row is empty.
    s = jnp.where(token_mask(block_indices, t, block_size, segment_ids, key_positions), s, -jnp.inf)
    p = jnp.exp(s - lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True)))
    p = p / jnp.sum(p, axis=-1, keepdims=True)
    return jnp.einsum("bhts,bshd->bthd", p, vf, precision=HIGHEST).astype(q.dtype)
