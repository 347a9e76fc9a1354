"""Causal softmax attention with grouped-query heads, RoPE (or ALiBi, or no positions), packed segments and a
KV cache."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.layers import projections
from icml26zoo.layers.alibi import alibi_bias
from icml26zoo.layers.norms import RMSNorm
from icml26zoo.layers.options import check_choice
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_call, mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer


@dataclasses.dataclass(frozen=True)
class AttentionOptions:
    """The attention mixer's `cfg.mixer_options` (see `Attention`)."""

    qk_norm: bool = False
    position: str = "rope"


POSITIONS = ("rope", "alibi", "none")


def training_mask(segment_ids: jax.Array | None, length: int) -> jax.Array | None:
    """Boolean mask [B, 1, T, T] (True = attend): causal and within one segment; None without segments."""
    if segment_ids is None:
        return None
    causal = jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))
    same_segment = segment_ids[:, :, None] == segment_ids[:, None, :]  # [B, T, T]
    return (causal[None] & same_segment)[:, None]


def causal_mask(segment_ids: jax.Array | None, length: int) -> jax.Array:
    """Boolean mask [B or 1, 1, T, T] (True = attend): causal, and within one segment when segment_ids is given."""
    mask = training_mask(segment_ids, length)
    return jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))[None, None] if mask is None else mask


def decode_mask(index: jax.Array, num_new: int, max_len: int) -> jax.Array:
    """Boolean mask [1, 1, T', S] for T' new tokens written at slots index .. index+T'-1 of S slots.

    Query i sits at slot index + i and reads slots ≤ index + i: the filled prefix and itself, never the
    unwritten (zero) slots beyond.
    """
    query_slot = index + jnp.arange(num_new, dtype=jnp.int32)
    key_slot = jnp.arange(max_len, dtype=jnp.int32)
    return (key_slot[None, :] <= query_slot[:, None])[None, None]


def _dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, **kwargs: Any) -> jax.Array:
    """`jax.nn.dot_product_attention` on q [B, T, H, Dh], k/v [B, S, Hkv, Dh] -> [B, T, H, Dh].

    Its XLA path calls `jnp.promote_types(bfloat16, float32)` to pick the logits dtype, which raises
    under `jax_numpy_dtype_promotion="strict"` (our tests' setting); the promotion is intended there
    (float32 logits), so it runs under the standard rules. Inputs all share one dtype, so nothing of
    ours is promoted implicitly.
    """
    with jax.numpy_dtype_promotion("standard"):
        return jax.nn.dot_product_attention(q, k, v, **kwargs)


def causal_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None, **kwargs: Any
) -> jax.Array:
    """The training forward's attention: q [B, T, H, Dh] on k, v [B, T, Hkv, Dh] -> [B, T, H, Dh], causal and,
    with segment_ids [B, T], within one segment. Without segments it asks for is_causal, not a mask array.

    `kwargs` (bias, scale) go to `jax.nn.dot_product_attention`.
    """
    mask = training_mask(segment_ids, q.shape[1])
    return _dot_product_attention(q, k, v, mask=mask, is_causal=mask is None, **kwargs)


