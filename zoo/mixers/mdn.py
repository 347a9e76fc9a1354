"""Momentum DeltaNet (MDN) mixer: the stepwise momentum delta rule, wired as in the authors' code.

Paper: Huang et al., "MDN: Parallelizing Stepwise Momentum for Delta Linear Attention" (ICML 2026,
arXiv 2605.05838).
Per value head h, two states S, M ∈ R^{d_k × d_v}:

    e_t = S_{t−1}ᵀ p_t − v_t,   M_t = μ_t M_{t−1} + η_t k̂_t e_tᵀ,   S_t = α_t S_{t−1} − β_t M_t,
    o_t = S_tᵀ q̂_t / √d_k,      p_t = α_t k̂_t (the decayed key predicts, "use_p_times_alpha")

computed by `kernels.momentum_delta_rule.momentum_delta_rule` (chunked; training and prefill) and
`momentum_delta_rule_step` (single-token decode). Wiring: x → q/k/v projections → short causal depthwise
conv + SiLU → output correction q ← q − exp(D_log)·k on the raw post-conv q, k → q, k L2-normalized per
head in fp32 → op → per-head RMSNorm × sigmoid(g_proj(x)) → o_proj.

Gates, all float32 with full-precision matmuls, per value head and token:
  log α_raw = −exp(A_log) · softplus(W_a x + dt_bias)
  log μ     = max(−exp(Mu_log) · softplus(W_m x + mu_bias), min_log_mu)
  η         = 1 + tanh(W_e x / τ),  τ = √(d_model / tau_factor)          ∈ [0, 2]
  θ         = arctan(η · exp(log_factor));  β = sin²θ · sigmoid(W_b x);  log α = log cos²θ + log α_raw
so α ≤ cos²θ and β ≤ sin²θ (α_max + β_max = 1): a larger effective step ηc forces a smaller retention.

Heads as in zoo/mixers/delta_net.py: q, k (and D_log) have cfg.num_kv_heads heads, repeated to the
cfg.num_heads value heads after normalization; v, gates, states and output have num_heads heads.
d_k = head_dim, d_v = expand_v · head_dim.

Options (`cfg.mixer_options`): conv_size (int ≥ 2, 4), chunk_size (one of CHUNK_SIZES, 64),
implementation (None | "reference" | "xla" | sequence; None), expand_v (int ≥ 1, 1), min_log_mu (finite
float < 0, −2.0: the 400M setting; −1.0 at 1B), tau_factor (float > 0, 1.0; 8.0 at 1B).

Decode cache: S and M [B, H, d_k, d_v] float32 and the three conv states [B, conv_size−1, C] in the
compute dtype; its size is independent of max_len.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.kernels.momentum_delta_rule import CHUNK_SIZES, momentum_delta_rule, momentum_delta_rule_step
from icml26zoo.layers import projections
from icml26zoo.layers.norms import GatedRMSNorm, gated_norm_output
from icml26zoo.layers.options import check_choice, check_implementation
from icml26zoo.layers.short_conv import ShortConv
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_call, read_mixer_options
from icml26zoo.mixers.delta_parts import (
    IMPLEMENTATIONS,
    SMALL_INIT,
    init_a_log,
    init_dt_bias,
    l2_normalize,
)
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer

NAME = "mdn"


@dataclasses.dataclass(frozen=True)
class MDNOptions:
    """The MDN mixer's `cfg.mixer_options`, validated by `parse_mdn_options` (see the module docstring)."""

    conv_size: int = 4
    chunk_size: int = 64
    implementation: str | tuple[str, ...] | None = None
    expand_v: int = 1
    min_log_mu: float = -2.0
    tau_factor: float = 1.0


