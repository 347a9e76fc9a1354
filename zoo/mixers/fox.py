"""FoX, the Forgetting Transformer's mixer: causal softmax attention with a per-head scalar forget gate.

Paper: Lin et al., "Forgetting Transformer: Softmax Attention with a Forget Gate" (ICLR 2025, arXiv 2503.02130),
read from the official code. Per head h and token t,

    log f_t = log σ(w_hᵀ x_t + b_h)      (float32; log-sigmoid, never the log of a sigmoid)
    o_i = Σ_{j≤i} softmax_j(q_i·k_j/√d + Σ_{l=j+1..i} log f_l) v_j

computed by `kernels.forgetting_attention`. Options (`cfg.mixer_options`):

  gate: "full" (default) data-dependent gate, Linear(D → H) with bias, weight N(0, 0.02), bias 0, so
      f ≈ 0.5 at init (a strongly local prior, as in the paper's code);
    "bias_only": a learned per-head bias, no data dependence, initialized from the decay schedule below;
    "fixed": the decay schedule itself, no parameters: log f_h = log σ(b_h) with b_h = −log(expm1(1/τ_h))
      so that −1/log f_h = τ_h, τ log-spaced over heads in [decay_time_min, decay_time_max]
      (defaults 2 and 1024 tokens: head 0 forgets within ~2 tokens, the last head over ~1024);
    "none": no gate (log_fgate=None): plain causal softmax attention through the same op.
  decay_time_min, decay_time_max (float, 2.0 and 1024.0): the τ range of "fixed" / "bias_only".
  rope (bool, False): RoPE on q and k with cfg.rope_theta. FoX uses no positional encoding by default.
  implementation (None | "reference" | "xla" | "pallas" | a sequence): the op's path; None = best for
    the backend.
  prefill ("dense" | "pbs", "dense"), pbs_tau (0.9), pbs_block (128), pbs_segment (256), pbs_max_blocks (None):
    as the attention mixer's: "pbs" runs PBS-Attn (`zoo.longctx.pbs`) on a multi-token chunk written into an
    empty decode cache, the gate term Λ_i − Λ_j passed to the block-sparse op as the separable pair
    (Λ_i, −Λ_j) (`fox_parts.forget_gate_bias`); decode steps and the training forward stay dense.
  Pro flags (FoX's "Pro" block), each a bool; pro=True turns all four on, an individually given flag overrides:
    qk_norm: per-head RMSNorm of q and k (scale [H, Dh]); token_shift: data-dependent shift of k and v,
    k̃_t = α_t·k_{t−1} + (1 − α_t)·k_t with α_t = σ(W_α x_t) one scalar per kv head (own W_α for v),
    never across a segment start; output_norm: per-head RMSNorm of the attention output; output_gate:
    o ← o ⊙ σ(W_g x) before o_proj.
  fp8_logits ("off" | "rank_aware" | "spectral" | "static", "off"),
    fp8_scale (1.0), fp8_headroom (0.8): as the attention
    mixer's (zoo/layers/fp8_scaling.py, docs/papers/fp8_rank_aware.md): when on, the training / scoring
    forward leaves the fused op for a materialized XLA path (`fp8_scaling.fp8_attention`, O(T²) memory,
    whatever `implementation` says) that casts s_h·q·k/√d to E4M3, divides by s_h and adds the gate sums in
    float32. "spectral": B̂_h = ρ²σ_max(W_Q,h W_K,hᵀ)/√d (‖W_Q,h‖₂‖W_K,h‖₂ with RoPE; the token shift mixes
    inputs convexly, so ρ, the call's largest token norm, still bounds it), or with qk_norm
    √d max|γ_q,h| max|γ_k,h|. Cached decoding keeps float32 logits.

Initialization: q/k/v/o follow the zoo's attention mixer (nnx.Linear defaults) so that FoX and the
baseline differ only in what FoX adds; the FoX-specific projections (gate, shift, output gate) use
FoX's N(0, 0.02).

Decode cache: k, v [B, S, Hkv, Dh] (compute dtype), the float32 log-gates [B, S, H] of every cached token
(not their prefix sums: the decode bias is a suffix sum over the cache, see kernels.forgetting_attention.decode),
the write index and, with token_shift, the last pre-shift k and v projections [B, Hkv, Dh].
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.kernels.forgetting_attention import (
    ForgettingAttentionState,
    forgetting_attention,
    forgetting_attention_step,
)
from icml26zoo.kernels.forgetting_attention.decode import cached_forgetting_attention
from icml26zoo.kernels.helpers import attention_mask, segment_sums
from icml26zoo.kernels.value_forget_attention.reference import attention_weights as softmax_weights
from icml26zoo.layers import fp8_scaling, projections
from icml26zoo.layers.norms import HeadRMSNorm
from icml26zoo.longctx import pbs
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_call
from icml26zoo.mixers.fox_parts import (
    decay_bias,
    forget_gate_bias,
    parse_options,
    token_shift,
)
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer

_SMALL_INIT = nnx.initializers.normal(0.02)  # FoX's init for its own projections


@register_mixer("fox")
class ForgettingAttention(nnx.Module):
    """FoX mixer: x [B, T, D] -> y [B, T, D] (see the module docstring for the options)."""

    CONFORMANCE_OPTIONS = (
        (),
        (("gate", "bias_only"),),
        (("gate", "fixed"), ("rope", True)),
        (("gate", "none"),),
        (("pro", True),),
    )

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = parse_options(cfg)
        self.num_heads, self.num_kv_heads = cfg.num_heads, cfg.num_kv_heads
        self.head_dim = cfg.resolved_head_dim
        self.d_model = cfg.d_model
        self.rope_theta = cfg.rope_theta
        self.dtype = jnp.dtype(cfg.compute_dtype)
        opts, width, kv_width = self.options, cfg.num_heads * self.head_dim, cfg.num_kv_heads * self.head_dim

        linear = functools.partial(projections.linear, dtype=self.dtype, rngs=rngs)

        def gate_linear(n_out: int, use_bias: bool = False) -> nnx.Linear:
            # Gates are computed in float32 (as in FoX's code), with full-precision matmuls on every backend.
            return linear(
                cfg.d_model, n_out, use_bias=use_bias, dtype=jnp.float32, precision=jax.lax.Precision.HIGHEST,
                kernel_init=_SMALL_INIT, bias_init=nnx.initializers.zeros_init(),
            )

        self.q_proj, self.o_proj = linear(cfg.d_model, width), linear(width, cfg.d_model)
        self.k_proj, self.v_proj = linear(cfg.d_model, kv_width), linear(cfg.d_model, kv_width)
        self.fgate_proj = gate_linear(cfg.num_heads, use_bias=True) if opts.gate == "full" else None
        initial_bias = jnp.asarray(decay_bias(cfg.num_heads, opts.decay_time_min, opts.decay_time_max))
        self.fgate_bias = nnx.Param(initial_bias) if opts.gate == "bias_only" else None
        self.q_norm = HeadRMSNorm(cfg.num_heads, self.head_dim, eps=cfg.norm_eps) if opts.qk_norm else None
        self.k_norm = HeadRMSNorm(cfg.num_kv_heads, self.head_dim, eps=cfg.norm_eps) if opts.qk_norm else None
        self.k_shift = gate_linear(cfg.num_kv_heads) if opts.token_shift else None
        self.v_shift = gate_linear(cfg.num_kv_heads) if opts.token_shift else None
        self.out_norm = HeadRMSNorm(cfg.num_heads, self.head_dim, eps=cfg.norm_eps) if opts.output_norm else None
        self.out_gate = gate_linear(width) if opts.output_gate else None
        self.fp8 = fp8_scaling.FP8Logits.from_options("fox mixer", opts)
        self.pbs = pbs.PBSPrefill.from_options("fox mixer", opts)

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions, cache: MixerCache = None
    ) -> MixerOutput:
        """x: [B, T, D], segment_ids/positions: [B, T] -> (y [B, T, D], updated cache or None)."""
        check_call(self, x, segment_ids, positions, cache, length_of=("k", 1))
        q, k, v, shift_state = self._project_qkv(x, segment_ids, positions, cache)
        log_fgate = self.log_forget_gate(x)
        if cache is None and self.fp8.enabled:
            bias = None if log_fgate is None else segment_sums(jnp.transpose(log_fgate, (0, 2, 1)))
            mask = attention_mask(x.shape[1], segment_ids)
            out, new_cache = fp8_scaling.fp8_attention(q, k, v, mask, self.fp8_scales(x), bias), None
        elif cache is None:
            out = forgetting_attention(
                q, k, v, log_fgate, segment_ids=segment_ids, implementation=self.options.implementation
            )
            new_cache = None
        else:
            out, new_cache = self._attend_cached(q, k, v, log_fgate, cache)
            new_cache.update({name: value.astype(cache[name].dtype) for name, value in shift_state.items()})
        return self._output(out, x), new_cache

    def fp8_scales(self, x: jax.Array) -> jax.Array:
        """Per-head FP8 scales s [H] float32 of q·k/√d for mixer input x [B, T, D] (option fp8_logits)."""
        return fp8_scaling.projection_scales(self.fp8, x, q_proj=self.q_proj, k_proj=self.k_proj, q_norm=self.q_norm,
                                             k_norm=self.k_norm, heads=self.num_heads, kv_heads=self.num_kv_heads,
                                             head_dim=self.head_dim, rotary=self.options.rope)

    def log_forget_gate(self, x: jax.Array) -> jax.Array | None:
        """x: [B, T, D] -> log f [B, T, H] float32 (≤ 0, finite for finite pre-activations), or None.

        `jax.nn.log_sigmoid` is −softplus(−z): exact 0 for z ≫ 0 and ≈ z (not −inf) for z ≪ 0, where
        log(σ(z)) would underflow to log 0.
        """
        gate = self.options.gate
        if gate == "none":
            return None
        if gate == "full":
            return jax.nn.log_sigmoid(self.fgate_proj(x.astype(jnp.float32)))
        if gate == "bias_only":
            bias = self.fgate_bias[...]
        else:  # "fixed": a constant of the options, no parameter
            bias = jnp.asarray(decay_bias(self.num_heads, self.options.decay_time_min, self.options.decay_time_max))
        return jnp.broadcast_to(jax.nn.log_sigmoid(bias), (*x.shape[:2], self.num_heads))

    def _project_qkv(
        self, x: jax.Array, segment_ids: jax.Array | None, positions: jax.Array, cache: dict | None
    ) -> tuple[jax.Array, jax.Array, jax.Array, dict[str, jax.Array]]:
        """x: [B, T, D] -> q [B, T, H, Dh], k and v [B, T, Hkv, Dh], and the new token-shift cache entries.

        Order (as in the paper's code): projections, token shift, QK-norm, RoPE.
        """
        q, k, v = projections.project_qkv(
            x, self.q_proj, self.k_proj, self.v_proj, self.num_heads, self.num_kv_heads, self.head_dim
        )
        shift_state: dict[str, jax.Array] = {}
        if self.options.token_shift:
            x32 = x.astype(jnp.float32)
            k_prev, v_prev = (None, None) if cache is None else (cache["k_prev"], cache["v_prev"])
            shift_state = {"k_prev": k[:, -1], "v_prev": v[:, -1]}  # before the shift, as FoX's cache
            k = token_shift(k, jax.nn.sigmoid(self.k_shift(x32)), segment_ids=segment_ids, previous=k_prev)
            v = token_shift(v, jax.nn.sigmoid(self.v_shift(x32)), segment_ids=segment_ids, previous=v_prev)
        if self.options.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.options.rope:
            q, k = projections.rope_qk(q, k, positions, self.rope_theta)
        return q, k, v, shift_state

    def _output(self, out: jax.Array, x: jax.Array) -> jax.Array:
        """Attention output [B, T, H, Dh] -> optional per-head norm and sigmoid gate -> o_proj -> [B, T, D]."""
        batch, length = out.shape[:2]
        if self.out_norm is not None:
            out = self.out_norm(out)
        out = out.reshape(batch, length, self.num_heads * self.head_dim)
        if self.out_gate is not None:
            gate = jax.nn.sigmoid(self.out_gate(x.astype(jnp.float32)))
            out = (out.astype(jnp.float32) * gate).astype(out.dtype)
        return self.o_proj(out)

    def _attend_cached(
        self, q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None, cache: dict[str, jax.Array]
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Writes k, v [B, T', Hkv, Dh] and log f [B, T', H] at the cache index; attends q to slots ≤ its own."""
        state = ForgettingAttentionState(cache["k"], cache["v"], cache.get("log_fgate"), cache["index"])
        if self.pbs.enabled:
            out, state = self._attend_cached_pbs(q, k, v, log_fgate, state)
        else:
            out, state = forgetting_attention_step(q, k, v, log_fgate, state=state)
        new_cache = {"k": state.k, "v": state.v, "index": state.index}
        if state.log_fgate is not None:
            new_cache["log_fgate"] = state.log_fgate
        return out.astype(self.dtype), new_cache

    def _attend_cached_pbs(
        self, q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None, state: ForgettingAttentionState
    ) -> tuple[jax.Array, ForgettingAttentionState]:
        """The cache write of `forgetting_attention_step`, then PBS-Attn for a chunk written into an empty cache
        (`pbs.PBSPrefill.cached`) or the step's dense attention: (out [B, T', H, Dh], the new state)."""
        zero = jnp.zeros((), jnp.int32)

        def write(buffer: jax.Array, new: jax.Array) -> jax.Array:
            start = (zero, state.index) + (zero,) * (buffer.ndim - 2)
            return jax.lax.dynamic_update_slice(buffer, new.astype(buffer.dtype), start)

        keys, values = write(state.k, k), write(state.v, v)
        log_gates = None if log_fgate is None else write(state.log_fgate, log_fgate)
        dense = lambda: cached_forgetting_attention(q, keys, values, log_gates, state.index)
        query_bias, key_bias = forget_gate_bias(log_fgate)
        out = self.pbs.cached(q.astype(keys.dtype), k.astype(keys.dtype), v.astype(values.dtype), state.index,
                              dense, query_bias=query_bias, key_bias=key_bias)
        index = state.index + jnp.asarray(q.shape[1], jnp.int32)
        return out, ForgettingAttentionState(keys, values, log_gates, index)

    def _cache_shapes(self, batch_size: int, max_len: int) -> dict[str, tuple[int, ...]]:
        """Shape of every cache entry but the index: the single source for init_cache and its check."""
        kv = (batch_size, max_len, self.num_kv_heads, self.head_dim)
        shapes = {"k": kv, "v": kv}
        if self.options.gate != "none":
            shapes["log_fgate"] = (batch_size, max_len, self.num_heads)
        if self.options.token_shift:
            shapes["k_prev"] = shapes["v_prev"] = (batch_size, self.num_kv_heads, self.head_dim)
        return shapes

    def attention_weights(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array
    ) -> jax.Array:
        """x [B, T, D] -> the forward's probabilities [B, H, T, T] float32 (0 where masked; diagnostics, O(T²)):
        softmax over j ≤ i of q_i·k_j/√d + Σ_{l=j+1..i} log f_l."""
        q, k, _, _ = self._project_qkv(x, segment_ids, positions, None)
        return softmax_weights(
            q, k, self.log_forget_gate(x), scale=self.head_dim**-0.5, segment_ids=segment_ids
        )

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty cache: k, v [B, max_len, Hkv, Dh] in dtype, log_fgate [B, max_len, H] float32 (unless
        gate="none"), k_prev/v_prev [B, Hkv, Dh] in dtype (token_shift; zeros = no previous token) and a
        write index (int32 scalar). Reads no parameters."""
        cache = {
            name: jnp.zeros(shape, jnp.float32 if name == "log_fgate" else dtype)
            for name, shape in self._cache_shapes(batch_size, max_len).items()
        }
        cache["index"] = jnp.zeros((), jnp.int32)
        return cache
