"""FiX, the Fine-grained Forgetting Transformer's mixer: softmax attention with per-channel value forget gates.

FiX is a RECONSTRUCTION from the abstract of "FiX: Introducing Fine-grained Forget Gate into Softmax
Attention" (ICML 2026; docs/papers.md); the authors' code and full text were not available, so the gate
parameterization, its init, the scalar gate and the output gate are the zoo's reconstruction, exposed as
options. Per query head and token i (value channel c):

    P_ij = softmax_{j≤i}(q_i·k_j/√d [+ Σ_{l=j+1..i} log f^s_l])       (optional FoX scalar gate f^s)
    u_i  = Σ_{j≤i} P_ij · exp(Σ_{l=j+1..i} log f_l) ⊙ v_j              (f_l ∈ (0,1)^{Dv}, per channel)
    o_i  = o_proj(RMSNorm_fp32(u_i) ⊙ γ [⊙ σ(W_g x_i)])

computed by `kernels.value_forget_attention`. The per-head output RMSNorm (float32, eps 1e-6, learned
scale γ [H, Dv]) is mandatory: it is what makes a shared softmax denominator enough (the abstract's point). It also
means that gates equal across a head's channels give FoX with its output norm, up to the norm's ε: the op's
u is then FoX's output times a positive per-row scalar (docs/numerics.md: FiX is not FoX before the norm).

Options (`cfg.mixer_options`):
  vgate: "low_rank" (default) f = σ(W_up W_down x + b), W_down D → r, W_up r → H·Dv, both N(0, 0.02), the
      bias so that σ(b) spans [0.9, 0.999] (decay times 10..1000 tokens) over each head's channels;
    "mamba": log f = −exp(A_h)·softplus(W_up W_down x + dt_bias), A_h = 1 at init, dt = softplus(dt_bias)
      log-spaced over [1e-3, 1e-1]. The same low-rank projection as "low_rank" (as KDA does).
  vgate_rank (int, 16): r.
  vgate_min (None | negative float, None): lower bound of log f (KDA-style safe gate, e.g. −5), applied as
      the smooth saturation m·expm1(log f / m), m = −vgate_min.
  scalar_gate (bool, True): the FoX scalar gate in the logits, Linear(D → H) with bias, weight N(0, 0.02),
      bias 0 (FoX's init). Unknown whether FiX keeps it.
  rope (bool, False): RoPE on q and k with cfg.rope_theta.
  output_gate (bool, True): o ← RMSNorm(u) ⊙ σ(W_g x) (FoX-Pro style), W_g D → H·Dv, no bias.
  implementation (None | "reference" | "xla" | "pallas" | a sequence): the op's path.
  cache ("decayed" | "pruned", "decayed"): the decode cache, see below.
  prune_eps (float, 1e-6), cache_capacity (None | int, None = max_len): the pruned cache's threshold and
      slots; giving either with another cache raises.
  fp8_logits ("off" | "rank_aware" | "spectral" | "static", "off"),
      fp8_scale (1.0), fp8_headroom (0.8): as the attention
      mixer's (zoo/layers/fp8_scaling.py, docs/papers/fp8_rank_aware.md): when on, the training / scoring
      forward leaves the op for its materialized XLA form (O(T²·Dv) memory, whatever `implementation` says):
      P from s_h·q·k/√d cast to E4M3 and divided by s_h, the scalar gate sums added in float32, then the
      per-channel decays of kernels/value_forget_attention/reference.py. "spectral": B̂_h =
      ρ²σ_max(W_Q,h W_K,hᵀ)/√d (‖W_Q,h‖₂‖W_K,h‖₂ with RoPE), ρ the call's largest token norm. Cached
      decoding keeps float32 logits.

  prefill ("dense" | "pbs", "dense"), pbs_tau (0.9), pbs_block (128), pbs_segment (256), pbs_max_blocks (None):
      as the attention mixer's: "pbs" restricts the softmax of a multi-token chunk written into an empty
      decode cache to PBS-Attn's selected tokens (`zoo.longctx.pbs`; blocks chosen on q·k/√d plus the scalar
      gate term, the value decays act after P). A CORRECTNESS PATH, not a fast one: the per-channel decay
      exp(Λ_i − Λ_j)[c] factors as exp(Λ_i)·exp(−Λ_j) only through factors that overflow float32
      (exp(−Λ_j) grows like e^{T/τ}), so the block-sparse op cannot carry it; the chunk's P and decays are
      materialized (O(T²·Dv), as the fp8 path). The written cache is the dense prefill's; decode stays dense.

Decode cache: keys [B, S, Hkv, D] in the compute dtype and the decayed values
ṽ_j = exp(Λ_t − Λ_j) ⊙ v_j per QUERY head in float32, multiplied by the new gates at every step (no Λ is
stored), with the scalar gate's suffix sums kept the same way; "pruned" additionally frees a slot once
every channel of it has decayed below prune_eps and reuses it, so cache_capacity may be < the length
(a longer prefill is appended in pieces of at most cache_capacity tokens).
The cache layout and update are the op's (kernels/value_forget_attention/decode.py).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.kernels.helpers import attention_mask, segment_sums
from icml26zoo.kernels.value_forget_attention import (
    ValueForgetAttentionState,
    init_value_forget_attention_state,
    value_forget_attention,
    value_forget_attention_step,
)
from icml26zoo.kernels.value_forget_attention.reference import attention_weights as softmax_weights
from icml26zoo.kernels.value_forget_attention.reference import value_decays
from icml26zoo.layers import fp8_scaling, projections
from icml26zoo.layers.norms import HeadRMSNorm
from icml26zoo.longctx import pbs
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_mixer_inputs
from icml26zoo.mixers.fix_parts import bound_log_gate, low_rank_gate_bias, mamba_dt_bias, parse_options
from icml26zoo.mixers.fox_parts import forget_gate_bias
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer

_SMALL_INIT = nnx.initializers.normal(0.02)  # FoX's init for gate projections (FoX's code)
_OUTPUT_NORM_EPS = 1e-6  # a small ε, or strongly decayed outputs collapse towards 0


def _prefix_decays(log_vgate: jax.Array, keep: jax.Array) -> jax.Array:
    """exp(Λ_i − Λ_j) per channel where `keep` [B, H, T, T] holds, else 0: [B, H, Dv, T, T] float32.

    log_vgate [B, T, H, Dv]. Λ is one float32 prefix sum, so each exponent carries the rounding of |Λ|
    (about 6e-8·|Λ_T|), where `value_decays` sums each span on its own; that form took 47 s for one
    T = 1024 prefill (H 4, Dv 32) on the zoo's CPU sandbox, this one 5 s (docs/papers/pbs_attn.md).
    """
    lam = jnp.transpose(jnp.cumsum(log_vgate.astype(jnp.float32), axis=1), (0, 2, 3, 1))  # [B, H, Dv, T]
    exponent = jnp.minimum(lam[..., :, None] - lam[..., None, :], 0.0)
    return jnp.where(keep[:, :, None], jnp.exp(exponent), 0.0)


@register_mixer("fix")
class FineGrainedForgettingAttention(nnx.Module):
    """FiX mixer: x [B, T, D] -> y [B, T, D] (see the module docstring for the options)."""

    CONFORMANCE_OPTIONS = (
        (),
        (("vgate", "mamba"), ("vgate_min", -5.0), ("scalar_gate", False), ("rope", True)),
        (("cache", "pruned"), ("output_gate", False)),
    )

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        opts = self.options = parse_options(cfg)
        self.num_heads, self.num_kv_heads = cfg.num_heads, cfg.num_kv_heads
        self.head_dim, self.d_model = cfg.resolved_head_dim, cfg.d_model
        self.rope_theta = cfg.rope_theta
        self.dtype = jnp.dtype(cfg.compute_dtype)
        width, kv_width = cfg.num_heads * self.head_dim, cfg.num_kv_heads * self.head_dim

        linear = functools.partial(projections.linear, dtype=self.dtype, rngs=rngs)

        def gate_linear(n_in: int, n_out: int, bias: Any = None) -> nnx.Linear:
            # Gates in float32 with full-precision matmuls on every backend (docs/numerics.md, rule 6).
            def bias_init(key: Any, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
                return jnp.broadcast_to(jnp.asarray(bias, dtype), shape)

            return linear(
                n_in, n_out, use_bias=bias is not None, dtype=jnp.float32, precision=jax.lax.Precision.HIGHEST,
                kernel_init=_SMALL_INIT, bias_init=bias_init,
            )

        self.q_proj, self.o_proj = linear(cfg.d_model, width), linear(width, cfg.d_model)
        self.k_proj, self.v_proj = linear(cfg.d_model, kv_width), linear(cfg.d_model, kv_width)
        low_rank = opts.vgate == "low_rank"
        bias = low_rank_gate_bias if low_rank else mamba_dt_bias
        self.vgate_down = gate_linear(cfg.d_model, opts.vgate_rank)
        self.vgate_up = gate_linear(opts.vgate_rank, width, bias=bias(cfg.num_heads, self.head_dim))
        # A = exp(A_log) per head, 1 at init so that log f = −dt (Mamba's dt range sets the decay times).
        self.vgate_a_log = None if low_rank else nnx.Param(jnp.zeros((cfg.num_heads,), jnp.float32))
        self.fgate_proj = gate_linear(cfg.d_model, cfg.num_heads, bias=0.0) if opts.scalar_gate else None
        self.out_norm = HeadRMSNorm(cfg.num_heads, self.head_dim, eps=_OUTPUT_NORM_EPS)
        self.out_gate = gate_linear(cfg.d_model, width) if opts.output_gate else None
        self.fp8 = fp8_scaling.FP8Logits.from_options("fix mixer", opts)
        self.pbs = pbs.PBSPrefill.from_options("fix mixer", opts)

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions, cache: MixerCache = None
    ) -> MixerOutput:
        """x: [B, T, D], segment_ids/positions: [B, T] -> (y [B, T, D], updated cache or None)."""
        check_mixer_inputs(x, segment_ids, positions, self.d_model, cache)
        q, k, v = self._project_qkv(x, positions)
        log_vgate, log_fgate = self.log_value_gate(x), self.log_scalar_gate(x)
        if cache is None and self.fp8.enabled:
            u, new_cache = self._attend_fp8(x, q, k, v, log_vgate, log_fgate, segment_ids), None
        elif cache is None:
            u = value_forget_attention(
                q, k, v, log_vgate, log_fgate=log_fgate, segment_ids=segment_ids,
                implementation=self.options.implementation,
            )
            new_cache = None
        else:
            u, new_cache = self._attend_cached(q, k, v, log_vgate, log_fgate, cache)
        return self._output(u, x), new_cache

    def fp8_scales(self, x: jax.Array) -> jax.Array:
        """Per-head FP8 scales s [H] float32 of q·k/√d for mixer input x [B, T, D] (option fp8_logits)."""
        def bound() -> jax.Array:
            return fp8_scaling.weight_bound(self.q_proj.kernel[...], self.k_proj.kernel[...], self.num_heads,
                                            self.num_kv_heads, x, rotary=self.options.rope,
                                            logit_scale=self.head_dim**-0.5, mode=self.fp8.mode)

        return self.fp8.scales(self.num_heads, bound)

    def _attend_fp8(
        self, x: jax.Array, q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array,
        log_fgate: jax.Array | None, segment_ids: jax.Array | None,
    ) -> jax.Array:
        """The op's materialized form with E4M3 logits: u [B, T, H, Dv] = Σ_j P_ij D_ij ⊙ v_j in v's dtype."""
        mask = attention_mask(x.shape[1], segment_ids)
        bias = None if log_fgate is None else segment_sums(jnp.transpose(log_fgate, (0, 2, 1)))
        probs = fp8_scaling.fp8_attention_weights(q, k, mask, self.fp8_scales(x), bias=bias)
        values = jnp.repeat(v.astype(jnp.float32), self.num_heads // self.num_kv_heads, axis=2)
        u = jnp.einsum("bhij,bhcij,bjhc->bihc", probs, value_decays(log_vgate, segment_ids), values,
                       precision=fp8_scaling.HIGHEST)
        return u.astype(v.dtype)

    def log_value_gate(self, x: jax.Array) -> jax.Array:
        """x: [B, T, D] -> log f [B, T, H, Dv] float32, in [vgate_min, 0] (≤ 0 without a bound).

        log-sigmoid and softplus are evaluated in their stable forms (never the log of a sigmoid).
        """
        batch, length = x.shape[:2]
        z = self.vgate_up(self.vgate_down(x.astype(jnp.float32))).reshape(
            batch, length, self.num_heads, self.head_dim
        )
        if self.vgate_a_log is None:
            log_gate = jax.nn.log_sigmoid(z)
        else:
            log_gate = -jnp.exp(self.vgate_a_log[...])[:, None] * jax.nn.softplus(z)
        return bound_log_gate(log_gate, self.options.vgate_min)

    def log_scalar_gate(self, x: jax.Array) -> jax.Array | None:
        """x: [B, T, D] -> the FoX scalar log gate [B, T, H] float32 (≤ 0), or None when scalar_gate is off."""
        if self.fgate_proj is None:
            return None
        return jax.nn.log_sigmoid(self.fgate_proj(x.astype(jnp.float32)))

    def _project_qkv(self, x: jax.Array, positions: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """x: [B, T, D] -> q [B, T, H, Dh], k and v [B, T, Hkv, Dh] in the compute dtype (RoPE on q, k)."""
        q, k, v = projections.project_qkv(
            x, self.q_proj, self.k_proj, self.v_proj, self.num_heads, self.num_kv_heads, self.head_dim
        )
        if self.options.rope:
            q, k = projections.rope_qk(q, k, positions, self.rope_theta)
        return q, k, v

    def _output(self, u: jax.Array, x: jax.Array) -> jax.Array:
        """u [B, T, H, Dv] -> fp32 RMSNorm per head (mandatory), optional σ(W_g x) gate, o_proj -> [B, T, D]."""
        batch, length = u.shape[:2]
        out = self.out_norm(u.astype(jnp.float32)).reshape(batch, length, self.num_heads * self.head_dim)
        if self.out_gate is not None:
            out = out * jax.nn.sigmoid(self.out_gate(x.astype(jnp.float32)))
        return self.o_proj(out.astype(self.dtype))

    def _attend_cached(
        self, q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array, log_fgate: jax.Array | None,
        cache: dict[str, jax.Array],
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Appends T' ≥ 1 tokens to the op's decode cache and attends their queries: u [B, T', H, Dv]."""
        prune_eps = self.options.prune_eps if self.options.cache == "pruned" else None
        state = ValueForgetAttentionState(**cache)
        step = lambda: value_forget_attention_step(q, k, v, log_vgate, log_fgate, state=state, prune_eps=prune_eps)
        u, new_state = step()
        if self.pbs.enabled and q.shape[1] > 1:
            # The step's output is unused on this path; the branch recomputes it only for a non-empty cache.
            empty = jnp.all(state.length == 0)
            u = jax.lax.cond(empty, lambda: self._pbs_prefill(q, k, v, log_vgate, log_fgate),
                             lambda: step()[0])
        return u, new_state._asdict()

    def _pbs_prefill(self, q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array,
                     log_fgate: jax.Array | None) -> jax.Array:
        """u [B, T, H, Dv] (v.dtype) of a chunk into an empty cache with the softmax restricted to PBS-Attn's
        tokens: q [B, T, H, D], k [B, T, Hkv, D], v [B, T, Hkv, Dv], log_vgate [B, T, H, Dv], log_fgate
        [B, T, H] or None. Materialized (see the module docstring)."""
        scale, groups = self.head_dim**-0.5, self.num_heads // self.num_kv_heads
        _, key_bias = forget_gate_bias(log_fgate)
        plan = pbs.select_blocks(q, k, options=self.pbs.options, scale=scale, key_bias=key_bias)
        keep = pbs.original_token_mask(plan, q.shape[1], self.pbs.options.block_size)  # causal on positions
        keys = jnp.repeat(k.astype(jnp.float32), groups, axis=2)
        logits = jnp.einsum("bthd,bshd->bhts", q.astype(jnp.float32), keys, precision=fp8_scaling.HIGHEST) * scale
        if log_fgate is not None:
            logits = logits + segment_sums(jnp.transpose(log_fgate.astype(jnp.float32), (0, 2, 1)))
        probs = jax.nn.softmax(jnp.where(keep, logits, -jnp.inf), axis=-1)
        values = jnp.repeat(v.astype(jnp.float32), groups, axis=2)
        u = jnp.einsum("bhij,bhcij,bjhc->bihc", probs, _prefix_decays(log_vgate, keep), values,
                       precision=fp8_scaling.HIGHEST)
        return u.astype(v.dtype)

    def attention_weights(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array
    ) -> jax.Array:
        """x [B, T, D] -> P [B, H, T, T] float32 of the module docstring (0 where masked; diagnostics, O(T²)).

        The value gates act after P (on the values), so P is what the queries' softmax puts on each key.
        """
        q, k, _ = self._project_qkv(x, positions)
        return softmax_weights(
            q, k, self.log_scalar_gate(x), scale=self.head_dim**-0.5, segment_ids=segment_ids
        )

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty decode cache (the op's, see the module docstring): cache_capacity slots with cache="pruned"
        when given, else max_len. Keys in dtype, decayed values and gate sums in float32. Reads no parameters."""
        capacity = self.options.cache_capacity or max_len
        state = init_value_forget_attention_state(
            batch_size, capacity, self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim, dtype
        )
        return state._asdict()
