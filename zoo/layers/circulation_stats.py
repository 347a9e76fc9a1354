"""Hopfield-style stability measures and the M(X) balance η_M (Cho, Han, Jin, ICML 2026,
arXiv 2605.27476).

Pure functions (read from the paper's code, `hopfield_energy/log_energy.py`).
Weights use the paper's PyTorch layout: W_Q,h and W_K,h are [d_h, C], so q_i · k_j = x_iᵀ A x_j with
A = W_Qᵀ W_K [C, C]. Everything is float32 and gradient-free (diagnostics).

For one head, with patterns H [L, P] (the retrieved patterns; P = C when retrieving over X), inputs
X [L, C] and S = ½(A + Aᵀ):
  s = centered, L2-normalized column H[:, c];  z = X_cᵀ s  (X_c: X centered over tokens)
  energy       E_c = −½ zᵀ S z  (= −½ sᵀ M_sym s, optionally × 1/√d_h)
  local field  h = X_c S z = M_sym s ∈ R^L
  instability  r_c = mean_t 1[s_t h_t < 0]
  alignment    Align_c = cos(s, h)
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

_EPS = 1e-12


def symmetric_skew_parts(w_q: jax.Array, w_k: jax.Array) -> tuple[jax.Array, jax.Array]:
    """w_q, w_k [d_h, C] -> (S, N), each [C, C]: S = ½(A + Aᵀ), N = ½(A − Aᵀ) with A = W_Qᵀ W_K."""
    a = jnp.dot(w_q.T.astype(jnp.float32), w_k.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
    return 0.5 * (a + a.T), 0.5 * (a - a.T)


def _center(x: jax.Array) -> jax.Array:
    """Centers [L, ...] over tokens (axis 0) in float32."""
    x = x.astype(jnp.float32)
    return x - jnp.mean(x, axis=0, keepdims=True)


def _patterns_and_field(patterns: jax.Array, x: jax.Array, s_mat: jax.Array) -> tuple[jax.Array, ...]:
    """patterns [L, P], x [L, C], S [C, C] -> (s [L, P] normalized, z [C, P], h [L, P] local fields)."""
    s = _center(patterns)
    s = s / jnp.maximum(jnp.linalg.norm(s, axis=0, keepdims=True), _EPS)
    xc = _center(x)
    hp = jax.lax.Precision.HIGHEST
    z = jnp.dot(xc.T, s, precision=hp)
    h = jnp.dot(xc, jnp.dot(s_mat.astype(jnp.float32), z, precision=hp), precision=hp)
    return s, z, h


def hopfield_energy(patterns: jax.Array, x: jax.Array, s_mat: jax.Array, scale: float = 1.0) -> jax.Array:
    """E_c = −½ zᵀ S z per pattern column: patterns [L, P], x [L, C], S [C, C] -> [P] float32."""
    _, z, _ = _patterns_and_field(patterns, x, s_mat)
    energy = -0.5 * jnp.sum(z * jnp.dot(s_mat.astype(jnp.float32), z, precision=jax.lax.Precision.HIGHEST), 0)
    return jax.lax.stop_gradient(scale * energy)


def instability_fraction(patterns: jax.Array, x: jax.Array, s_mat: jax.Array) -> jax.Array:
    """r_c = fraction of tokens with λ_t = s_t h_t < 0: patterns [L, P], x [L, C], S [C, C] -> [P]."""
    s, _, h = _patterns_and_field(patterns, x, s_mat)
    return jax.lax.stop_gradient(jnp.mean((s * h < 0).astype(jnp.float32), axis=0))


def alignment(patterns: jax.Array, x: jax.Array, s_mat: jax.Array) -> jax.Array:
    """Align_c = cos(s, h) between a pattern and its local field: -> [P] float32."""
    s, _, h = _patterns_and_field(patterns, x, s_mat)
    cos = jnp.sum(s * h, 0) / jnp.maximum(jnp.linalg.norm(s, axis=0) * jnp.linalg.norm(h, axis=0), _EPS)
    return jax.lax.stop_gradient(cos)


def sym_skew_frobenius(gram: jax.Array, s_mat: jax.Array, n_mat: jax.Array) -> tuple[jax.Array, jax.Array]:
    """‖X S Xᵀ‖_F² = tr(S G S G) and ‖X N Xᵀ‖_F² = tr(Nᵀ G N G) from G = X_cᵀ X_c, never forming L × L.

    gram [..., C, C]; S, N [C, C] -> two arrays [...] (float32).
    """
    hp = jax.lax.Precision.HIGHEST
    sg = jnp.einsum("cd,...de->...ce", s_mat, gram, precision=hp)
    ng = jnp.einsum("cd,...de->...ce", n_mat, gram, precision=hp)
    # tr(Nᵀ G N G) = −tr(N G N G) because Nᵀ = −N.
    return jnp.einsum("...ce,...ec->...", sg, sg, precision=hp), -jnp.einsum("...ce,...ec->...", ng, ng, precision=hp)


def eta_m(sym_sq: jax.Array, skew_sq: jax.Array, eps: float = 1e-6) -> jax.Array:
    """η_M = (‖M_sym‖² − ‖M_skew‖²)/(‖M_sym‖² + ‖M_skew‖² + ε) ∈ [−1, 1]."""
    return (sym_sq - skew_sq) / (sym_sq + skew_sq + eps)


def symmetry_balance(sym_sq: jax.Array, skew_sq: jax.Array, eps: float = 1e-6) -> jax.Array:
    """(‖M_sym‖ − ‖M_skew‖)/(‖M_sym‖ + ‖M_skew‖), from the squared norms."""
    sym, skew = jnp.sqrt(jnp.maximum(sym_sq, 0.0)), jnp.sqrt(jnp.maximum(skew_sq, 0.0))
    return (sym - skew) / (sym + skew + eps)


def stability_measures(
    patterns: jax.Array, x: jax.Array, w_q: jax.Array, w_k: jax.Array, *, scale_energy: bool = False
) -> dict[str, jax.Array]:
    """The paper's diagnostics (H, X, W_Q, W_K) -> {E, r, Align, η_M, ...} for all heads.

    patterns [Hh, L, P] (retrieved patterns per head), x [L, C], w_q, w_k [Hh, d_h, C]. Per-head,
    per-channel arrays are [Hh, P]; the summaries (energy mean / min / 5th percentile over channels, mean
    r and Align) are head-averaged scalars, as the paper reports them.
    """
    s_mat, n_mat = jax.vmap(symmetric_skew_parts)(w_q, w_k)
    scale = 1.0 / math.sqrt(w_q.shape[1]) if scale_energy else 1.0
    energy = jax.vmap(lambda p, s: hopfield_energy(p, x, s, scale))(patterns, s_mat)
    unstable = jax.vmap(lambda p, s: instability_fraction(p, x, s))(patterns, s_mat)
    align = jax.vmap(lambda p, s: alignment(p, x, s))(patterns, s_mat)
    xc = _center(x)
    gram = jnp.dot(xc.T, xc, precision=jax.lax.Precision.HIGHEST)
    sym_sq, skew_sq = jax.vmap(lambda s, n: sym_skew_frobenius(gram, s, n))(s_mat, n_mat)
    return {
        "energy": energy,
        "instability": unstable,
        "alignment": align,
        "energy_mean": jnp.mean(energy),
        "energy_min": jnp.mean(jnp.min(energy, axis=1)),
        "energy_p5": jnp.mean(jnp.percentile(energy, 5.0, axis=1)),
        "instability_mean": jnp.mean(unstable),
        "alignment_mean": jnp.mean(align),
        "sym_fro_sq": sym_sq,
        "skew_fro_sq": skew_sq,
        "eta_m": eta_m(sym_sq, skew_sq),
        "symmetry_balance": symmetry_balance(sym_sq, skew_sq),
    }
