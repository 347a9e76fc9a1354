"""The GOAT mixer: the folded channels against a float64 explicit-bias prior, relativity of κ, reductions
to plain attention, init modes, ALiBi slopes, options and bf16. Model-level checks (decode = forward,
packed = padded, causality, ...) run in tests/zoo/test_conformance.py for every CONFORMANCE_OPTIONS entry.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.mixers.attention import Attention
from icml26zoo.mixers.goat import GOATAttention, alibi_slopes, fourier_frequencies, sink_features
from icml26zoo.models import ModelConfig

pytestmark = pytest.mark.usefixtures("fast_compile")

F32 = {"atol": 1e-5, "rtol": 1e-5}
CFG = ModelConfig(mixer="goat", vocab_size=64, d_model=32, num_layers=1, num_heads=4, num_kv_heads=2, max_seq_len=32)
B, T = 2, 7


def _mixer(*options, seed=0, randomize=True, **overrides) -> GOATAttention:
    """A GOAT mixer; randomize=True makes every prior parameter nonzero so no term can hide."""
    m = GOATAttention(dataclasses.replace(CFG, mixer_options=tuple(options), **overrides), rngs=nnx.Rngs(seed))
    if randomize:
        keys = iter(jax.random.split(jax.random.key(seed + 100), 16))
        for name in ("lambda_sym", "lambda_asym", "mlp_w1", "mlp_b1", "mlp_w2", "mlp_b2", "sink_gain", "sink_bump"):
            if getattr(m, name, None) is not None:
                param = getattr(m, name)
                param.value = 0.5 * jax.random.normal(next(keys), param.value.shape)
    return m


def _x(seed=0):
    return jax.random.normal(jax.random.key(seed), (B, T, CFG.d_model))


def _positions(offset=0):
    return jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32) + offset, (B, T))


def _np(a):
    return np.asarray(a, np.float64)


def _prior_np(m: GOATAttention, pos: np.ndarray) -> np.ndarray:
    """float64 κ_g(i − j) + u_g(j) − s·softplus(ρ_g)(i − j), computed directly: [H, T, T] for one row."""
    o, group = m.options, m.num_heads // m.num_kv_heads
    lag = pos[:, None] - pos[None, :]
    prior = np.zeros((m.num_kv_heads, len(pos), len(pos)))
    if o.pos_rank:
        w = fourier_frequencies(o.pos_rank)
        a, b = _np(m.lambda_sym.value), _np(m.lambda_asym.value)
        prior += np.einsum("gr,ijr->gij", a, np.cos(lag[..., None] * w)) + np.einsum(
            "gr,ijr->gij", b, np.sin(lag[..., None] * w))
    if o.key_bias:
        nu, t_train = fourier_frequencies(o.abs_rank), o.training_seq_len
        phi = np.concatenate([np.cos(pos[:, None] * nu), np.sin(pos[:, None] * nu), pos[:, None] / t_train,
                              np.log1p(pos[:, None]) / np.log1p(t_train)], 1)
        hidden = phi @ _np(m.mlp_w1.value) + _np(m.mlp_b1.value)
        mlp = (hidden / (1 + np.exp(-hidden))) @ _np(m.mlp_w2.value) + _np(m.mlp_b2.value)  # [T, 1]
        u = o.prior_scale * (_np(m.sink_gain.value)[:, None] * mlp[:, 0] + np.outer(_np(m.sink_bump.value), pos == 0))
        slope = o.prior_scale * np.log1p(np.exp(_np(m.recency_raw.value)))
        prior += u[:, None, :] - slope[:, None, None] * lag
    return np.repeat(prior, group, axis=0)


def _folded_logits(m: GOATAttention, x, pos):
    """q_total · k_total + recency bias from the module: [B, H, T, T] float64 (no mask)."""
    q, k, _ = m.augmented_qkv(x, pos)
    k = jnp.repeat(k, m.num_heads // m.num_kv_heads, axis=2)
    logits = _np(jnp.einsum("bthd,bshd->bhts", q, k, precision=jax.lax.Precision.HIGHEST))
    bias = m.recency_bias(pos, pos)
    return logits if bias is None else logits + _np(bias)


@pytest.mark.parametrize("options", [(("pos_rank", 3),), (("pos_rank", 2), ("prior_scale", 0.5)), (("pos_rank", 0),)])
def test_folded_logits_and_output_equal_explicit_prior(options):
    m, x, pos = _mixer(*options), _x(), _positions(offset=3)
    q = _np(m.q_proj(x)).reshape(B, T, 4, 8)
    k = np.repeat(_np(m.k_proj(x)).reshape(B, T, 2, 8), 2, axis=2)
    v = np.repeat(_np(m.v_proj(x)).reshape(B, T, 2, 8), 2, axis=2)
    dc = m.content_dim
    content = np.einsum("bthd,bshd->bhts", q[..., :dc], k[..., :dc]) / np.sqrt(dc)
    expected = content + _prior_np(m, np.arange(T) + 3.0)[None]
    np.testing.assert_allclose(_folded_logits(m, x, pos), expected, **F32)
    # Invariant 1: the SDPA path equals softmax(explicit logits + causal mask) V, then o_proj.
    logits = np.where(np.tril(np.ones((T, T), bool)), expected, -np.inf)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.einsum("bhts,bshd->bthd", probs, v).reshape(B, T, 32) @ _np(m.o_proj.kernel.value)
    y, _ = m(x, positions=pos)
    np.testing.assert_allclose(_np(y), out, atol=2e-5, rtol=2e-5)


def test_prior_is_relative_plus_key_only_sink():
    """Shifting all positions by δ changes the prior by a function of j only (the sink term u), and by
    nothing without the sink: κ and the recency bias depend on i − j alone."""
    x = _x(1)
    for key_bias in (True, False):
        m = _mixer(("pos_rank", 3), ("key_bias", key_bias))
        diff = _folded_logits(m, x, _positions(5)) - _folded_logits(m, x, _positions(0))
        np.testing.assert_allclose(diff, np.broadcast_to(diff[:, :, :1, :], diff.shape), atol=1e-5)
        if key_bias:
            assert np.abs(diff).max() > 1e-3  # u(j) is absolute, so the shift must be visible
        else:
            np.testing.assert_allclose(diff, 0.0, atol=1e-5)


def test_reduces_to_attention_without_prior_channels():
    """pos_rank = 0, key_bias = False: D_c = D and GOAT is plain attention (RoPE off via zero positions)."""
    goat = _mixer(("pos_rank", 0), ("key_bias", False))
    attn = Attention(dataclasses.replace(CFG, mixer="attention"), rngs=nnx.Rngs(7))
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        getattr(attn, name).kernel.value = getattr(goat, name).kernel.value
    x = _x(2)
    expected, _ = attn(x, positions=jnp.zeros((B, T), jnp.int32))  # RoPE at position 0 is the identity
    actual, _ = goat(x, positions=_positions(4))
    np.testing.assert_allclose(_np(actual), _np(expected), **F32)


def test_uniform_init_is_a_uniform_prior():
    """Uniform init: A = B = 0, the MLP's output 0, bump 0, slope ≈ 0, so only the D_c content channels act."""
    m = _mixer(("pos_rank", 2), ("init", "uniform"), randomize=False)
    assert float(jnp.abs(m.lambda_sym.value).max()) == 0.0 and float(jnp.abs(m.mlp_w2.value).max()) == 0.0
    x = _x(3)
    content = _folded_logits(m, x, _positions())
    prior = _prior_np(m, np.arange(T, dtype=np.float64))
    np.testing.assert_allclose(prior, 0.0, atol=1e-10)
    q, k, _ = m.augmented_qkv(x, _positions())
    assert float(jnp.abs(q[..., m.content_dim:m.content_dim + 4]).max()) == 0.0  # the A/B lanes are zero
    assert np.isfinite(content).all()