@register_mixer("attention")
class Attention(nnx.Module):
    """Multi-head causal softmax attention (GQA: query head h reads kv head h // (H // Hkv)).

    Options (`cfg.mixer_options`):
      qk_norm (bool, default False): RMSNorm over the head dimension of q and k before RoPE
        (as in OLMo 2 / Qwen 3); keeps attention logits bounded in long or low-precision runs.
      position (str, default "rope"): how positions enter. "rope" rotates q and k; "alibi" adds the
        per-head recency bias -slope_h·(i - j) to the logits instead (Press et al. 2022; the usual
        length-extrapolation baseline); "none" uses no positional signal (NoPE: causality alone).
    """

    CONFORMANCE_OPTIONS = ((), (("qk_norm", True),), (("position", "alibi"),))

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.resolved_head_dim
        self.d_model = cfg.d_model
        self.rope_theta = cfg.rope_theta
        self.dtype = jnp.dtype(cfg.compute_dtype)

        linear = functools.partial(projections.linear, dtype=self.dtype, rngs=rngs)

        self.q_proj = linear(cfg.d_model, cfg.num_heads * self.head_dim)
        self.k_proj = linear(cfg.d_model, cfg.num_kv_heads * self.head_dim)
        self.v_proj = linear(cfg.d_model, cfg.num_kv_heads * self.head_dim)
        self.o_proj = linear(cfg.num_heads * self.head_dim, cfg.d_model)
        options = mixer_options(cfg, "attention", AttentionOptions)
        check_choice("attention mixer", "position", options.position, POSITIONS)
        self.position = options.position
        qk_norm = options.qk_norm
        self.q_norm = RMSNorm(self.head_dim, eps=cfg.norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, eps=cfg.norm_eps) if qk_norm else None

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions, cache: MixerCache = None
    ) -> MixerOutput:
        """Causal softmax attention over RoPE'd q, k (GQA): x [B, T, D] -> y [B, T, D]."""
        check_call(self, x, segment_ids, positions, cache, length_of=("k", 1))
        q, k, v = self._project_qkv(x, positions)
        if cache is None:
            bias = alibi_bias(positions, positions, self.num_heads) if self.position == "alibi" else None
            out = causal_attention(q, k, v, segment_ids, bias=bias)
            new_cache = None
        else:
            out, new_cache = self._attend_cached(q, k, v, cache, positions)
        batch, length = x.shape[:2]
        return self.o_proj(out.reshape(batch, length, self.num_heads * self.head_dim)), new_cache

    def _project_qkv(self, x: jax.Array, positions: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """x: [B, T, D] -> q [B, T, H, Dh], k and v [B, T, Hkv, Dh], with RoPE applied to q and k (position "rope")."""
        q, k, v = projections.project_qkv(
            x, self.q_proj, self.k_proj, self.v_proj, self.num_heads, self.num_kv_heads, self.head_dim
        )
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.position == "rope":
            q, k = projections.rope_qk(q, k, positions, self.rope_theta)
        return q, k, v

    def _attend_cached(
        self, q: jax.Array, k: jax.Array, v: jax.Array, cache: dict[str, jax.Array], positions: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Writes k, v [B, T', Hkv, Dh] at the cache index; attends q [B, T', H, Dh] to the filled slots.

        With ALiBi a key's position is its cache slot: decoding writes one unpacked sequence from slot 0.
        """
        index = cache["index"]
        start = (jnp.zeros((), jnp.int32), index, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        keys = jax.lax.dynamic_update_slice(cache["k"], k.astype(cache["k"].dtype), start)
        values = jax.lax.dynamic_update_slice(cache["v"], v.astype(cache["v"].dtype), start)
        mask = decode_mask(index, q.shape[1], keys.shape[1])
        bias = None
        if self.position == "alibi":
            slots = jnp.broadcast_to(jnp.arange(keys.shape[1], dtype=jnp.int32), (q.shape[0], keys.shape[1]))
            bias = alibi_bias(positions, slots, self.num_heads)
        out = _dot_product_attention(q.astype(keys.dtype), keys, values, mask=mask, bias=bias)
        new_index = index + jnp.asarray(q.shape[1], jnp.int32)
        return out.astype(self.dtype), {"k": keys, "v": values, "index": new_index}

    def attention_logits(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array
    ) -> jax.Array:
        """x [B, T, D] -> the forward's float32 logits [B, H, T, T], −inf where masked (diagnostics; O(T²)).

        Query head h reads kv head h // (H // Hkv); q and k carry QK-norm and RoPE as in the forward.
        """
        q, k, _ = self._project_qkv(x, positions)
        k = jnp.repeat(k, self.num_heads // self.num_kv_heads, axis=2)
        logits = jnp.einsum(
            "bihd,bjhd->bhij", q.astype(jnp.float32), k.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST
        ) * jnp.float32(self.head_dim**-0.5)
        if self.position == "alibi":
            logits = logits + alibi_bias(positions, positions, self.num_heads)
        return jnp.where(causal_mask(segment_ids, x.shape[1]), logits, -jnp.inf)

    def attention_weights(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array
    ) -> jax.Array:
        """x [B, T, D] -> the softmax probabilities [B, H, T, T] float32 of the forward, 0 where masked."""
        return jax.nn.softmax(self.attention_logits(x, segment_ids=segment_ids, positions=positions), axis=-1)

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty KV cache: k, v [batch_size, max_len, Hkv, Dh] in dtype and a write index (int32 scalar)."""
        shape = (batch_size, max_len, self.num_kv_heads, self.head_dim)
        return {
            "k": jnp.zeros(shape, dtype),
            "v": jnp.zeros(shape, dtype),
            "index": jnp.zeros((), jnp.int32),
        }
