"""Circulation attention: causal softmax attention with logits M_sym + α·M_skew (read from the paper's code).

Paper: Cho, Han, Jin, "Balancing Fidelity and Diversity in Diffusion Models via Symmetric Attention
Decomposition: Hopfield Perspective" (ICML 2026, arXiv 2605.27476).
Per query head h (KV head g = h // (H // Hkv)), with A_h = W_Q,hᵀ W_K,g:

    ℓ_α = M_sym + α·M_skew = c₁·QKᵀ + c₂·KQᵀ,   c₁ = (1 + α)/2,  c₂ = (1 − α)/2
    H_org = softmax(QKᵀ/√d_h) X,   H_α = softmax(ℓ_α/√d_h) X          (retrieval over the raw inputs X)
    H_new = H_org + β(H_α − H_org),  then ·clip(‖H_α‖/‖H_new‖, ratio_min, ratio_max) per token
    out_h = H_new W_V,gᵀ, concatenated over heads, then o_proj

Single-kernel form: q̃ = [c₁q, c₂k]/√d_h and k̃ = [k, q] (head dim doubled), so q̃·k̃ = ℓ_α/√d_h with the
softmax scale 1. This general form is used (not the [q, (c₂/c₁)k] variant) because the adaptive
variant makes c₁, c₂ per query token and α ≤ −1 must work; both sit on the query side, so per-row
coefficients fold in. `reference_logits` materializes c₁QKᵀ + c₂KQᵀ for the tests.

Causal LM extension (the zoo's, not in the paper, which is non-causal): the causal and segment
masks are applied after forming ℓ_α, so the symmetric/skew split holds for the unmasked logits only.
The paper's own setting is the option `causal=False`: bidirectional attention in which every token
attends to every token of its segment (segment masking still applies), so ℓ_α is exactly M_sym + α·M_skew
within a segment. That mode is for encoders and sequence-level objectives (e.g. the classification
objective); a next-token LM trained with it sees its targets. It has no decode cache: `init_cache` and
a call with a cache raise ValueError.
GQA is allowed: k̃ contains q, so it has H heads (the cache stores past queries); A_h pairs head h with
its KV head. No RoPE: the input-space bilinear form (and the energy analysis) needs bias-free q/k
projections and no position-dependent rotation.

When β = 1 (and adaptive_beta is off) H_new = H_α with ratio 1, and by linearity retrieval over X then
W_V equals attention over V = X W_V, so the cheap path attends over V directly (the test checks both).

Options (`cfg.mixer_options`):
  alpha (float, 1.0): the circulation knob; 1.0 is the baseline.
  beta (float, 1.0): the blend factor.
  ratio_min, ratio_max (float, 0.25 and 4.0): the per-token norm-ratio clamp.
  adaptive (None | "dev" | "scale", None): η_M-guided knob, α_eff = 1 + (α − 1)·η_M ("dev") or α·η_M.
  adaptive_beta (bool, False): also β_eff = β(1 − η_M); needs adaptive.
  causal (bool, True): causal attention (the zoo's LM setting); False is the paper's non-causal
    (bidirectional) attention within each segment.
  fp8_logits ("off" | "rank_aware" | "spectral" | "static", "off"),
    fp8_scale (1.0), fp8_headroom (0.8): as the attention
    mixer's (zoo/layers/fp8_scaling.py, docs/papers/fp8_rank_aware.md): the training / scoring forward casts
    s_h·ℓ_α/√d_h (and the base logits of H_org) to E4M3 and divides by s_h. "spectral": q_i·k_j and k_i·q_j
    are both bounded by ρ²σ_max(W_Q,h W_K,gᵀ), so B̂_h = max(1, max|c₁| + |c₂|)·ρ²σ_h/√d_h (ρ the call's
    largest token norm; per-token c₁, c₂ when adaptive). Cached decoding keeps float32 logits.
  prefill ("dense" | "pbs", "dense"), pbs_tau (0.9), pbs_block (128), pbs_segment (256), pbs_max_blocks (None):
    as the attention mixer's: "pbs" runs PBS-Attn (`zoo.longctx.pbs`) for a multi-token chunk written into an
    empty decode cache, with the blocks selected on ℓ_α itself (q̃·k̃ above, scale 1). Without a blend (β = 1,
    no adaptive β) the block-sparse op attends q̃ over k̃ (2·Dh channels, H heads) and the values; with a blend
    both softmaxes (H_α and H_org) keep only the selected tokens of ℓ_α's plan, through the materialized path
    (this mixer's forward is materialized anyway). Needs causal=True; decode steps and the training forward
    stay dense.
Adaptive, causal (my extension): η_M is computed per row and token from the token's own prefix (same
segment, centered over it), averaged over heads, not over the batch (which would mix rows); gradient-free.
Non-causal, the "prefix" is the token's whole segment, so η_M is the paper's per-sequence value.
It costs O(T·C²) memory per row ([B, T, H, C, C] intermediates): meant for small models and analysis.

Decode cache: k [B, S, Hkv, Dh], past queries q [B, S, H, Dh], v [B, S, Hkv, Dh] (or, with the blend,
the raw inputs x [B, S, D]), with adaptive the float32 prefix sums Σx [B, D] and Σxxᵀ [B, D, D], and the
write index.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.layers import fp8_scaling, projections
from icml26zoo.layers.circulation_stats import (
    eta_m,
    stability_measures,
    sym_skew_frobenius,
    symmetric_skew_parts,
)
from icml26zoo.layers.options import check_choice
from icml26zoo.longctx import pbs
from icml26zoo.mixers.attention import causal_mask, decode_mask
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_call, read_mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer

_HP = jax.lax.Precision.HIGHEST
ADAPTIVE = (None, "dev", "scale")
# The per-layer summaries `CirculationAttention.stability` returns (see circulation_stats.stability_measures).
STABILITY_SUMMARIES = ("energy_mean", "energy_min", "energy_p5", "instability_mean", "alignment_mean", "eta_m",
                       "symmetry_balance")
_NO_DECODE = ("the circulation mixer with causal=False (bidirectional attention) cannot decode with a cache: "
              "every token attends to later ones; use causal=True to generate")


def circulation_logits(
    q_rows: jax.Array, k_rows: jax.Array, q_cols: jax.Array, k_cols: jax.Array, c1: Any, c2: Any
) -> jax.Array:
    """The concatenation trick: q/k at query rows [B, T, H, Dh] and key columns [B, S, H, Dh] -> [B, H, T, S].

    c1, c2: scalars or [B, T, 1, 1]. Returns (c₁ q_i·k_j + c₂ k_i·q_j)/√Dh in float32.
    """
    scale = 1.0 / math.sqrt(q_rows.shape[-1])
    q_t = jnp.concatenate([c1 * scale * q_rows.astype(jnp.float32), c2 * scale * k_rows.astype(jnp.float32)], -1)
    k_t = jnp.concatenate([k_cols, q_cols], -1).astype(jnp.float32)
    return jnp.einsum("bthd,bshd->bhts", q_t, k_t, precision=_HP)


def reference_logits(
    q_rows: jax.Array, k_rows: jax.Array, q_cols: jax.Array, k_cols: jax.Array, c1: Any, c2: Any
) -> jax.Array:
    """Materialized (c₁·QKᵀ + c₂·KQᵀ)/√Dh, [B, H, T, S] float32 (the reference for circulation_logits)."""
    qk = jnp.einsum("bthd,bshd->bhts", q_rows.astype(jnp.float32), k_cols.astype(jnp.float32), precision=_HP)
    kq = jnp.einsum("bthd,bshd->bhts", k_rows.astype(jnp.float32), q_cols.astype(jnp.float32), precision=_HP)
    c1, c2 = (jnp.moveaxis(jnp.asarray(c, jnp.float32), 2, 1) if jnp.ndim(c) == 4 else c for c in (c1, c2))
    return (c1 * qk + c2 * kq) / math.sqrt(q_rows.shape[-1])


@dataclasses.dataclass(frozen=True)
class CirculationOptions(fp8_scaling.FP8LogitOptions, pbs.PBSPrefillOptions):
    """The circulation mixer's `cfg.mixer_options` (see the module docstring; fp8_* and prefill/pbs_*
    inherited), validated by `parse_options`."""

    alpha: float = 1.0
    beta: float = 1.0
    ratio_min: float = 0.25
    ratio_max: float = 4.0
    adaptive: str | None = None
    adaptive_beta: bool = False
    causal: bool = True


def parse_options(cfg: ModelConfig) -> CirculationOptions:
    """Reads and validates the circulation options of `cfg`; a bad name or value raises ValueError naming it."""
    opts = read_mixer_options(cfg, "circulation", CirculationOptions)
    for name in ("alpha", "beta", "ratio_min", "ratio_max"):
        if not math.isfinite(opts[name]):
            raise ValueError(f"circulation mixer option {name!r} must be a finite number, got {opts[name]!r}")
    if not 0 < opts["ratio_min"] <= opts["ratio_max"]:
        raise ValueError(f"ratio_min and ratio_max must satisfy 0 < ratio_min <= ratio_max, got {opts}")
    check_choice("circulation mixer", "adaptive", opts["adaptive"], ADAPTIVE)
    if opts["adaptive_beta"] and opts["adaptive"] is None:
        raise ValueError("circulation mixer option 'adaptive_beta' needs 'adaptive' set, got adaptive=None")
    fp8_scaling.FP8Logits.from_options("circulation mixer", opts)
    options = CirculationOptions(**opts)
    if pbs.PBSPrefill.from_options("circulation mixer", options).enabled and not options.causal:
        raise ValueError("circulation mixer option prefill='pbs' needs causal=True (PBS is a cached prefill; "
                         "the bidirectional mode has no cache); got causal=False")
    return options


@register_mixer("circulation")
class CirculationAttention(nnx.Module):
    """Circulation attention mixer: x [B, T, D] -> y [B, T, D] (see the module docstring)."""

    # The skew path (α ≠ 1, V retrieval) and the full path (blend over X, adaptive α and β, prefix sums).
    # causal=False is left out: the harness checks causality and cache decoding, which the bidirectional
    # mode breaks by design; tests/zoo/test_circulation.py checks that mode's model-level properties.
    CONFORMANCE_OPTIONS = (
        (("alpha", 1.2),),
        (("alpha", 0.9), ("beta", 3.0), ("adaptive", "dev"), ("adaptive_beta", True)),
    )

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = parse_options(cfg)
        self.num_heads, self.num_kv_heads = cfg.num_heads, cfg.num_kv_heads
        self.head_dim, self.d_model = cfg.resolved_head_dim, cfg.d_model
        self.dtype = jnp.dtype(cfg.compute_dtype)
        # Retrieval over X is needed only when the blend is nonlinear (β ≠ 1 or a per-token β).
        self.retrieve_inputs = self.options.beta != 1.0 or self.options.adaptive_beta
        self.fp8 = fp8_scaling.FP8Logits.from_options("circulation mixer", self.options)
        self.pbs = pbs.PBSPrefill.from_options("circulation mixer", self.options)

        # Bias-free q/k are required: a bias breaks the bilinear form x_iᵀ A x_j.
        linear = functools.partial(projections.linear, dtype=self.dtype, rngs=rngs)

        width, kv_width = cfg.num_heads * self.head_dim, cfg.num_kv_heads * self.head_dim
        self.q_proj, self.o_proj = linear(cfg.d_model, width), linear(width, cfg.d_model)
        self.k_proj, self.v_proj = linear(cfg.d_model, kv_width), linear(cfg.d_model, kv_width)

    def _group(self, t: jax.Array) -> jax.Array:
        """[B, S, Hkv, ...] -> [B, S, H, ...]: query head h reads KV head h // (H // Hkv)."""
        return jnp.repeat(t, self.num_heads // self.num_kv_heads, axis=2)

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions = None, cache: MixerCache = None
    ) -> MixerOutput:
        """x [B, T, D]; segment_ids, positions [B, T] or None (positions unused) -> (y [B, T, D], cache or None)."""
        if cache is not None and not self.options.causal:
            raise ValueError(_NO_DECODE)
        check_call(self, x, segment_ids, positions, cache, length_of=("k", 1))
        batch, length = x.shape[:2]
        q, k, v = projections.project_qkv(
            x, self.q_proj, self.k_proj, self.v_proj, self.num_heads, self.num_kv_heads, self.head_dim
        )
        new_cache = None
        if cache is None:
            mask = self.mask(segment_ids, batch, length)
            q_cols, k_cols, v_cols, x_cols = q, k, v, x
            stats = self._prefix_stats(x, mask[:, 0]) if self.options.adaptive else None
            fp8_scales = self.fp8_scales(x, stats) if self.fp8.enabled else None
        else:
            index, zero = cache["index"], jnp.zeros((), jnp.int32)

            def write(name: str, new: jax.Array) -> jax.Array:
                start = (zero, index) + (zero,) * (new.ndim - 2)
                return jax.lax.dynamic_update_slice(cache[name], new.astype(cache[name].dtype), start)

            mask = decode_mask(index, length, cache["k"].shape[1])
            new_cache = {"k": write("k", k), "q": write("q", q), "index": index + jnp.asarray(length, jnp.int32)}
            new_cache["x" if self.retrieve_inputs else "v"] = write("x" if self.retrieve_inputs else "v",
                                                                    x if self.retrieve_inputs else v)
            q_cols, k_cols = new_cache["q"], new_cache["k"]
            v_cols, x_cols = new_cache.get("v"), new_cache.get("x")
            stats = None
            if self.options.adaptive:
                x32 = x.astype(jnp.float32)
                sum_x = cache["sum_x"][:, None] + jnp.cumsum(x32, axis=1)
                sum_xx = cache["sum_xx"][:, None] + jnp.cumsum(x32[..., :, None] * x32[..., None, :], axis=1)
                count = (index + jnp.arange(1, length + 1, dtype=jnp.int32)).astype(jnp.float32)
                stats = (sum_x, sum_xx, jnp.broadcast_to(count, (batch, length)))
                new_cache["sum_x"], new_cache["sum_xx"] = sum_x[:, -1], sum_xx[:, -1]
            fp8_scales = None
        if cache is not None and self.pbs.enabled:
            out = self._attend_pbs(q, self._group(k), v, q_cols, self._group(k_cols), v_cols, x_cols, mask, stats,
                                   cache["index"])
        else:
            out = self._attend(q, self._group(k), q_cols, self._group(k_cols), v_cols, x_cols, mask, stats,
                               fp8_scales)
        return self.o_proj(out.reshape(batch, length, self.num_heads * self.head_dim)), new_cache

    def mask(self, segment_ids: jax.Array | None, batch: int, length: int) -> jax.Array:
        """Boolean [B, 1, T, T] (True = attend): causal within a segment, or (causal=False) the whole segment."""
        if self.options.causal:
            return jnp.broadcast_to(causal_mask(segment_ids, length), (batch, 1, length, length))
        if segment_ids is None:
            return jnp.ones((batch, 1, length, length), jnp.bool_)
        return (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]

    def fp8_scales(self, x: jax.Array, stats: tuple[jax.Array, jax.Array, jax.Array] | None = None) -> jax.Array:
        """Per-head FP8 scales s [H] float32 of ℓ_α/√d_h for mixer input x [B, T, D] (option fp8_logits);
        `stats` are the adaptive prefix sums of the forward (None otherwise)."""
        def bound() -> jax.Array:
            alpha, _ = self.blend_coefficients(stats)
            coefficient = jnp.max(jnp.abs((1.0 + jnp.asarray(alpha)) / 2.0) + jnp.abs((1.0 - jnp.asarray(alpha)) / 2.0))
            spectral = fp8_scaling.weight_bound(self.q_proj.kernel[...], self.k_proj.kernel[...], self.num_heads,
                                                self.num_kv_heads, x, rotary=False, logit_scale=self.head_dim**-0.5,
                                                mode=self.fp8.mode)
            return jnp.maximum(coefficient, 1.0) * spectral

        return self.fp8.scales(self.num_heads, bound)

    def _prefix_stats(self, x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Per-token sums over the tokens it attends to (its prefix, or non-causal its segment): x [B, T, C],
        mask [B, T, S] bool ->
        (Σx [B, T, C], Σxxᵀ [B, T, C, C], count [B, T]) in float32."""
        m, x32 = mask.astype(jnp.float32), x.astype(jnp.float32)
        sum_x = jnp.einsum("bts,bsc->btc", m, x32, precision=_HP)
        sum_xx = jnp.einsum("bts,bsc,bsd->btcd", m, x32, x32, precision=_HP)
        return sum_x, sum_xx, jnp.sum(m, axis=-1)

    def eta(self, stats: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
        """η_M per row and token [B, T] from prefix sums, head-averaged, gradient-free."""
        sum_x, sum_xx, count = jax.lax.stop_gradient(stats)
        # Centered Gram matrix of the prefix: Σxxᵀ − n·μμᵀ with μ = Σx / n.
        gram = sum_xx - sum_x[..., :, None] * sum_x[..., None, :] / count[..., None, None]
        s_mat, n_mat = jax.vmap(symmetric_skew_parts)(*self.query_key_weights())
        s_mat, n_mat = jax.lax.stop_gradient((s_mat, n_mat))
        sym_sq, skew_sq = jax.vmap(lambda s, n: sym_skew_frobenius(gram, s, n))(s_mat, n_mat)  # [H, B, T]
        return jnp.mean(eta_m(sym_sq, skew_sq), axis=0)

    def blend_coefficients(
        self, stats: tuple[jax.Array, jax.Array, jax.Array] | None
    ) -> tuple[float | jax.Array, float | jax.Array]:
        """(α, β): the options' floats, or with prefix `stats` (adaptive) the per-token α_eff, β_eff [B, T, 1, 1]."""
        alpha, beta = self.options.alpha, self.options.beta
        if stats is not None:
            eta = self.eta(stats)[:, :, None, None]  # [B, T, 1, 1]
            alpha = 1.0 + (alpha - 1.0) * eta if self.options.adaptive == "dev" else alpha * eta
            beta = beta * (1.0 - eta) if self.options.adaptive_beta else beta
        return alpha, beta

    def _attend(
        self, q: jax.Array, k: jax.Array, q_cols: jax.Array, k_cols: jax.Array, v_cols: jax.Array,
        x_cols: jax.Array, mask: jax.Array, stats: tuple[jax.Array, jax.Array, jax.Array] | None,
        fp8_scales: jax.Array | None = None,
    ) -> jax.Array:
        """Rows q, k [B, T, H, Dh]; columns [B, S, H, Dh]; mask [B|1, 1, T, S] -> out [B, T, H, Dh]
        (fp8_scales [H]: the logits pass through E4M3)."""
        if not self.retrieve_inputs:
            probs, _, _ = self._probabilities(q, k, q_cols, k_cols, mask, stats, fp8_scales)
            return jnp.einsum("bhts,bshd->bthd", probs.astype(self.dtype), self._group(v_cols))
        h_new = self._blended_patterns(q, k, q_cols, k_cols, x_cols, mask, stats, fp8_scales).astype(self.dtype)
        w_v = self.v_proj.kernel[...].astype(self.dtype).reshape(self.d_model, self.num_kv_heads, self.head_dim)
        w_v = jnp.repeat(w_v, self.num_heads // self.num_kv_heads, axis=1)  # [C, H, Dh]
        return jnp.einsum("bthc,chd->bthd", h_new, w_v)

    def pbs_query_key(self, q: jax.Array, k: jax.Array,
                      stats: tuple[jax.Array, jax.Array, jax.Array] | None) -> tuple[jax.Array, jax.Array]:
        """q̃ = [c₁q, c₂k]/√Dh and k̃ = [k, q], each [B, T, H, 2·Dh] float32 (q, k [B, T, H, Dh], k grouped), so
        that q̃_i·k̃_j = ℓ_α/√Dh: the PBS prefill's queries and keys (scale 1)."""
        alpha, _ = self.blend_coefficients(stats)
        c1, c2 = (1.0 + alpha) / 2.0, (1.0 - alpha) / 2.0
        q32, k32 = q.astype(jnp.float32), k.astype(jnp.float32)
        scale = 1.0 / math.sqrt(self.head_dim)
        return jnp.concatenate([c1 * scale * q32, c2 * scale * k32], -1), jnp.concatenate([k32, q32], -1)

    def _attend_pbs(
        self, q: jax.Array, k: jax.Array, v: jax.Array, q_cols: jax.Array, k_cols: jax.Array, v_cols: jax.Array,
        x_cols: jax.Array, mask: jax.Array, stats: tuple[jax.Array, jax.Array, jax.Array] | None, index: jax.Array,
    ) -> jax.Array:
        """The cached attention with the PBS prefill (option prefill="pbs"): q, k [B, T', H, Dh] (k grouped),
        v [B, T', Hkv, Dh] of the chunk, the cache columns and decode mask of `_attend` -> out [B, T', H, Dh]."""
        q_t, k_t = self.pbs_query_key(q, k, stats)
        dense = lambda: self._attend(q, k, q_cols, k_cols, v_cols, x_cols, mask, stats)
        if not self.retrieve_inputs:
            out = self.pbs.cached(q_t, k_t, self._group(v).astype(jnp.float32), index, dense, scale=1.0)
            return out.astype(self.dtype)
        kept = self.pbs.mask(q_t, k_t, index, mask.shape[-1], scale=1.0)
        kept = mask if kept is None else mask & kept
        return self._attend(q, k, q_cols, k_cols, v_cols, x_cols, kept, stats)

    def _probabilities(
        self, q: jax.Array, k: jax.Array, q_cols: jax.Array, k_cols: jax.Array, mask: jax.Array,
        stats: tuple[jax.Array, jax.Array, jax.Array] | None, fp8_scales: jax.Array | None = None,
    ) -> tuple[jax.Array, Any, Any]:
        """(softmax(ℓ_α/√d_h) [B, H, T, S] float32, α, β) for rows q, k and columns q_cols, k_cols (the logits
        cast through E4M3 with per-head fp8_scales [H] unless None)."""
        alpha, beta = self.blend_coefficients(stats)
        c1, c2 = (1.0 + alpha) / 2.0, (1.0 - alpha) / 2.0
        if not isinstance(alpha, jax.Array) and abs(c2) < 1e-12:
            logits = circulation_logits(q, k, q_cols, k_cols, 1.0, 0.0)  # α = 1: the baseline (c₂ = 0)
        else:
            logits = circulation_logits(q, k, q_cols, k_cols, c1, c2)
        if fp8_scales is not None:
            logits = fp8_scaling.quantize_logits(logits, fp8_scales)
        return jax.nn.softmax(jnp.where(mask, logits, -jnp.inf), axis=-1), alpha, beta

    def _blended_patterns(
        self, q: jax.Array, k: jax.Array, q_cols: jax.Array, k_cols: jax.Array, x_cols: jax.Array,
        mask: jax.Array, stats: tuple[jax.Array, jax.Array, jax.Array] | None, fp8_scales: jax.Array | None = None,
    ) -> jax.Array:
        """H_new [B, T, H, C] float32: H_org + β(H_α − H_org) over the inputs x_cols [B, S, C], rescaled per
        token by clip(‖H_α‖/‖H_new‖) (before W_V)."""
        probs, _, beta = self._probabilities(q, k, q_cols, k_cols, mask, stats, fp8_scales)
        base = circulation_logits(q, k, q_cols, k_cols, 1.0, 0.0)
        if fp8_scales is not None:
            base = fp8_scaling.quantize_logits(base, fp8_scales)
        probs_org = jax.nn.softmax(jnp.where(mask, base, -jnp.inf), axis=-1)
        x32 = x_cols.astype(jnp.float32)
        h_alpha = jnp.einsum("bhts,bsc->bthc", probs, x32, precision=_HP)  # [B, T, H, C]
        h_org = jnp.einsum("bhts,bsc->bthc", probs_org, x32, precision=_HP)
        h_new = h_org + beta * (h_alpha - h_org)
        norm_alpha = jnp.maximum(jnp.linalg.norm(h_alpha, axis=-1, keepdims=True), 1e-6)
        norm_new = jnp.maximum(jnp.linalg.norm(h_new, axis=-1, keepdims=True), 1e-6)
        ratio = jnp.nan_to_num(jnp.clip(norm_alpha / norm_new, self.options.ratio_min, self.options.ratio_max))
        return h_new * ratio

    def retrieved_patterns(self, x: jax.Array, *, segment_ids: jax.Array | None = None) -> jax.Array:
        """x [B, T, D] -> the retrieved patterns H_new [B, T, H, D] float32 (after the blend and rescale,
        before W_V; H_α when β = 1), whatever path the forward takes. Diagnostics, O(T²)."""
        batch, length = x.shape[:2]
        q = projections.project_heads(x, self.q_proj, self.num_heads, self.head_dim)
        k = self._group(projections.project_heads(x, self.k_proj, self.num_kv_heads, self.head_dim))
        mask = self.mask(segment_ids, batch, length)
        stats = self._prefix_stats(x, mask[:, 0]) if self.options.adaptive else None
        return self._blended_patterns(q, k, q, k, x, mask, stats)

    def query_key_weights(self) -> tuple[jax.Array, jax.Array]:
        """(W_Q, W_K), each [H, Dh, D] float32 in the paper's layout (W_K of each query head's KV head).

        Our kernels are [D, H, Dh]; the paper's W_Q,h is [Dh, D], i.e. the transpose of kernel[:, h]."""
        w_q = self.q_proj.kernel[...].astype(jnp.float32).reshape(self.d_model, self.num_heads, self.head_dim)
        w_k = self.k_proj.kernel[...].astype(jnp.float32).reshape(self.d_model, self.num_kv_heads, self.head_dim)
        w_k = jnp.repeat(w_k, self.num_heads // self.num_kv_heads, axis=1)
        return w_q.transpose(1, 2, 0), w_k.transpose(1, 2, 0)

    def stability(self, x: jax.Array, *, scale_energy: bool = False) -> dict[str, jax.Array]:
        """The paper's stability measures of this layer on mixer inputs x [B, T, D] (one sequence per row):
        `circulation_stats.stability_measures` per row on (H_new, X, W_Q, W_K), its head-averaged summaries
        (energy_mean, energy_min, energy_p5, instability_mean, alignment_mean) and the head means of eta_m
        and symmetry_balance, each averaged over rows, as float32 scalars [] (jittable). Gradient-free."""
        x = jax.lax.stop_gradient(x)
        patterns = jnp.moveaxis(self.retrieved_patterns(x), 2, 1)  # [B, H, T, D]
        w_q, w_k = self.query_key_weights()
        per_row = jax.vmap(lambda p, xr: stability_measures(p, xr, w_q, w_k, scale_energy=scale_energy))(patterns, x)
        return {name: jnp.mean(per_row[name]) for name in STABILITY_SUMMARIES}

    def attention_weights(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array | None = None
    ) -> jax.Array:
        """x [B, T, D] -> softmax(ℓ_α/√d_h) [B, H, T, T] float32, the weights of H_α (0 where masked;
        diagnostics, O(T²)). With adaptive, α is the per-token α_eff of the forward."""
        batch, length = x.shape[:2]
        q = projections.project_heads(x, self.q_proj, self.num_heads, self.head_dim)
        k = self._group(projections.project_heads(x, self.k_proj, self.num_kv_heads, self.head_dim))
        mask = self.mask(segment_ids, batch, length)
        alpha, _ = self.blend_coefficients(self._prefix_stats(x, mask[:, 0]) if self.options.adaptive else None)
        logits = circulation_logits(q, k, q, k, (1.0 + alpha) / 2.0, (1.0 - alpha) / 2.0)
        return jax.nn.softmax(jnp.where(mask, logits, -jnp.inf), axis=-1)

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty cache (see the module docstring): k, q, v or x in dtype, prefix sums in float32, index.
        Raises ValueError in the non-causal mode, which cannot decode."""
        if not self.options.causal:
            raise ValueError(_NO_DECODE)
        kv_shape = (batch_size, max_len, self.num_kv_heads, self.head_dim)
        cache = {
            "k": jnp.zeros(kv_shape, dtype),
            "q": jnp.zeros((batch_size, max_len, self.num_heads, self.head_dim), dtype),
            "index": jnp.zeros((), jnp.int32),
        }
        if self.retrieve_inputs:
            cache["x"] = jnp.zeros((batch_size, max_len, self.d_model), dtype)
        else:
            cache["v"] = jnp.zeros(kv_shape, dtype)
        if self.options.adaptive:
            cache["sum_x"] = jnp.zeros((batch_size, self.d_model), jnp.float32)
            cache["sum_xx"] = jnp.zeros((batch_size, self.d_model, self.d_model), jnp.float32)
        return cache
