"""Causal softmax attention with grouped-query heads, RoPE (or ALiBi, or no positions), packed segments and a
KV cache; optionally a sigmoid output gate and an explicit attention sink (learnable logit or softmax-plus-one)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.layers import fp8_scaling, projections
from icml26zoo.layers.alibi import alibi_bias
from icml26zoo.layers.norms import RMSNorm
from icml26zoo.layers.options import check_choice
from icml26zoo.longctx import pbs
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_call, mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer


@dataclasses.dataclass(frozen=True)
class AttentionOptions(fp8_scaling.FP8LogitOptions, pbs.PBSPrefillOptions):
    """The attention mixer's `cfg.mixer_options` (see `Attention`; the fp8_* fields are inherited)."""

    qk_norm: bool = False
    position: str = "rope"
    output_gate: str = "none"
    sink: str = "none"


POSITIONS = ("rope", "alibi", "none")
OUTPUT_GATES = ("none", "head", "channel")
SINKS = ("none", "learnable", "plus_one")


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


def sink_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, bias: jax.Array | None, sink_logit: jax.Array
) -> jax.Array:
    """Softmax attention with one extra always-visible key slot whose logit is sink_logit [H] and value is 0.

    q [B, T, H, Dh], k/v [B, S, Hkv, Dh], mask bool [B or 1, 1, T, S], bias float32 [B or 1, H, T, S] or None
    -> [B, T, H, Dh]. The slot is appended as a zero key (logit 0) plus a bias of sink_logit_h, so the row
    softmax runs over S + 1 entries and the real keys' weights sum to less than 1 (softmax-plus-one when
    sink_logit = 0).
    """
    batch, length = q.shape[:2]
    zero_slot = jnp.zeros((batch, 1, *k.shape[2:]), k.dtype)
    keys, values = jnp.concatenate([k, zero_slot], axis=1), jnp.concatenate([v, zero_slot], axis=1)
    heads, slots = q.shape[2], k.shape[1]
    mask = jnp.broadcast_to(mask, (mask.shape[0], 1, length, slots))
    mask = jnp.concatenate([mask, jnp.ones((*mask.shape[:3], 1), jnp.bool_)], axis=-1)
    bias = jnp.zeros((1, heads, length, slots), jnp.float32) if bias is None else bias
    bias = jnp.broadcast_to(bias, (bias.shape[0], heads, length, slots))
    sink_col = jnp.broadcast_to(sink_logit.astype(jnp.float32)[None, :, None, None], (*bias.shape[:3], 1))
    bias = jnp.concatenate([bias, sink_col], axis=-1)
    return _dot_product_attention(q, keys, values, mask=mask, bias=bias)


