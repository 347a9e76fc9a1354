"""GOAT: causal softmax attention with a learned attention prior folded into extra q/k channels.

Paper: Litman & Guo, "You Need Better Attention Priors" (GOAT, ICML 2026, arXiv 2601.15380), read from the
official code. Per query head h (KV head g = h // (H // Hkv)), query position i and key position j
(positions inside the segment):

    ℓ_ij = q_c,i · k_c,j / √D_c + κ_g(i − j) + u_g(j)
    κ_g(Δ) = Σ_r A_{g,r} cos(ω_r Δ) + B_{g,r} sin(ω_r Δ),          ω_r = 1e4^(−r/(R−1))
    u_g(j) = s·[gain_g · MLP(φ(j)) + bump_g · 1[j = 0]] + s·softplus(ρ_g)·j   (the "sink" term)

The content part uses the first D_c = D − (2R + 1[key_bias]) channels of the ordinary q/k projections;
the remaining channels are overwritten by positional features (as in GOAT's code):

    q_pos = [A cos ωi + B sin ωi, A sin ωi − B cos ωi, 1],   k_pos = [cos ωj, sin ωj, u_bounded(j)]

so q_pos · k_pos = κ(i − j) + u_bounded(j) exactly. The content part is pre-scaled by 1/√D_c and the
kernel is called with scale=1.0, so its own 1/√D never touches the prior channels (GOAT's
"multiply by √D" trick gives the same logits; ours avoids the extra multiply and its rounding).

The recency term s·softplus(ρ)·j is NOT folded into a channel: under the causal mask it equals
−s·softplus(ρ)·(i − j) plus a row constant (which softmax ignores), i.e. an ALiBi bias, and folding it
loses precision (docs/numerics.md) (the lane grows like slope·T). It is passed as a
float32 bias computed from integer positions.

Options (`cfg.mixer_options`):
  pos_rank (int, 4): R, the number of Fourier frequencies of the relative term (0 disables it).
  abs_rank (int, 4): M, the frequencies of the sink MLP's absolute features φ(j).
  key_bias (bool, True): the key-only sink term u(j) (MLP, BOS bump, recency slope).
  init ("seeded" | "uniform", "seeded"): GOAT's two init modes: seeded (GPT) has A ~ N(0, 1e-2)
      and ALiBi recency slopes; uniform (ViT/BERT) starts from a uniform prior (A = 0, the MLP's last layer
      0, ρ = −30).
  training_seq_len (int, cfg.max_seq_len): T_train in φ(j). Fixed (never the current length) so cached
      decoding sees the same features as the full forward and the features extrapolate.
  prior_scale (float, 1.0): s, the sink-term scale.
  fp8_logits ("off" | "rank_aware" | "spectral" | "static", "off"),
      fp8_scale (float, 1.0), fp8_headroom (float, 0.8): as
      the attention mixer's (zoo/layers/fp8_scaling.py, docs/papers/fp8_rank_aware.md): the training /
      scoring forward casts s_h·(q_total·k_total) to E4M3, divides by s_h and adds the recency bias in
      float32, through the materialized XLA path (`fp8_scaling.fp8_attention`, not jax.nn's kernel).
      "spectral" bounds the logit by ρ²σ_max(W_Q,c W_K,cᵀ)/√D_c (content channels, ρ the largest token
      norm of the call) plus Σ_r √(A_r² + B_r²) (the Fourier lanes) plus max|u_bounded(j)| over the call's
      positions, so it cannot overflow. Cached decoding keeps float32 logits.
  prefill ("dense" | "pbs", "dense"), pbs_tau (0.9), pbs_block (128), pbs_segment (256), pbs_max_blocks (None):
      as the attention mixer's: "pbs" runs PBS-Attn (`zoo.longctx.pbs`) on q_total, k_total (scale 1) for a
      multi-token chunk written into an empty decode cache, the recency bias −s·softplus(ρ)·(i − j) passed as
      the separable pair (−slope·i, slope·j) (`recency_terms`); decode steps and the training forward stay dense.
Not implemented: the optional query-norm prior gate and the 2D (ViT) mode of GOAT.

q/k/v/o projections follow the zoo's attention mixer (nnx.Linear defaults), so GOAT and the baseline
differ only by the prior. Prior parameters and the sink MLP stay float32; the bounded positional lanes
are cast to the compute dtype, the recency bias stays float32.

Decode cache: the augmented keys k_total [B, S, Hkv, D] (content + positional lanes for the absolute key
positions), v [B, S, Hkv, D], the key positions [B, S] int32 (for the recency bias) and the write index.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.layers import fp8_scaling, projections
from icml26zoo.layers.alibi import alibi_slopes
from icml26zoo.layers.options import check_choice
from icml26zoo.longctx import pbs
from icml26zoo.mixers.attention import _dot_product_attention, causal_attention, causal_mask, decode_mask
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_call, read_mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer

INITS = ("seeded", "uniform")
_HIDDEN = 4  # the sink MLP's hidden width: min(2·in, max(2·out, 4)) = 4 for out = 1 (GOAT's code)


def fourier_frequencies(rank: int, base: float = 1e4) -> np.ndarray:
    """ω_r = base^(−r/(rank−1)) for r < rank, float64 [rank] (a single frequency is 1)."""
    exponent = np.arange(rank) / (rank - 1) if rank > 1 else np.zeros(rank)
    return base ** (-exponent)


def sink_features(positions: jax.Array, abs_rank: int, train_len: int) -> jax.Array:
    """φ(j): positions [...] int -> float32 [..., 2M + 2] = [cos νj, sin νj, j/T, log(1+j)/log(1+T)]."""
    j = positions.astype(jnp.float32)[..., None]
    angles = j * jnp.asarray(fourier_frequencies(abs_rank), jnp.float32)
    extra = [j / train_len, jnp.log1p(j) / math.log1p(train_len)]
    return jnp.concatenate([jnp.cos(angles), jnp.sin(angles), *extra], axis=-1)


@dataclasses.dataclass(frozen=True)
class GOATOptions(fp8_scaling.FP8LogitOptions, pbs.PBSPrefillOptions):
    """The GOAT mixer's `cfg.mixer_options` (see the module docstring; fp8_* and prefill/pbs_* inherited),
    validated by `parse_options`."""

    pos_rank: int = 4
    abs_rank: int = 4
    key_bias: bool = True
    init: str = "seeded"
    training_seq_len: int | None = None  # None = cfg.max_seq_len
    prior_scale: float = 1.0


def parse_options(cfg: ModelConfig) -> GOATOptions:
    """Reads and validates the GOAT options of `cfg`; a bad name or value raises ValueError naming it."""
    opts = read_mixer_options(cfg, "goat", GOATOptions)
    if opts["training_seq_len"] is None:
        opts["training_seq_len"] = cfg.max_seq_len
    for name, low in (("pos_rank", 0), ("abs_rank", 1), ("training_seq_len", 1)):
        if opts[name] < low:
            raise ValueError(f"goat mixer option {name!r} must be an integer >= {low}, got {opts[name]!r}")
    check_choice("goat mixer", "init", opts["init"], INITS)
    fp8_scaling.FP8Logits.from_options("goat mixer", opts)
    pbs.PBSPrefill.from_options("goat mixer", GOATOptions(**opts))
    num_prior = 2 * opts["pos_rank"] + int(opts["key_bias"])
    if cfg.resolved_head_dim <= num_prior:
        raise ValueError(
            f"goat mixer option pos_rank={opts['pos_rank']} (with key_bias={opts['key_bias']}) leaves no content "
            f"channels: head_dim {cfg.resolved_head_dim} must exceed 2·pos_rank + key_bias = {num_prior}"
        )
    return GOATOptions(**opts)


@register_mixer("goat")
class GOATAttention(nnx.Module):
    """GOAT mixer: x [B, T, D] -> y [B, T, D] (see the module docstring for the math and options)."""

    # The conformance head dim is 8, so the default R = 4 does not fit (8 ≤ 2·4 + 1); R = 2 leaves D_c = 3.
    # The uniform init is not a variant: its zero last MLP layer gives the MLP's first layer and the sink
    # gain exactly zero gradient at init, which the harness rejects ("a parameter gets no gradient").
    CONFORMANCE_OPTIONS = ((("pos_rank", 2),), (("pos_rank", 0),))

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        opts = self.options = parse_options(cfg)
        self.num_heads, self.num_kv_heads = cfg.num_heads, cfg.num_kv_heads
        self.head_dim, self.d_model = cfg.resolved_head_dim, cfg.d_model
        self.dtype = jnp.dtype(cfg.compute_dtype)
        self.content_dim = self.head_dim - 2 * opts.pos_rank - int(opts.key_bias)
        self.fp8 = fp8_scaling.FP8Logits.from_options("goat mixer", opts)
        self.pbs = pbs.PBSPrefill.from_options("goat mixer", opts)
        seeded = opts.init == "seeded"

        linear = functools.partial(projections.linear, dtype=self.dtype, rngs=rngs)

        width, kv_width = cfg.num_heads * self.head_dim, cfg.num_kv_heads * self.head_dim
        self.q_proj, self.o_proj = linear(cfg.d_model, width), linear(width, cfg.d_model)
        self.k_proj, self.v_proj = linear(cfg.d_model, kv_width), linear(cfg.d_model, kv_width)
        hkv, rank = cfg.num_kv_heads, opts.pos_rank
        init_a = 1e-2 * jax.random.normal(rngs.params(), (hkv, rank)) if seeded else jnp.zeros((hkv, rank))
        # A (even in the lag) and B (odd); None when R = 0 (assigned once: nnx fixes an attribute's kind).
        self.lambda_sym = nnx.Param(init_a.astype(jnp.float32)) if rank else None
        self.lambda_asym = nnx.Param(jnp.zeros((hkv, rank), jnp.float32)) if rank else None
        if opts.key_bias:
            n_in = 2 * opts.abs_rank + 2
            small = nnx.initializers.normal(1e-3)
            self.mlp_w1 = nnx.Param(small(rngs.params(), (n_in, _HIDDEN), jnp.float32))
            self.mlp_b1 = nnx.Param(jnp.zeros((_HIDDEN,), jnp.float32))
            w2 = small(rngs.params(), (_HIDDEN, 1), jnp.float32) if seeded else jnp.zeros((_HIDDEN, 1), jnp.float32)
            self.mlp_w2, self.mlp_b2 = nnx.Param(w2), nnx.Param(jnp.zeros((1,), jnp.float32))
            self.sink_gain = nnx.Param(jnp.ones((hkv,), jnp.float32))
            self.sink_bump = nnx.Param(jnp.zeros((hkv,), jnp.float32))
            # softplus⁻¹(slope) = log(expm1(slope)): the recency slope starts at the ALiBi slope (seeded).
            raw = np.log(np.expm1(alibi_slopes(hkv))) if seeded else np.full((hkv,), -30.0)
            self.recency_raw = nnx.Param(jnp.asarray(raw, jnp.float32))

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions, cache: MixerCache = None
    ) -> MixerOutput:
        """Softmax attention of q_total·k_total plus the recency bias: x [B, T, D] -> y [B, T, D]."""
        check_call(self, x, segment_ids, positions, cache, length_of=("k", 1))
        q_total, k_total, v = self.augmented_qkv(x, positions)
        if cache is None:
            bias = self.recency_bias(positions, positions)
            if self.fp8.enabled:
                mask, scales = causal_mask(segment_ids, x.shape[1]), self.fp8_scales(x, positions)
                out = fp8_scaling.fp8_attention(q_total, k_total, v, mask, scales, bias, logit_scale=1.0)
            else:
                out = causal_attention(q_total, k_total, v, segment_ids, bias=bias, scale=1.0)
            new_cache = None
        else:
            out, new_cache = self._attend_cached(q_total, k_total, v, positions, cache)
        batch, length = x.shape[:2]
        return self.o_proj(out.reshape(batch, length, self.num_heads * self.head_dim)), new_cache

    def fp8_scales(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        """Per-head FP8 scales s [H] float32 of q_total·k_total for mixer input x [B, T, D] (option fp8_logits)."""
        heads, kv_heads, dc, d = self.num_heads, self.num_kv_heads, self.content_dim, self.d_model

        def bound() -> jax.Array:
            wq = self.q_proj.kernel[...].reshape(d, heads, self.head_dim)[..., :dc].reshape(d, heads * dc)
            wk = self.k_proj.kernel[...].reshape(d, kv_heads, self.head_dim)[..., :dc].reshape(d, kv_heads * dc)
            content = fp8_scaling.weight_bound(wq, wk, heads, kv_heads, x, rotary=False, logit_scale=dc**-0.5,
                                               mode=self.fp8.mode)
            prior = jnp.zeros((kv_heads,), jnp.float32)
            if self.lambda_sym is not None:
                prior = prior + jnp.sum(jnp.hypot(self.lambda_sym[...], self.lambda_asym[...]), axis=-1)
            if self.options.key_bias:
                prior = prior + jnp.max(jnp.abs(self.sink_lane(positions)), axis=(0, 1))
            return content + self._group(prior, 0)

        return self.fp8.scales(heads, bound)

    def _group(self, per_kv_head: jax.Array, axis: int) -> jax.Array:
        """Repeats a per-KV-head array along `axis` to the query heads (head h reads KV head h // group)."""
        return jnp.repeat(per_kv_head, self.num_heads // self.num_kv_heads, axis=axis)

    def sink_lane(self, positions: jax.Array) -> jax.Array:
        """The bounded sink term s·[gain·MLP(φ(j)) + bump·1[j=0]]: positions [B, T] -> float32 [B, T, Hkv]."""
        phi = sink_features(positions, self.options.abs_rank, self.options.training_seq_len)
        hp = jax.lax.Precision.HIGHEST  # the MLP is kept in full float32 (GOAT's code)
        hidden = jax.nn.silu(jnp.dot(phi, self.mlp_w1[...], precision=hp) + self.mlp_b1[...])
        mlp = jnp.dot(hidden, self.mlp_w2[...], precision=hp) + self.mlp_b2[...]  # [B, T, 1]
        bos = (positions == 0).astype(jnp.float32)[..., None]
        return self.options.prior_scale * (self.sink_gain[...] * mlp + self.sink_bump[...] * bos)

    def recency_bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array | None:
        """−s·softplus(ρ)·(i − j) as a float32 bias [B, H, T, S] (None without key_bias)."""
        if not self.options.key_bias:
            return None
        slope = self.options.prior_scale * jax.nn.softplus(self._group(self.recency_raw[...], 0))  # [H]
        lag = (q_positions[:, :, None] - k_positions[:, None, :]).astype(jnp.float32)  # [B, T, S]
        return -slope[None, :, None, None] * lag[:, None]

    def recency_terms(self, positions: jax.Array) -> tuple[jax.Array | None, jax.Array | None]:
        """The recency bias −slope_h·(i − j) as the separable pair (−slope_h·i, slope_h·j) at positions [B, T]:
        (query_bias, key_bias), each [B, T, H] float32 (None, None without key_bias). For the PBS prefill."""
        if not self.options.key_bias:
            return None, None
        slope = self.options.prior_scale * jax.nn.softplus(self._group(self.recency_raw[...], 0))  # [H]
        scaled = positions.astype(jnp.float32)[..., None] * slope
        return -scaled, scaled

    def augmented_qkv(self, x: jax.Array, positions: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """x [B, T, D] -> q_total [B, T, H, Dh], k_total and v [B, T, Hkv, Dh] in the compute dtype.

        q_total · k_total = q_c·k_c/√D_c + κ(i − j) + u_bounded(j); the recency bias comes separately.
        """
        batch, length = x.shape[:2]
        q, k, v = projections.project_qkv(
            x, self.q_proj, self.k_proj, self.v_proj, self.num_heads, self.num_kv_heads, self.head_dim
        )
        dc = self.content_dim
        q_parts = [q[..., :dc] * jnp.asarray(1.0 / math.sqrt(dc), self.dtype)]
        k_parts = [k[..., :dc]]
        if self.lambda_sym is not None:
            angle = positions.astype(jnp.float32)[..., None] * jnp.asarray(
                fourier_frequencies(self.options.pos_rank), jnp.float32
            )  # [B, T, R]
            cos, sin = jnp.cos(angle)[:, :, None], jnp.sin(angle)[:, :, None]  # [B, T, 1, R]
            a, b = self._group(self.lambda_sym[...], 0), self._group(self.lambda_asym[...], 0)  # [H, R]
            q_parts += [(a * cos + b * sin).astype(self.dtype), (a * sin - b * cos).astype(self.dtype)]
            k_parts += [jnp.broadcast_to(t, (batch, length, self.num_kv_heads, t.shape[-1])).astype(self.dtype)
                        for t in (cos, sin)]
        if self.options.key_bias:
            q_parts.append(jnp.ones((batch, length, self.num_heads, 1), self.dtype))
            k_parts.append(self.sink_lane(positions)[..., None].astype(self.dtype))
        return jnp.concatenate(q_parts, -1), jnp.concatenate(k_parts, -1), v

    def _attend_cached(
        self, q: jax.Array, k: jax.Array, v: jax.Array, positions: jax.Array, cache: dict[str, jax.Array]
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Writes k_total, v [B, T', Hkv, Dh] and positions at the cache index; q [B, T', H, Dh] reads them."""
        index, zero = cache["index"], jnp.zeros((), jnp.int32)
        keys = jax.lax.dynamic_update_slice(cache["k"], k.astype(cache["k"].dtype), (zero, index, zero, zero))
        values = jax.lax.dynamic_update_slice(cache["v"], v.astype(cache["v"].dtype), (zero, index, zero, zero))
        key_pos = jax.lax.dynamic_update_slice(cache["pos"], positions.astype(jnp.int32), (zero, index))
        mask = decode_mask(index, q.shape[1], keys.shape[1])
        bias = self.recency_bias(positions, key_pos)
        dense = lambda: _dot_product_attention(q.astype(keys.dtype), keys, values, bias=bias, mask=mask, scale=1.0)
        query_bias, key_bias = self.recency_terms(positions)
        out = self.pbs.cached(q.astype(keys.dtype), k.astype(keys.dtype), v.astype(values.dtype), index, dense,
                              scale=1.0, query_bias=query_bias, key_bias=key_bias)
        new_index = index + jnp.asarray(q.shape[1], jnp.int32)
        return out.astype(self.dtype), {"k": keys, "v": values, "pos": key_pos, "index": new_index}

    def attention_weights(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array
    ) -> jax.Array:
        """x [B, T, D] -> the forward's probabilities [B, H, T, T] float32 (0 where masked; diagnostics, O(T²)):
        softmax of q_total·k_total plus the recency bias."""
        q, k, _ = self.augmented_qkv(x, positions)
        logits = jnp.einsum(
            "bihd,bjhd->bhij", q.astype(jnp.float32), self._group(k, 2).astype(jnp.float32),
            precision=jax.lax.Precision.HIGHEST,
        )
        bias = self.recency_bias(positions, positions)
        logits = logits if bias is None else logits + bias
        length = x.shape[1]
        mask = causal_mask(segment_ids, length)
        return jax.nn.softmax(jnp.where(mask, logits, -jnp.inf), axis=-1)

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty cache: k_total, v [B, S, Hkv, Dh] in dtype, key positions [B, S] int32, write index."""
        shape = (batch_size, max_len, self.num_kv_heads, self.head_dim)
        return {
            "k": jnp.zeros(shape, dtype),
            "v": jnp.zeros(shape, dtype),
            "pos": jnp.zeros((batch_size, max_len), jnp.int32),
            "index": jnp.zeros((), jnp.int32),
        }