def test_seeded_init_and_alibi_slopes():
    np.testing.assert_allclose(alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    np.testing.assert_allclose(alibi_slopes(6), [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
    m = _mixer(("pos_rank", 2), randomize=False)
    np.testing.assert_allclose(np.log1p(np.exp(_np(m.recency_raw.value))), alibi_slopes(2), rtol=1e-5)
    assert float(jnp.abs(m.lambda_sym.value).max()) > 0 and float(jnp.abs(m.lambda_asym.value).max()) == 0
    np.testing.assert_allclose(fourier_frequencies(3), [1.0, 1e-2, 1e-4])
    phi = sink_features(jnp.asarray([0, 31]), 2, 31)
    np.testing.assert_allclose(_np(phi[1, -2:]), [1.0, 1.0], rtol=1e-6)  # j/T and log(1+j)/log(1+T) at j = T


@pytest.mark.parametrize(
    "option, value",
    [("pos_rank", 4), ("pos_rank", -1), ("init", "xavier"), ("key_bias", "yes"), ("abs_rank", 0),
     ("prior_scale", "big"), ("training_seq_len", 1.5)],
)
def test_bad_options_raise_naming_the_option(option, value):
    with pytest.raises(ValueError, match=option):
        _mixer((option, value), randomize=False)


def test_bfloat16_forward_is_finite_and_close():
    m32 = _mixer(("pos_rank", 2))
    m16 = _mixer(("pos_rank", 2), compute_dtype="bfloat16")
    y16, _ = m16(_x(4).astype(jnp.bfloat16), positions=_positions())
    y32, _ = m32(_x(4), positions=_positions())
    assert y16.dtype == jnp.bfloat16 and bool(jnp.isfinite(y16).all())
    np.testing.assert_allclose(_np(y16), _np(y32), atol=0.1, rtol=0.1)