@register_mixer("attention")
class Attention(nnx.Module):
    """Multi-head causal softmax attention (GQA: query head h reads kv head h // (H // Hkv)).

    Options (`cfg.mixer_options`):
      qk_norm (bool, default False): RMSNorm over the head dimension of q and k before RoPE
        (as in OLMo 2 / Qwen 3); keeps attention logits bounded in long or low-precision runs.
      position (str, default "rope"): how positions enter. "rope" rotates q and k; "alibi" adds the
        per-head recency bias -slope_h·(i - j) to the logits instead (Press et al. 2022; the usual
        length-extrapolation baseline); "none" uses no positional signal (NoPE: causality alone).
      output_gate (str, default "none"): a sigmoid gate on the attention output before o_proj,
        o_h ← o_h ⊙ σ(x W_g) computed from the mixer input x (gated attention, Qiu et al. 2025). "head":
        one gate per head (W_g [D, H]); "channel": one per head and channel (W_g [D, H·Dh]). Adds parameters.
      sink (str, default "none"): an explicit attention sink, a key slot every query sees, with value 0
        and logit s_h, so the real keys' weights may sum to less than 1. "learnable": s_h is a learned
        per-head scalar (init 0); "plus_one": s_h = 0 fixed (softmax-plus-one, softmax₁).
        `attention_logits` / `attention_weights` then have S + 1 columns, the sink last.
      fp8_logits (str, default "off"): hold the logits S = q·k/√Dh in FP8 E4M3 in the training / scoring
        forward (an option shared with goat, fox, fix and circulation; `zoo.layers.fp8_scaling.fp8_attention`:
        cast s_h·S to float8_e4m3fn, divide by s_h, softmax in float32; an overflow past ±448 gives NaN, as
        JAX's cast does). "spectral" and "rank_aware": s_h = u·448/B̂_h from the weights (Emadi, ICML 2026;
        reconstruction), with c_h = σ_max(W_Q,h W_K,hᵀ) (power iteration), or ‖W_Q,h‖₂‖W_K,h‖₂ with RoPE (the
        rotation between q and k voids the product's bound). "spectral": B̂_h = ρ_max² c_h/√Dh with ρ_max the
        largest token norm of the mixer input in this call; deterministic, no overflow is possible with it.
        "rank_aware": the rank-aware tail bound B̂_h = ρ² c_h/√Dh · (√Dh·√(2ℓ) + 2ℓ), ℓ = log(2T²/δ),
        δ = 1e-6, ρ² the mean squared token norm / D (`fp8_scaling.weight_bound`): it holds with probability
        ≥ 1 − δ for isotropic tokens only. With qk_norm both use B̂ = √Dh max|γ_q| max|γ_k| from the norm
        gains alone. "static": s_h = fp8_scale for every head (e.g. an amax-calibrated
        scale). Cached decoding keeps float32 logits (the cache does not keep the inputs' norms), so it
        matches the forward only up to the FP8 rounding.
      fp8_scale (float, default 1.0): the "static" scale (> 0).
      fp8_headroom (float, default 0.8): u ∈ (0, 1] of the "rank_aware" and "spectral" scales.
      prefill (str, default "dense"): "pbs" runs PBS-Attn (`zoo.longctx.pbs`, permuted block-sparse
        attention) on a multi-token chunk written into an empty cache; decode steps and the training
        forward stay dense. With pbs_tau (0.9), pbs_block (128), pbs_segment (256), pbs_max_blocks (None).
        Needs position "rope" or "none" and no sink (PBS's kernel takes no logit bias).
    """

    # One variant carries ALiBi, the output gate and the learnable sink together: the harness checks what
    # they change (cached decoding, packing, gradients) at a third of the suite time of one variant each.
    CONFORMANCE_OPTIONS = (
        (), (("qk_norm", True),), (("position", "alibi"), ("output_gate", "channel"), ("sink", "learnable"))
    )

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
        check_choice("attention mixer", "output_gate", options.output_gate, OUTPUT_GATES)
        check_choice("attention mixer", "sink", options.sink, SINKS)
        self.output_gate, self.sink = options.output_gate, options.sink
        gate_width = {"none": 0, "head": cfg.num_heads, "channel": cfg.num_heads * self.head_dim}[self.output_gate]
        self.gate_proj = linear(cfg.d_model, gate_width) if gate_width else None
        self.sink_logit = nnx.Param(jnp.zeros((cfg.num_heads,), jnp.float32)) if self.sink == "learnable" else None
        self.fp8 = fp8_scaling.FP8Logits.from_options("attention mixer", options)
        self.pbs = pbs.PBSPrefill.from_options("attention mixer", options)
        if self.pbs.enabled and (self.position == "alibi" or self.sink != "none"):
            raise ValueError(f"attention mixer option prefill='pbs' needs position 'rope' or 'none' and sink "
                             f"'none'; got position {self.position!r}, sink {self.sink!r}")

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions, cache: MixerCache = None
    ) -> MixerOutput:
        """Causal softmax attention over RoPE'd q, k (GQA): x [B, T, D] -> y [B, T, D]."""
        check_call(self, x, segment_ids, positions, cache, length_of=("k", 1))
        q, k, v = self._project_qkv(x, positions)
        if cache is None:
            bias = alibi_bias(positions, positions, self.num_heads) if self.position == "alibi" else None
            if self.fp8.enabled:
                sink = None if self.sink == "none" else self.sink_logits()
                mask = causal_mask(segment_ids, x.shape[1])
                out = fp8_scaling.fp8_attention(q, k, v, mask, self.fp8_scales(x), bias, sink)
            elif self.sink == "none":
                out = causal_attention(q, k, v, segment_ids, bias=bias)
            else:
                out = sink_attention(q, k, v, causal_mask(segment_ids, x.shape[1]), bias, self.sink_logits())
            new_cache = None
        else:
            out, new_cache = self._attend_cached(q, k, v, cache, positions)
        batch, length = x.shape[:2]
        out = self.gate_heads(x, out)
        return self.o_proj(out.reshape(batch, length, self.num_heads * self.head_dim)), new_cache

    def sink_logits(self) -> jax.Array:
        """The sink slot's logit per head, float32 [H]: learned ("learnable") or zeros ("plus_one")."""
        if self.sink_logit is not None:
            return self.sink_logit[...]
        return jnp.zeros((self.num_heads,), jnp.float32)

    def fp8_scales(self, x: jax.Array) -> jax.Array:
        """The per-head FP8 logit scales s [H] float32 for mixer input x [B, T, D] (option fp8_logits)."""
        return fp8_scaling.projection_scales(self.fp8, x, q_proj=self.q_proj, k_proj=self.k_proj, q_norm=self.q_norm,
                                             k_norm=self.k_norm, heads=self.num_heads, kv_heads=self.num_kv_heads,
                                             head_dim=self.head_dim, rotary=self.position == "rope")

    def gate_heads(self, x: jax.Array, heads: jax.Array) -> jax.Array:
        """Applies the output gate: heads [B, T, H, Dh] ⊙ σ(x W_g) with x [B, T, D]; identity without a gate."""
        if self.gate_proj is None:
            return heads
        batch, length = x.shape[:2]
        gate = jax.nn.sigmoid(self.gate_proj(x).astype(jnp.float32)).reshape(batch, length, self.num_heads, -1)
        return (heads.astype(jnp.float32) * gate).astype(heads.dtype)

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
        if self.sink == "none":
            dense = lambda: _dot_product_attention(q.astype(keys.dtype), keys, values, mask=mask, bias=bias)
            out = self.pbs.cached(q.astype(keys.dtype), k.astype(keys.dtype), v.astype(values.dtype), index, dense)
        else:
            out = sink_attention(q.astype(keys.dtype), keys, values, mask, bias, self.sink_logits())
        new_index = index + jnp.asarray(q.shape[1], jnp.int32)
        return out.astype(self.dtype), {"k": keys, "v": values, "index": new_index}

    def attention_logits(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array
    ) -> jax.Array:
        """x [B, T, D] -> the forward's float32 logits [B, H, T, T], −inf where masked (diagnostics; O(T²)).

        Query head h reads kv head h // (H // Hkv); q and k carry QK-norm and RoPE as in the forward.
        With a sink the result is [B, H, T, T + 1]: the last column holds the sink logit s_h for every query.
        """
        q, k, _ = self._project_qkv(x, positions)
        k = jnp.repeat(k, self.num_heads // self.num_kv_heads, axis=2)
        logits = jnp.einsum(
            "bihd,bjhd->bhij", q.astype(jnp.float32), k.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST
        ) * jnp.float32(self.head_dim**-0.5)
        if self.position == "alibi":
            logits = logits + alibi_bias(positions, positions, self.num_heads)
        logits = jnp.where(causal_mask(segment_ids, x.shape[1]), logits, -jnp.inf)
        if self.sink == "none":
            return logits
        sink = jnp.broadcast_to(self.sink_logits()[None, :, None, None], (*logits.shape[:3], 1))
        return jnp.concatenate([logits, sink], axis=-1)

    def attention_weights(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array
    ) -> jax.Array:
        """x [B, T, D] -> the softmax probabilities [B, H, T, T] float32 of the forward, 0 where masked.

        With a sink: [B, H, T, T + 1], the sink slot last; each row sums to 1 including the sink.
        """
        return jax.nn.softmax(self.attention_logits(x, segment_ids=segment_ids, positions=positions), axis=-1)

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty KV cache: k, v [batch_size, max_len, Hkv, Dh] in dtype and a write index (int32 scalar)."""
        shape = (batch_size, max_len, self.num_kv_heads, self.head_dim)
        return {
            "k": jnp.zeros(shape, dtype),
            "v": jnp.zeros(shape, dtype),
            "index": jnp.zeros((), jnp.int32),
        }
