"""Circulation attention: the concatenation trick against the materialized ℓ_α, the symmetric/skew
decomposition of the bilinear form, reductions (α = 1 → attention, α = 0 → symmetric logits), the blend
paths, the adaptive η_M against explicit norms, the stability measures against hand computations,
options and bf16, the non-causal (paper) mode and the per-layer stability measures. Model-level checks of
the causal mode run in tests/zoo/test_conformance.py; the non-causal mode cannot run there (it checks
causality and cache decoding), so its model-level checks are here.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.layers.circulation_stats import stability_measures, sym_skew_frobenius, symmetric_skew_parts
from icml26zoo.mixers.attention import Attention
from icml26zoo.mixers.circulation import (
    STABILITY_SUMMARIES,
    CirculationAttention,
    circulation_logits,
    reference_logits,
)
from icml26zoo.models import ModelConfig, build_model

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


def _masked_softmax_out(m, logits, x, causal=True):
    logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf) if causal else logits
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
     ((("adaptive_beta", True),), "adaptive_beta"), ((("ratio_min", 0.0),), "ratio_min"),
     ((("causal", "no"),), "causal")],
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


FULL_PATH = (("alpha", 0.9), ("beta", 3.0), ("adaptive", "dev"), ("adaptive_beta", True))


def test_non_causal_is_unmasked_symmetric_attention():
    """causal=False with α = 0: softmax over all positions of M_sym/√d (the paper's setting), float64 reference."""
    m, x = _mixer(("alpha", 0.0), ("causal", False)), _x(7)
    a = _per_head_a(m)
    xn = _np(x)
    m_sym = np.einsum("btc,hce,bse->bhts", xn, (a + a.transpose(0, 2, 1)) / 2, xn) / np.sqrt(8)
    np.testing.assert_allclose(_np(m(x, positions=POS)[0]), _masked_softmax_out(m, m_sym, x, causal=False),
                               atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("options", [(("alpha", 1.2),), FULL_PATH], ids=["skew", "blend-adaptive"])
def test_non_causal_reads_later_tokens_and_causal_does_not(options):
    """Changing the last token changes position 0 of the non-causal output, and no earlier position causally."""
    x = _x(8)
    x2 = x.at[:, -1].add(1.0)
    causal, bidirectional = _mixer(*options), _mixer(*options, ("causal", False))
    y, y2 = _np(causal(x, positions=POS)[0]), _np(causal(x2, positions=POS)[0])
    np.testing.assert_array_equal(y[:, :-1], y2[:, :-1])
    z, z2 = _np(bidirectional(x, positions=POS)[0]), _np(bidirectional(x2, positions=POS)[0])
    assert np.abs(z[:, 0] - z2[:, 0]).max() > 1e-3


@pytest.mark.parametrize("options", [(("alpha", 1.2),), FULL_PATH], ids=["skew", "blend-adaptive"])
def test_non_causal_segments_equal_separate_sequences(options):
    """Segment masking still applies: each packed segment's output equals that segment run alone."""
    m = _mixer(*options, ("causal", False))
    x = _x(9)
    segments = jnp.asarray([[1, 1, 1, 2, 2, 2]] * B, jnp.int32)
    packed = _np(m(x, segment_ids=segments, positions=POS)[0])
    for lo, hi in ((0, 3), (3, T)):
        alone = _np(m(x[:, lo:hi], positions=POS[:, : hi - lo])[0])
        np.testing.assert_allclose(packed[:, lo:hi], alone, atol=2e-5, rtol=2e-5)


def test_non_causal_model_runs_and_cannot_decode():
    """A whole non-causal LM: finite logits, position 0 reads the last token, no decode cache."""
    cfg = dataclasses.replace(CFG, mixer_options=(("alpha", 1.1), ("causal", False)))
    model = build_model(cfg, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(0), (B, T), 0, 64, dtype=jnp.int32)
    forward = jax.jit(lambda t: model(t))
    logits = forward(tokens)
    assert logits.shape == (B, T, 64) and bool(jnp.isfinite(logits).all())
    changed = forward(tokens.at[:, -1].set((tokens[:, -1] + 1) % 64))
    assert float(jnp.abs(changed[:, 0] - logits[:, 0]).max()) > 1e-4
    with pytest.raises(ValueError, match="causal=False"):
        model.init_cache(B, 16)
    causal_cache = _mixer(("alpha", 1.1)).init_cache(B, 16, jnp.float32)
    with pytest.raises(ValueError, match="cannot decode"):
        _mixer(("alpha", 1.1), ("causal", False))(_x()[:, :1], cache=causal_cache)


@pytest.mark.parametrize("causal", [True, False])
def test_retrieved_patterns_reproduce_the_forward(causal):
    """H_new from `retrieved_patterns`, projected by W_V and o_proj, is the blended forward's output."""
    m, x = _mixer(*FULL_PATH, ("causal", causal)), _x(10)
    h_new = _np(m.retrieved_patterns(x))
    wv = np.repeat(_np(m.v_proj.kernel.value).reshape(32, 2, 8), 2, axis=1)
    out = np.einsum("bthc,chd->bthd", h_new, wv).reshape(B, T, 32) @ _np(m.o_proj.kernel.value)
    np.testing.assert_allclose(_np(m(x, positions=POS)[0]), out, atol=2e-5, rtol=2e-5)


def test_layer_stability_equals_the_pure_measures():
    """`stability` = stability_measures per row on (H_new, X, W_Q, W_K) with GQA's KV head per query head,
    averaged over rows; η_M = 1 once W_K = W_Q makes every A_h symmetric."""
    m, x = _mixer(("alpha", 1.2), ("beta", 3.0)), _x(11)
    got = m.stability(x)
    assert set(got) == set(STABILITY_SUMMARIES)
    wq = _np(m.q_proj.kernel.value).reshape(32, 4, 8).transpose(1, 2, 0)
    wk = np.repeat(_np(m.k_proj.kernel.value).reshape(32, 2, 8), 2, axis=1).transpose(1, 2, 0)
    patterns = np.moveaxis(_np(m.retrieved_patterns(x)), 2, 1)
    rows = [stability_measures(*(jnp.asarray(a, jnp.float32) for a in (patterns[b], _np(x)[b], wq, wk)))
            for b in range(B)]
    for name in STABILITY_SUMMARIES:
        np.testing.assert_allclose(got[name], np.mean([np.mean(r[name]) for r in rows]), rtol=1e-5, atol=1e-6)
    assert got["eta_m"] < 0.999
    # Query heads 2g and 2g+1 share KV head g: W_Q,h = W_K,g makes every A_h symmetric.
    m.q_proj.kernel.value = jnp.repeat(m.k_proj.kernel.value.reshape(32, 2, 8), 2, axis=1).reshape(32, 32)
    assert abs(m.stability(x)["eta_m"] - 1.0) < 1e-5
