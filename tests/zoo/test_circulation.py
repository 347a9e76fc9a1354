"""Circulation attention: the concatenation trick against the materialized ℓ_α, the symmetric/skew
decomposition of the bilinear form, reductions (α = 1 → attention, α = 0 → symmetric logits), the blend
paths, the adaptive η_M against explicit norms, the stability measures against hand computations,
options and bf16. Model-level checks run in tests/zoo/test_conformance.py.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.mixers.attention import Attention
from icml26zoo.mixers.circulation import CirculationAttention, circulation_logits, reference_logits
from icml26zoo.mixers.circulation_stats import stability_measures, sym_skew_frobenius, symmetric_skew_parts
from icml26zoo.models import ModelConfig

pytestmark = pytest.mark.usefixtures("fast_compile")

F32 = {"atol": 1e-5, "rtol": 1e-5}
CFG = ModelConfig(mixer="circulation", vocab_size=64, d_model=32, num_layers=1, num_heads=4, num_kv_heads=2,
                  max_seq_len=32)
B, T = 2, 6


def _mixer(*options, **overrides) -> CirculationAttention:
    return CirculationAttention(dataclasses.replace(CFG, mixer_options=tuple(options), **overrides), rngs=nnx.Rngs(0))


def _x(seed=0):
    return jax.random.normal(jax.random.key(seed), (B, T, CFG.d_model))


POS = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))


def _np(a):
    return np.asarray(a, np.float64)


def _per_head_a(m: CirculationAttention) -> np.ndarray:
    """A_h = W_Q,h W_K,g(h)ᵀ in our [C, Dh] kernel layout, so that q_i·k_j = x_iᵀ A_h x_j: [H, C, C]."""
    wq = _np(m.q_proj.kernel.value).reshape(32, 4, 8)
    wk = np.repeat(_np(m.k_proj.kernel.value).reshape(32, 2, 8), 2, axis=1)
    return np.einsum("chd,ehd->hce", wq, wk)


@pytest.mark.parametrize("alpha", [-1.0, 1.2, 3.0])
def test_concat_trick_equals_decomposition(alpha):
    """q̃·k̃ = (M_sym + α·M_skew)/√d with M_sym = X S Xᵀ, M_skew = X N Xᵀ built from S = ½(A + Aᵀ), N = ½(A − Aᵀ)."""
    m, x = _mixer(), _x()
    q = m.q_proj(x).reshape(B, T, 4, 8)
    k = jnp.repeat(m.k_proj(x).reshape(B, T, 2, 8), 2, axis=2)
    c1, c2 = (1 + alpha) / 2, (1 - alpha) / 2
    trick = _np(circulation_logits(q, k, q, k, c1, c2))
    np.testing.assert_allclose(trick, _np(reference_logits(q, k, q, k, c1, c2)), **F32)
    a = _per_head_a(m)
    s, n = (a + a.transpose(0, 2, 1)) / 2, (a - a.transpose(0, 2, 1)) / 2
    xn = _np(x)
    m_sym, m_skew = np.einsum("btc,hce,bse->bhts", xn, s, xn), np.einsum("btc,hce,bse->bhts", xn, n, xn)
    np.testing.assert_allclose(m_sym, m_sym.transpose(0, 1, 3, 2), atol=1e-12)
    np.testing.assert_allclose(m_skew, -m_skew.transpose(0, 1, 3, 2), atol=1e-12)
    np.testing.assert_allclose(trick, (m_sym + alpha * m_skew) / np.sqrt(8), atol=2e-5, rtol=2e-5)
    if alpha == -1.0:  # ℓ_{−1} = KQᵀ
        np.testing.assert_allclose(trick, np.einsum("bthd,bshd->bhts", _np(k), _np(q)) / np.sqrt(8), **F32)


def _masked_softmax_out(m, logits, x):
    logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    v = np.repeat(_np(m.v_proj(x)).reshape(B, T, 2, 8), 2, axis=2)
    return np.einsum("bhts,bshd->bthd", p, v).reshape(B, T, 32) @ _np(m.o_proj.kernel.value)


def test_alpha_zero_is_symmetric_attention():
    m, x = _mixer(("alpha", 0.0)), _x(1)
    a = _per_head_a(m)
    xn = _np(x)
    m_sym = np.einsum("btc,hce,bse->bhts", xn, (a + a.transpose(0, 2, 1)) / 2, xn) / np.sqrt(8)
    y, _ = m(x, positions=POS)
    np.testing.assert_allclose(_np(y), _masked_softmax_out(m, m_sym, x), atol=2e-5, rtol=2e-5)


def test_alpha_one_beta_one_is_attention():
    circ = _mixer()
    attn = Attention(dataclasses.replace(CFG, mixer="attention"), rngs=nnx.Rngs(3))
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        getattr(attn, name).kernel.value = getattr(circ, name).kernel.value
    x = _x(2)
    expected, _ = attn(x, positions=jnp.zeros((B, T), jnp.int32))  # RoPE off: position 0 everywhere
    np.testing.assert_allclose(_np(circ(x, positions=POS)[0]), _np(expected), **F32)


def test_retrieval_over_inputs_equals_values_when_beta_is_one():
    """β = 1: H_new = H_α (ratio 1), so softmax·X then W_V equals softmax·(X W_V), the cheap path."""
    m, x = _mixer(("alpha", 1.3)), _x(3)
    fast, _ = m(x, positions=POS)
    m.retrieve_inputs = True
    np.testing.assert_allclose(_np(m(x, positions=POS)[0]), _np(fast), atol=2e-5, rtol=2e-5)


def test_blend_matches_numpy():
    """β = 3 over X, with the per-token norm-ratio clamp, against a float64 computation."""
    m, x = _mixer(("alpha", 1.1), ("beta", 3.0)), _x(4)
    xn, a = _np(x), _per_head_a(m)
    mask = np.tril(np.ones((T, T), bool))

    def retrieve(logits):
        p = np.exp(np.where(mask, logits, -np.inf) - logits.max(-1, keepdims=True))
        return np.einsum("bhts,bsc->bthc", p / p.sum(-1, keepdims=True), xn)

    qk = np.einsum("btc,hce,bse->bhts", xn, a, xn) / np.sqrt(8)
    h_org, h_alpha = retrieve(qk), retrieve(1.05 * qk - 0.05 * qk.transpose(0, 1, 3, 2))
    h_new = h_org + 3.0 * (h_alpha - h_org)
    h_new *= np.clip(np.linalg.norm(h_alpha, axis=-1, keepdims=True) / np.linalg.norm(h_new, axis=-1, keepdims=True),
                     0.25, 4.0)
    wv = np.repeat(_np(m.v_proj.kernel.value).reshape(32, 2, 8), 2, axis=1)
    out = np.einsum("bthc,chd->bthd", h_new, wv).reshape(B, T, 32) @ _np(m.o_proj.kernel.value)
    np.testing.assert_allclose(_np(m(x, positions=POS)[0]), out, atol=5e-5, rtol=5e-5)


def test_adaptive_eta_equals_explicit_frobenius_norms():
    """η_M of the whole sequence (the last token's prefix) from the trace formulas equals explicit norms."""
    m, x = _mixer(("alpha", 1.2), ("adaptive", "dev")), _x(5)
    mask = jnp.tril(jnp.ones((T, T), jnp.bool_))[None].repeat(B, 0)
    eta = _np(m.eta(m._prefix_stats(x, mask)))[:, -1]
    a = _per_head_a(m)
    xc = _np(x) - _np(x).mean(1, keepdims=True)
    sym = np.einsum("btc,hce,bse->bhts", xc, (a + a.transpose(0, 2, 1)) / 2, xc)
    skew = np.einsum("btc,hce,bse->bhts", xc, (a - a.transpose(0, 2, 1)) / 2, xc)
    s2, k2 = (sym**2).sum((2, 3)), (skew**2).sum((2, 3))
    np.testing.assert_allclose(eta, ((s2 - k2) / (s2 + k2 + 1e-6)).mean(1), atol=1e-5)


def test_stability_measures_by_hand():
    rng = np.random.default_rng(0)
    x, pat = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    w_q, w_k = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    a = w_q.T @ w_k
    s_mat = (a + a.T) / 2
    out = stability_measures(jnp.asarray(pat[None], jnp.float32), jnp.asarray(x, jnp.float32),
                             jnp.asarray(w_q[None], jnp.float32), jnp.asarray(w_k[None], jnp.float32))
    xc = x - x.mean(0)
    m_sym = xc @ s_mat @ xc.T
    for c in range(3):
        s = pat[:, c] - pat[:, c].mean()
        s /= np.linalg.norm(s)
        h = m_sym @ s
        np.testing.assert_allclose(float(out["energy"][0, c]), -0.5 * s @ m_sym @ s, rtol=1e-4, atol=1e-5)
        # The skew part is energy-neutral: the energy from A equals the energy from S.
        np.testing.assert_allclose(-0.5 * s @ (xc @ a @ xc.T) @ s, -0.5 * s @ m_sym @ s, atol=1e-10)
        np.testing.assert_allclose(float(out["instability"][0, c]), np.mean(s * h < 0), atol=1e-7)
        np.testing.assert_allclose(float(out["alignment"][0, c]), s @ h / np.linalg.norm(h), rtol=1e-4, atol=1e-5)
    s2, k2 = sym_skew_frobenius(jnp.asarray(xc.T @ xc), *map(jnp.asarray, ((a + a.T) / 2, (a - a.T) / 2)))
    np.testing.assert_allclose(float(s2), (m_sym**2).sum(), rtol=1e-4)
    np.testing.assert_allclose(float(k2), ((xc @ ((a - a.T) / 2) @ xc.T) ** 2).sum(), rtol=1e-4)
    eye, rot = jnp.eye(2), jnp.asarray([[0.0, 1.0], [-1.0, 0.0]])
    x2 = jnp.asarray(rng.normal(size=(6, 2)), jnp.float32)
    assert abs(float(stability_measures(x2[None], x2, eye[None], eye[None])["eta_m"][0]) - 1.0) < 1e-5
    assert abs(float(stability_measures(x2[None], x2, eye[None], rot[None])["eta_m"][0]) + 1.0) < 1e-5
    s_part, n_part = symmetric_skew_parts(eye, rot)
    np.testing.assert_allclose(_np(s_part), 0.0)
    np.testing.assert_allclose(_np(n_part), _np(rot))


@pytest.mark.parametrize(
    "options, name",
    [((("alpha", "big"),), "alpha"), ((("beta", float("nan")),), "beta"), ((("adaptive", "on"),), "adaptive"),
     ((("adaptive_beta", True),), "adaptive_beta"), ((("ratio_min", 0.0),), "ratio_min")],
)
def test_bad_options_raise_naming_the_option(options, name):
    with pytest.raises(ValueError, match=name):
        _mixer(*options)


def test_bfloat16_forward_is_finite_and_close():
    options = (("alpha", 0.9), ("beta", 3.0), ("adaptive", "dev"), ("adaptive_beta", True))
    m32, m16 = _mixer(*options), _mixer(*options, compute_dtype="bfloat16")
    y16, _ = m16(_x(6).astype(jnp.bfloat16), positions=POS)
    y32, _ = m32(_x(6), positions=POS)
    assert y16.dtype == jnp.bfloat16 and bool(jnp.isfinite(y16).all())
    np.testing.assert_allclose(_np(y16), _np(y32), atol=0.15, rtol=0.15)
