"""Rank-aware FP8 (E4M3) scaling of attention logits from the geometry of W_Q W_Kᵀ, and FP8-logit attention.

Paper: Emadi, "Rank-Aware Spectral Bounds on Attention Logits for Stable Low-Precision Training" (ICML 2026,
arXiv 2602.18851); docs/papers/fp8_rank_aware.md. The logits S_ij = q_iᵀ k_j / √d_h, scaled by s before an
E4M3 cast, overflow iff s · max|S| > R = 448 (JAX's cast then gives NaN: E4M3FN has no infinity). The paper
chooses s from the weights: |S_ij| ≤ ‖x_i‖ ‖x_j‖ σ_max(W_Q,h W_K,hᵀ) / √d_h. The bound formulas, the power
iteration on Gram matrices and the GQA forms below are reconstructions (the paper's code was not available):

- `head_sigmas` (GQA mode (a)): σ_h = σ_max(W_Q,h W_K,g(h)ᵀ) for every query head, by power iteration on
  the d_h × d_h product G_Q,h G_K,g (λ_max = σ²; O(d·d_h²) once, then O(d_h²) per step), K never repeated;
- `group_sigmas` (mode (b)): one σ_g per KV group, σ_g² = λ_max((Σ_{h∈g} G_Q,h) G_K,g), the top singular value
  of the stacked [M_h]_{h∈g}, with max_h σ_h ≤ σ_g ≤ √|g| max_h σ_h;
- `head_norm_products`: ‖W_Q,h‖₂ ‖W_K,g‖₂ ≥ σ_h, the factor that stays valid under RoPE, whose relative
  rotation R_{j−i} sits between W_Q and W_Kᵀ (σ_max(W_Q R W_Kᵀ) can exceed σ_max(W_Q W_Kᵀ));
- `deterministic_bound` / `probabilistic_bound`: B̂ = ρ_q ρ_k σ / √d_h, or the rank-aware sub-Gaussian
  (Hanson-Wright) tail (ρ² σ / √d_h)(√r √(2 log(2T²/δ)) + 2 log(2T²/δ)) for isotropic tokens;
- `scale_from_bound` s = u R / B̂ (headroom u ∈ (0, 1]) and, for comparison, the naive `amax_scale`
  s = u R / max|S| of logits observed earlier (delayed scaling: right for those logits, blind to later ones).

The FP8-logit option of the softmax-family mixers (attention, goat, fox, fix) is this one shared piece:
`FP8LogitOptions` (the three option fields every mixer's options inherit), `FP8Logits` (validation naming the
field; the per-head scale s_h, "static", or from a bound B̂_h the mixer composes with `weight_bound` /
`gain_bound`: "rank_aware", the probabilistic rank-aware bound, or "spectral", the deterministic ρ_max² σ_max
bound, which never uses the rank), `quantize_logits` / `fp8_attention_weights` / `fp8_attention` (the logits
s_h·S cast to E4M3 and divided by s_h, softmax in float32) and `logit_stats` (the overflow counter and the
FP8 error of one call's logits).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_choice, check_interval, check_positive

__all__ = ["E4M3_MAX", "FP8_LOGIT_MODES", "FP8LogitOptions", "FP8Logits", "amax_scale", "cast_e4m3",
           "deterministic_bound", "fp8_attention", "fp8_attention_weights", "gain_bound", "group_sigmas",
           "head_norm_products", "head_sigmas", "logit_stats", "overflow_count", "power_iteration_top_eigenvalue",
           "probabilistic_bound", "qk_logits", "quantize_logits", "scale_from_bound", "split_heads", "tail_factor",
           "weight_bound"]

E4M3_MAX = 448.0
HIGHEST = jax.lax.Precision.HIGHEST
FP8_LOGIT_MODES = ("off", "rank_aware", "spectral", "static")
# The bound modes (scales from the weights): the rank-aware tail bound and the deterministic spectral bound.
BOUND_MODES = ("rank_aware", "spectral")
# δ of the "rank_aware" mode: the bound holds for all T² logits of a call with probability >= 1 − δ (isotropic model).
RANK_AWARE_DELTA = 1e-6
# Power-iteration steps of the rank-aware scale in each forward (a cold start: no vector is kept between calls).
FP8_POWER_ITERATIONS = 20


def cast_e4m3(x: jax.Array) -> jax.Array:
    """x (any float) -> float32 values of x rounded to float8_e4m3fn (NaN where |x| overflows past 448)."""
    return x.astype(jnp.float8_e4m3fn).astype(jnp.float32)


def overflow_count(x: jax.Array, scale: jax.Array | float) -> jax.Array:
    """Entries of x · scale that an E4M3 cast loses: |x · scale| > 448 or a non-finite cast. int32 scalar.

    `scale` broadcasts against x (e.g. per-head scales [H, 1, 1] on logits [B, H, T, S]). Masked (−inf) logits
    should be excluded by the caller (passed as 0).
    """
    scaled = jnp.asarray(x, jnp.float32) * jnp.asarray(scale, jnp.float32)
    lost = (jnp.abs(scaled) > E4M3_MAX) | ~jnp.isfinite(cast_e4m3(scaled))
    return jnp.sum(lost, dtype=jnp.int32)


def power_iteration_top_eigenvalue(a: jax.Array, iterations: int = 50) -> jax.Array:
    """λ_max of a batch of matrices a [..., n, n] similar to PSD ones (e.g. G_Q G_K) by `iterations` power steps.

    Starts from the all-ones vector (deterministic); returns ‖a v‖ for the final unit v, [...]."""
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    v = jnp.ones(a.shape[:-1], jnp.float32) / math.sqrt(a.shape[-1])

    def step(_, vec):
        nxt = jnp.einsum("...ij,...j->...i", a, vec, precision=HIGHEST)
        return nxt / jnp.maximum(jnp.linalg.norm(nxt, axis=-1, keepdims=True), 1e-30)

    v = jax.lax.fori_loop(0, iterations, step, v)
    return jnp.linalg.norm(jnp.einsum("...ij,...j->...i", a, v, precision=HIGHEST), axis=-1)


def split_heads(kernel: jax.Array, heads: int) -> jax.Array:
    """A projection kernel [D, heads·d_h] -> per-head matrices [heads, D, d_h]."""
    if kernel.ndim != 2 or kernel.shape[1] % heads:
        raise ValueError(f"kernel must have shape [D, {heads}·d_h], got {kernel.shape}")
    return jnp.transpose(kernel.reshape(kernel.shape[0], heads, -1), (1, 0, 2)).astype(jnp.float32)


def _grams(q_kernel: jax.Array, k_kernel: jax.Array, num_heads: int, num_kv_heads: int) -> tuple[jax.Array, jax.Array]:
    """G_Q per query head grouped [Hkv, G, d_h, d_h] and G_K per KV head [Hkv, d_h, d_h]."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    wq, wk = split_heads(q_kernel, num_heads), split_heads(k_kernel, num_kv_heads)
    if wq.shape[1:] != wk.shape[1:]:
        raise ValueError(f"q and k heads must have the same [D, d_h], got {wq.shape[1:]} and {wk.shape[1:]}")
    gq = jnp.einsum("hdi,hdj->hij", wq, wq, precision=HIGHEST)
    gk = jnp.einsum("hdi,hdj->hij", wk, wk, precision=HIGHEST)
    return gq.reshape(num_kv_heads, num_heads // num_kv_heads, *gq.shape[1:]), gk


def head_sigmas(q_kernel: jax.Array, k_kernel: jax.Array, num_heads: int, num_kv_heads: int,
                iterations: int = 50) -> jax.Array:
    """σ_max(W_Q,h W_K,g(h)ᵀ) for every query head h -> [H] (GQA: head h reads KV head h // (H // Hkv)).

    q_kernel [D, H·d_h], k_kernel [D, Hkv·d_h] (flax orientation, x @ kernel)."""
    gq, gk = _grams(q_kernel, k_kernel, num_heads, num_kv_heads)
    product = jnp.einsum("kgij,kjl->kgil", gq, gk, precision=HIGHEST)
    return jnp.sqrt(power_iteration_top_eigenvalue(product, iterations)).reshape(num_heads)


def group_sigmas(q_kernel: jax.Array, k_kernel: jax.Array, num_heads: int, num_kv_heads: int,
                 iterations: int = 50) -> jax.Array:
    """One σ_g per KV group -> [Hkv]: the top singular value of the group's stacked [W_Q,h W_K,gᵀ]_{h∈g}."""
    gq, gk = _grams(q_kernel, k_kernel, num_heads, num_kv_heads)
    product = jnp.einsum("kij,kjl->kil", jnp.sum(gq, axis=1), gk, precision=HIGHEST)
    return jnp.sqrt(power_iteration_top_eigenvalue(product, iterations))


def head_norm_products(q_kernel: jax.Array, k_kernel: jax.Array, num_heads: int, num_kv_heads: int,
                       iterations: int = 50) -> jax.Array:
    """‖W_Q,h‖₂ ‖W_K,g(h)‖₂ for every query head -> [H]: the spectral factor that also bounds RoPE'd logits."""
    gq, gk = _grams(q_kernel, k_kernel, num_heads, num_kv_heads)
    norm_q = jnp.sqrt(power_iteration_top_eigenvalue(gq, iterations))  # [Hkv, G]
    norm_k = jnp.sqrt(power_iteration_top_eigenvalue(gk, iterations))  # [Hkv]
    return (norm_q * norm_k[:, None]).reshape(num_heads)


def deterministic_bound(sigma: jax.Array, rho_q: jax.Array | float, rho_k: jax.Array | float,
                        head_dim: int) -> jax.Array:
    """max|S| ≤ ρ_q ρ_k σ / √d_h for tokens with ‖x‖ ≤ ρ (always safe)."""
    return jnp.asarray(rho_q, jnp.float32) * jnp.asarray(rho_k, jnp.float32) * sigma / math.sqrt(head_dim)


def tail_factor(rank: int, length: int, delta: float = RANK_AWARE_DELTA) -> float:
    """√r √(2 log(2T²/δ)) + 2 log(2T²/δ): the Hanson-Wright factor of the rank-aware bound (‖M‖_F ≤ √r σ_max)
    with a union bound over the T² logits; rank r >= 1, length T >= 1, δ in (0, 1)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    for name, value in (("rank", rank), ("length", length)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    log_term = math.log(2 * length**2 / delta)
    return math.sqrt(rank) * math.sqrt(2 * log_term) + 2 * log_term


def probabilistic_bound(sigma: jax.Array, rho: float, head_dim: int, rank: int, length: int,
                        delta: float = RANK_AWARE_DELTA) -> jax.Array:
    """The rank-aware tail bound (ρ² σ / √d_h)(√r √(2 log(2T²/δ)) + 2 log(2T²/δ)) on max|S| over T² pairs of
    isotropic sub-Gaussian tokens (covariance ρ² I, ρ the per-coordinate scale); holds with probability ≥ 1 − δ
    under that model only. With rank = d (the model width) it is the rank-agnostic bound."""
    return rho**2 * sigma / math.sqrt(head_dim) * tail_factor(rank, length, delta)


def scale_from_bound(bound: jax.Array, headroom: float = 0.8) -> jax.Array:
    """s = u · 448 / B̂: scaled logits then stay within u of the E4M3 range wherever |S| ≤ B̂."""
    if not 0 < headroom <= 1:
        raise ValueError(f"headroom must be in (0, 1], got {headroom!r}")
    return headroom * E4M3_MAX / jnp.maximum(bound, 1e-30)


def amax_scale(logits: jax.Array, headroom: float = 0.8) -> jax.Array:
    """The naive max-based (delayed) scale u · 448 / max|S| of logits observed beforehand (finite entries)."""
    finite = jnp.where(jnp.isfinite(logits), jnp.abs(logits), 0.0)
    return scale_from_bound(jnp.max(finite), headroom)


@dataclasses.dataclass(frozen=True)
class FP8LogitOptions:
    """The FP8-logit fields of a softmax-family mixer's `cfg.mixer_options`; its options dataclass inherits them.

    fp8_logits: "off" | "rank_aware" | "spectral" | "static"; fp8_scale: the "static" scale (finite, > 0);
    fp8_headroom: u in (0, 1] of the "rank_aware" and "spectral" scales. `FP8Logits.from_options` validates them.
    """

    fp8_logits: str = "off"
    fp8_scale: float = 1.0
    fp8_headroom: float = 0.8


@dataclasses.dataclass(frozen=True)
class FP8Logits:
    """A mixer's validated FP8-logit setting: the mode, the static scale and the headroom u."""

    mode: str = "off"
    static_scale: float = 1.0
    headroom: float = 0.8

    @classmethod
    def from_options(cls, owner: str, options: FP8LogitOptions | dict[str, Any]) -> FP8Logits:
        """Reads fp8_logits / fp8_scale / fp8_headroom of `options` (a dataclass or a dict); a bad value raises
        ValueError naming `owner` ("goat mixer") and the field."""
        def read(name: str) -> Any:
            return options[name] if isinstance(options, dict) else getattr(options, name)

        mode, scale, headroom = read("fp8_logits"), read("fp8_scale"), read("fp8_headroom")
        check_choice(f"{owner} option 'fp8_logits'", mode, FP8_LOGIT_MODES)
        check_positive(f"{owner} option 'fp8_scale'", scale, finite=True)
        check_interval(f"{owner} option 'fp8_headroom'", headroom, 0, 1, closed="right")
        return cls(mode, float(scale), float(headroom))

    @property
    def enabled(self) -> bool:
        """Whether the training / scoring forward holds its q·k logits in E4M3."""
        return self.mode != "off"

    def scales(self, num_heads: int, bound: Callable[[], jax.Array]) -> jax.Array:
        """The per-head scales s [H] float32, gradient-free: fp8_scale ("static") or u·448/B̂_h ("rank_aware" or
        "spectral", B̂ = bound(), [H] or a scalar, computed by the mixer for `self.mode`; only called then)."""
        if self.mode == "static":
            return jnp.full((num_heads,), self.static_scale, jnp.float32)
        if self.mode not in BOUND_MODES:
            raise ValueError(f"FP8 scales need fp8_logits 'rank_aware', 'spectral' or 'static', got {self.mode!r}")
        bounds = jnp.broadcast_to(jnp.asarray(bound(), jnp.float32), (num_heads,))
        return jax.lax.stop_gradient(scale_from_bound(bounds, self.headroom))


def weight_bound(q_kernel: jax.Array, k_kernel: jax.Array, num_heads: int, num_kv_heads: int, x: jax.Array, *,
                 rotary: bool, logit_scale: float, iterations: int = FP8_POWER_ITERATIONS,
                 mode: str = "spectral") -> jax.Array:
    """B̂_h [H] on logit_scale·|q_i·k_j| for q = x_i W_Q,h and k = x̃_j W_K,g(h), from the mixer input x [B, T, D].

    c_h = σ_max(W_Q,h W_K,gᵀ), or ‖W_Q,h‖₂‖W_K,g‖₂ when a rotation (RoPE) sits between q and k (it bounds the
    rotated product's σ_max, whose rank stays <= d_h). Kernels [D, H·d_h] and [D, Hkv·d_h], bias-free.

    mode "spectral": B̂_h = ρ_max² c_h · logit_scale, ρ_max the largest row norm of x; deterministic, for x̃_j
    any convex combination of rows of x (so also after a token shift).
    mode "rank_aware": B̂_h = ρ² c_h · logit_scale · tail_factor(d_h, T, RANK_AWARE_DELTA), ρ² = the mean of
    ‖x_t‖²/D over the tokens (the per-coordinate variance of isotropic tokens) and r = d_h >= rank(W_Q,h W_K,gᵀ):
    the rank-aware bound (Emadi, ICML 2026; reconstruction), which holds with probability >= 1 − δ over the T²
    logits when the tokens are isotropic sub-Gaussian, and not otherwise (massive activations break it)."""
    if mode not in BOUND_MODES:
        raise ValueError(f"mode must be one of {list(BOUND_MODES)}, got {mode!r}")
    spectral = head_norm_products if rotary else head_sigmas
    factor = spectral(q_kernel, k_kernel, num_heads, num_kv_heads, iterations)
    squares = jnp.sum(jnp.square(x.astype(jnp.float32)), axis=-1)
    if mode == "spectral":
        return jnp.max(squares) * factor * logit_scale
    head_dim = q_kernel.shape[1] // num_heads
    variance = jnp.mean(squares) / x.shape[-1]
    return variance * factor * logit_scale * tail_factor(head_dim, x.shape[1])


def gain_bound(q_gain: jax.Array, k_gain: jax.Array, num_heads: int, num_kv_heads: int, head_dim: int,
               logit_scale: float) -> jax.Array:
    """B̂_h [H] under QK-norm: ‖RMSNorm(q) ⊙ γ‖ ≤ √d_h max|γ|, so logit_scale·|q̂·k̂| ≤ d_h max|γ_q,h| max|γ_k,g|
    · logit_scale. q_gain [d_h] (shared) or [H, d_h]; k_gain [d_h] or [Hkv, d_h]."""
    def per_head(gain: jax.Array, heads: int) -> jax.Array:
        return jnp.broadcast_to(jnp.max(jnp.abs(jnp.asarray(gain, jnp.float32)), axis=-1), (heads,))

    gains = per_head(q_gain, num_heads) * jnp.repeat(per_head(k_gain, num_kv_heads), num_heads // num_kv_heads)
    return head_dim * gains * logit_scale


def qk_logits(q: jax.Array, k: jax.Array, logit_scale: float | None = None) -> jax.Array:
    """q [B, T, H, Dh], k [B, S, Hkv, Dh] -> logit_scale·q·k [B, H, T, S] float32 (GQA, K never repeated;
    logit_scale defaults to 1/√Dh)."""
    batch, length, heads, head_dim = q.shape
    groups = heads // k.shape[2]
    qg = q.astype(jnp.float32).reshape(batch, length, k.shape[2], groups, head_dim)
    logits = jnp.einsum("btkgd,bskd->bkgts", qg, k.astype(jnp.float32), precision=HIGHEST)
    scale = head_dim**-0.5 if logit_scale is None else logit_scale
    return logits.reshape(batch, heads, length, k.shape[1]) * jnp.float32(scale)


def quantize_logits(logits: jax.Array, scales: jax.Array) -> jax.Array:
    """logits [B, H, T, S] float32, scales [H] -> e4m3(s_h·S)/s_h float32 (NaN where |s_h·S| > 448)."""
    s = jnp.asarray(scales, jnp.float32).reshape(1, -1, 1, 1)
    return cast_e4m3(logits * s) / s


def fp8_attention_weights(q: jax.Array, k: jax.Array, mask: jax.Array, scale: jax.Array, *,
                          logit_scale: float | None = None, bias: jax.Array | None = None,
                          sink_logit: jax.Array | None = None) -> jax.Array:
    """softmax(Ŝ + bias) [B, H, T, S] float32 with Ŝ = e4m3(s_h S)/s_h, S = logit_scale·q·k (`qk_logits`).

    mask bool [B or 1, 1, T, S] (0 where False), scale [H] > 0, bias float32 broadcastable to [B, H, T, S] (e.g.
    a forget gate's sums; not cast), sink_logit [H] or None: an extra key slot of value 0 and logit sink_logit_h
    (not cast), left out of the result, so rows then sum to less than 1."""
    logits = quantize_logits(qk_logits(q, k, logit_scale), scale)
    if bias is not None:
        logits = logits + bias
    logits = jnp.where(mask, logits, -jnp.inf)
    if sink_logit is not None:
        sink = jnp.broadcast_to(sink_logit.astype(jnp.float32)[None, :, None, None], (*logits.shape[:3], 1))
        logits = jnp.concatenate([logits, sink], axis=-1)
    return jax.nn.softmax(logits, axis=-1)[..., : k.shape[1]]


def fp8_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: jax.Array,
                  bias: jax.Array | None = None, sink_logit: jax.Array | None = None, *,
                  logit_scale: float | None = None) -> jax.Array:
    """Softmax attention on E4M3 logits (`fp8_attention_weights`): q [B, T, H, Dh], k/v [B, S, Hkv, Dh] (GQA,
    K and V never repeated) -> [B, T, H, Dh] in q's dtype. An overflowing s_h·S gives NaN."""
    batch, length, heads, head_dim = q.shape
    probs = fp8_attention_weights(q, k, mask, scale, logit_scale=logit_scale, bias=bias, sink_logit=sink_logit)
    probs = probs.reshape(batch, k.shape[2], heads // k.shape[2], length, k.shape[1])
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v.astype(jnp.float32), precision=HIGHEST)
    return out.reshape(batch, length, heads, head_dim).astype(q.dtype)


def logit_stats(q: jax.Array, k: jax.Array, mask: jax.Array, scale: jax.Array, *,
                logit_scale: float | None = None) -> dict[str, jax.Array]:
    """The FP8 cast of one call's logits S = logit_scale·q·k, over the entries the mask keeps (q, k, mask,
    scale as in `fp8_attention_weights`): overflows (int32: entries E4M3 loses, `overflow_count`),
    max_abs_error (float32: max |Ŝ − S| over the entries that did not overflow), max_abs_logit and
    utilization = max_h s_h·max|S_h| / 448."""
    logits = qk_logits(q, k, logit_scale)
    kept = jnp.broadcast_to(mask, logits.shape)
    s = jnp.asarray(scale, jnp.float32).reshape(1, -1, 1, 1)
    inside = jnp.where(kept, logits, 0.0)
    error = jnp.abs(quantize_logits(inside, scale) - inside)
    return {
        "overflows": overflow_count(inside, s),
        "max_abs_error": jnp.max(jnp.where(jnp.isfinite(error), error, 0.0)),
        "max_abs_logit": jnp.max(jnp.abs(inside)),
        "utilization": jnp.max(jnp.abs(inside) * s) / E4M3_MAX,
    }


def projection_scales(fp8: FP8Logits, x: jax.Array, *, q_proj: Any, k_proj: Any, q_norm: Any, k_norm: Any,
                      heads: int, kv_heads: int, head_dim: int, rotary: bool) -> jax.Array:
    """Per-head scales s [H] float32 for a mixer whose q, k are linear projections of x [B, T, D] with logits
    q·k/√d: the QK-norm gain bound when q_norm is set (both bound modes: normalized q, k are not isotropic
    tokens, and the gain bound is already attained), else the W_Q W_Kᵀ weight bound of the mode."""
    logit_scale = head_dim**-0.5

    def bound() -> jax.Array:
        if q_norm is not None:
            return gain_bound(q_norm.scale[...], k_norm.scale[...], heads, kv_heads, head_dim, logit_scale)
        return weight_bound(q_proj.kernel[...], k_proj.kernel[...], heads, kv_heads, x, rotary=rotary,
                            logit_scale=logit_scale, mode=fp8.mode)

    return fp8.scales(heads, bound)