def parse_mdn_options(cfg: ModelConfig) -> MDNOptions:
    """Validated MDN options; ValueError names any unknown, ill-typed or out-of-range option."""
    values = read_mixer_options(cfg, NAME, MDNOptions)
    checks = {
        "conv_size": (lambda v: v >= 2, "an integer >= 2"),
        "expand_v": (lambda v: v >= 1, "an integer >= 1"),
        # log μ must stay finite (the op rejects −inf) and strictly negative so that μ < 1.
        "min_log_mu": (lambda v: math.isfinite(v) and v < 0, "a finite number < 0"),
        "tau_factor": (lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
    }
    for name, (ok, text) in checks.items():
        if not ok(values[name]):
            raise ValueError(f"{NAME} mixer option {name!r} must be {text}, got {values[name]!r}")
    check_choice(f"{NAME} mixer", "chunk_size", values["chunk_size"], CHUNK_SIZES)
    check_implementation(f"{NAME} mixer", values["implementation"], IMPLEMENTATIONS)
    return MDNOptions(**values)


def constrained_gates(
    log_alpha_raw: jax.Array, beta_raw: jax.Array, eta: jax.Array, log_factor: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The gate constraint of the authors' code. All [B, T, H] float32 (log_factor [H]) -> (log α, β) [B, T, H].

    θ = arctan(η c) with c = exp(log_factor): cos²θ = 1/(1 + (ηc)²) and sin²θ = (ηc)²/(1 + (ηc)²) are the
    same numbers written without trig, so log cos²θ = −log1p((ηc)²) stays finite and accurate for any ηc
    (cos θ → 0 would make log cos θ lose precision, the rational form does not).
    """
    x2 = jnp.square(eta * jnp.exp(log_factor))
    sin2 = x2 / (1.0 + x2)
    return log_alpha_raw - jnp.log1p(x2), sin2 * beta_raw


@register_mixer(NAME)
class MomentumDeltaNet(nnx.Module):
    """Momentum DeltaNet (Huang et al., ICML 2026). x [B, T, D] -> y [B, T, D]."""

    # One variant: the harness compiles the chunked op's gradient many times and CI time is shared. The
    # options are covered in tests/zoo/test_mdn.py (float64 layer reference with expand_v, bad options).
    CONFORMANCE_OPTIONS = ((),)

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = opts = parse_mdn_options(cfg)
        self.num_heads, self.num_key_heads = cfg.num_heads, cfg.num_kv_heads
        self.head_dim, self.d_model = cfg.resolved_head_dim, cfg.d_model
        self.value_dim = opts.expand_v * self.head_dim
        self.dtype = jnp.dtype(cfg.compute_dtype)
        self.tau = math.sqrt(cfg.d_model / opts.tau_factor)
        d, h = cfg.d_model, self.num_heads
        key_width, value_width = self.num_key_heads * self.head_dim, h * self.value_dim
        self.q_proj, self.k_proj = self._linear(d, key_width, rngs), self._linear(d, key_width, rngs)
        self.v_proj = self._linear(d, value_width, rngs)
        self.q_conv = ShortConv(key_width, opts.conv_size, rngs=rngs)
        self.k_conv = ShortConv(key_width, opts.conv_size, rngs=rngs)
        self.v_conv = ShortConv(value_width, opts.conv_size, rngs=rngs)
        self.a_proj, self.b_proj = self._gate_linear(d, h, rngs), self._gate_linear(d, h, rngs)
        self.m_proj, self.e_proj = self._gate_linear(d, h, rngs), self._gate_linear(d, h, rngs)
        self.A_log = nnx.Param(init_a_log(rngs.params(), (h,), 0.0, 16.0))
        self.Mu_log = nnx.Param(init_a_log(rngs.params(), (h,), 0.0, 16.0))
        dt_bias = init_dt_bias(rngs.params(), (h,))
        # The model init copies the same values into both biases (as the authors' code does).
        self.dt_bias, self.mu_bias = nnx.Param(dt_bias), nnx.Param(dt_bias)
        self.log_factor = nnx.Param(init_a_log(rngs.params(), (h,), 0.0, 4.0))  # log U(0, 4)
        self.D_log = nnx.Param(init_a_log(rngs.params(), (self.num_key_heads,), 0.0, 1.0))  # log U(0, 1)
        self.g_proj = self._linear(d, value_width, rngs)
        self.o_norm = GatedRMSNorm(self.value_dim, eps=cfg.norm_eps, activation="sigmoid")
        self.o_proj = self._linear(value_width, d, rngs)

    def _linear(self, n_in: int, n_out: int, rngs: nnx.Rngs, **kwargs: Any) -> nnx.Linear:
        """A projection in the compute dtype, N(0, 0.02) (the authors' init), no bias."""
        kwargs = {"dtype": self.dtype, "kernel_init": SMALL_INIT, **kwargs}
        return projections.linear(n_in, n_out, rngs=rngs, **kwargs)

    def _gate_linear(self, n_in: int, n_out: int, rngs: nnx.Rngs) -> nnx.Linear:
        """A gate projection: float32, full-precision matmuls on every backend (bf16 gate sums lose long decays)."""
        return self._linear(n_in, n_out, rngs, dtype=jnp.float32, precision=jax.lax.Precision.HIGHEST)

    def gates(self, x: jax.Array) -> dict[str, jax.Array]:
        """x: [B, T, D] -> {"g" (log α), "log_mu", "beta", "eta"}, each [B, T, H] float32."""
        x32 = x.astype(jnp.float32)
        log_alpha_raw = -jnp.exp(self.A_log[...]) * jax.nn.softplus(self.a_proj(x32) + self.dt_bias[...])
        log_mu = -jnp.exp(self.Mu_log[...]) * jax.nn.softplus(self.m_proj(x32) + self.mu_bias[...])
        # The floor guards the momentum against "upper overflow"; it also keeps log μ finite.
        log_mu = jnp.maximum(log_mu, self.options.min_log_mu)
        eta = 1.0 + jnp.tanh(self.e_proj(x32) / self.tau)
        g, beta = constrained_gates(log_alpha_raw, jax.nn.sigmoid(self.b_proj(x32)), eta, self.log_factor[...])
        return {"g": g, "log_mu": log_mu, "beta": beta, "eta": eta}

    def _project(
        self, x: jax.Array, segment_ids: jax.Array | None, cache: dict | None, g: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, dict[str, jax.Array]]:
        """x: [B, T, D], g: [B, T, H] -> q, k, p [B, T, H, d_k], v [B, T, H, d_v] in the compute dtype and
        the new conv states {"conv_q", "conv_k", "conv_v"} [B, conv_size−1, C].

        k is k̂ (η multiplies it inside the op), p = exp(g)·k̂, q = L2norm(q_raw − exp(D_log)·k_raw).
        """
        batch, length = x.shape[:2]
        outs, states = {}, {}
        for name in ("q", "k", "v"):
            state = None if cache is None else cache[f"conv_{name}"]
            proj, conv = getattr(self, f"{name}_proj"), getattr(self, f"{name}_conv")
            outs[name], states[f"conv_{name}"] = conv(proj(x), segment_ids=segment_ids, state=state)
        key_shape = (batch, length, self.num_key_heads, self.head_dim)
        q_raw, k_raw = outs["q"].reshape(key_shape), outs["k"].reshape(key_shape)  # float32 from the conv
        # Output correction (Comba): on the raw post-conv q and k, before the L2 norm (as in the authors' code).
        q_hat = l2_normalize(q_raw - jnp.exp(self.D_log[...])[:, None] * k_raw)
        k_hat = l2_normalize(k_raw)
        group = self.num_heads // self.num_key_heads
        q_hat, k_hat = jnp.repeat(q_hat, group, axis=2), jnp.repeat(k_hat, group, axis=2)
        p = jnp.exp(g)[..., None] * k_hat  # the decayed key predicts; in fp32 before the cast
        v = outs["v"].reshape(batch, length, self.num_heads, self.value_dim)
        cast = lambda a: a.astype(self.dtype)  # noqa: E731
        return cast(q_hat), cast(k_hat), cast(p), cast(v), states

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions = None, cache: MixerCache = None
    ) -> MixerOutput:
        """x [B, T, D]; segment_ids, positions [B, T] or None (positions unused) -> (y [B, T, D], cache or None).

        positions are unused: the recurrence is position-free. With a cache, T = 1 runs the step op and
        T > 1 the chunked op from the cached (S, M); both carry the conv states.
        """
        check_call(self, x, segment_ids, positions, cache)
        gates = self.gates(x)
        q, k, p, v, conv_states = self._project(x, segment_ids, cache, gates["g"])
        initial = None if cache is None else (cache["state_s"], cache["state_m"])
        if cache is not None and x.shape[1] == 1:  # one decode step: the recurrent form
            o, (s, m) = momentum_delta_rule_step(
                q[:, 0], k[:, 0], v[:, 0], p=p[:, 0], state=initial, **{n: a[:, 0] for n, a in gates.items()}
            )
            o = o[:, None]
        else:  # training, or a prefill of T > 1 tokens: the chunked form, carrying the final states
            o, (s, m) = momentum_delta_rule(
                q, k, v, p=p, **gates, initial_state=initial, segment_ids=segment_ids,
                chunk_size=self.options.chunk_size, implementation=self.options.implementation,
            )
        new_cache = None if cache is None else {"state_s": s, "state_m": m, **conv_states}
        return self._output(o, x), new_cache

    def _output(self, o: jax.Array, x: jax.Array) -> jax.Array:
        """o [B, T, H, d_v] -> RMSNorm × sigmoid(g_proj(x)) per head -> o_proj -> [B, T, D] (compute dtype)."""
        return gated_norm_output(o, self.g_proj(x), self.o_norm, self.o_proj, self.dtype)

    def _cache_shapes(self, batch_size: int) -> dict[str, tuple[int, ...]]:
        """Shape of every cache entry: the single source for init_cache and its check."""
        history = self.options.conv_size - 1
        key_width, value_width = self.num_key_heads * self.head_dim, self.num_heads * self.value_dim
        state = (batch_size, self.num_heads, self.head_dim, self.value_dim)
        return {
            "state_s": state,
            "state_m": state,
            "conv_q": (batch_size, history, key_width),
            "conv_k": (batch_size, history, key_width),
            "conv_v": (batch_size, history, value_width),
        }

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty cache: S, M [B, H, d_k, d_v] float32 and conv states [B, conv_size−1, C] in dtype. The
        size does not depend on max_len (recurrent states, no KV buffer). Reads no parameters."""
        del max_len
        return {
            name: jnp.zeros(shape, jnp.float32 if name.startswith("state") else dtype)
            for name, shape in self._cache_shapes(batch_size).items()
        }


def momentum_transition(
    g: jax.Array, log_mu: jax.Array, beta: jax.Array, eta: jax.Array, *, p_times_alpha: bool = True
) -> jax.Array:
    """The input-free MDN step restricted to the key direction k̂. Gates [...] -> transition [..., 2, 2] float32.

    With v = 0, k = η k̂ and p = α k̂, the components s = k̂ᵀS and m = k̂ᵀM of one step obey
    (s, m)ᵀ ← A (s, m)ᵀ with A = [[α(1 − βη), −βμ], [ηα, μ]] (α = exp g, μ = exp log_mu): det A = αμ,
    tr A = α(1 − βη) + μ. `p_times_alpha=False` is the variant p = k̂, A = [[α − βη, −βμ], [η, μ]], which
    the layer does not use (its radius can exceed 1). Takes the layer's `gates(x)` dict as keywords.
    """
    alpha, mu = jnp.exp(g.astype(jnp.float32)), jnp.exp(log_mu.astype(jnp.float32))
    beta, eta = beta.astype(jnp.float32), eta.astype(jnp.float32)
    predict = alpha if p_times_alpha else jnp.ones_like(alpha)  # the coefficient of k̂ in p
    rows = ((alpha - beta * eta * predict, -beta * mu), (eta * predict, mu))
    return jnp.stack([jnp.stack(row, axis=-1) for row in rows], axis=-2)


def transition_spectral_radius(
    g: jax.Array, log_mu: jax.Array, beta: jax.Array, eta: jax.Array, *, p_times_alpha: bool = True
) -> jax.Array:
    """Spectral radius [...] float32 of `momentum_transition` (same arguments), in closed form.

    Real eigenvalues (tr² ≥ 4 det): (|tr| + √(tr² − 4 det)) / 2; a complex-conjugate pair: √det. The
    state decays geometrically along k̂ exactly when this is < 1 (the design notes invariant 7).
    """
    a = momentum_transition(g, log_mu, beta, eta, p_times_alpha=p_times_alpha)
    trace, det = a[..., 0, 0] + a[..., 1, 1], a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]
    disc = trace**2 - 4.0 * det
    real = 0.5 * (jnp.abs(trace) + jnp.sqrt(jnp.maximum(disc, 0.0)))
    return jnp.where(disc >= 0, real, jnp.sqrt(jnp.maximum(det, 0.0)))
