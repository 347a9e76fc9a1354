"""The Momentum DeltaNet mixer: a float64 reference of the whole layer, the α ≤ cos²θ, β ≤ sin²θ constraint
under extreme pre-activations, chunked prefill + single steps against the full forward, options and bf16.
The model-level checks (decode = forward, packed = padded, causality, ...) run in test_conformance.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mixer_helpers as mh
import numpy as np
import pytest
from flax import nnx
from mixer_helpers import F32, SEGMENTS, B

from icml26zoo.mixers.mdn import MomentumDeltaNet
from icml26zoo.registry import MIXERS

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = mh.small_config(mixer="mdn")
# Non-default everything: d_v = 2·d_k, a shorter conv, 16-token chunks (T = 20 crosses a chunk boundary)
# and the 1B-scale momentum floor and η temperature.
OTHER = (("expand_v", 2), ("conv_size", 2), ("chunk_size", 16), ("min_log_mu", -1.0), ("tau_factor", 8.0))
GATES = ("a_proj", "b_proj", "m_proj", "e_proj")


_mixer = functools.partial(mh.build_mixer, MomentumDeltaNet, CFG)


def _lively(mixer, seed=20):
    """O(1) gate pre-activations (the N(0, 0.02) init leaves η ≈ 1, β ≈ ½·sin²θ): every gate, the μ floor
    and the α/β constraint then act across their ranges."""
    for i, name in enumerate(GATES):
        kernel = getattr(mixer, name).kernel
        kernel[...] = 0.5 * jax.random.normal(jax.random.key(seed + i), kernel.shape)
    return mixer


_inputs = functools.partial(mh.random_inputs, CFG.d_model)


@nnx.jit
def _gates(mixer, x):
    return mixer.gates(x)


def _np(a) -> np.ndarray:
    return np.asarray(a[...] if hasattr(a, "value") else a, np.float64)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _reference_gates(mixer, x):
    """float64 MDN gates (the authors' code) with the literal θ = arctan(η·c): (α, μ, β, η) each [B, T, H]."""
    softplus = lambda z: np.logaddexp(0.0, z)  # noqa: E731
    pre = {name: x @ _np(getattr(mixer, name).kernel) for name in GATES}
    log_alpha_raw = -np.exp(_np(mixer.A_log)) * softplus(pre["a_proj"] + _np(mixer.dt_bias))
    log_mu = np.maximum(-np.exp(_np(mixer.Mu_log)) * softplus(pre["m_proj"] + _np(mixer.mu_bias)),
                        mixer.options.min_log_mu)
    eta = 1.0 + np.tanh(pre["e_proj"] / np.sqrt(CFG.d_model / mixer.options.tau_factor))
    theta = np.arctan(eta * np.exp(_np(mixer.log_factor)))
    alpha = np.cos(theta) ** 2 * np.exp(log_alpha_raw)
    beta = np.sin(theta) ** 2 * _sigmoid(pre["b_proj"])
    return alpha, np.exp(log_mu), beta, eta


def _conv_reference(x, w):
    """float64 SiLU(causal depthwise conv) of x [B, T, C] with taps w [W, C] (one sequence per row)."""
    width, out = w.shape[0], np.zeros_like(x)
    for t in range(x.shape[1]):
        for back in range(min(width, t + 1)):
            out[:, t] += w[width - 1 - back] * x[:, t - back]
    return out * _sigmoid(out)


def _layer_reference(mixer, x) -> np.ndarray:
    """The whole layer in float64 NumPy, written from the MDN recurrence as wired in the layer."""
    x = np.asarray(x, np.float64)
    length, h, hk, dk = x.shape[1], CFG.num_heads, CFG.num_kv_heads, CFG.resolved_head_dim
    dv = mixer.value_dim

    def branch(name, heads, width):
        y = x @ _np(getattr(mixer, f"{name}_proj").kernel)
        return _conv_reference(y, _np(getattr(mixer, f"{name}_conv").weight)).reshape(B, length, heads, width)

    def l2(y):
        return y / np.sqrt(np.sum(y * y, -1, keepdims=True) + 1e-6)

    q_raw, k_raw, v = branch("q", hk, dk), branch("k", hk, dk), branch("v", h, dv)
    q = np.repeat(l2(q_raw - np.exp(_np(mixer.D_log))[:, None] * k_raw), h // hk, axis=2)
    k = np.repeat(l2(k_raw), h // hk, axis=2)
    alpha, mu, beta, eta = _reference_gates(mixer, x)
    s, m, o = np.zeros((B, h, dk, dv)), np.zeros((B, h, dk, dv)), np.zeros((B, length, h, dv))
    for t in range(length):
        p = alpha[:, t, :, None] * k[:, t]  # the decayed key predicts
        e = np.einsum("bhkv,bhk->bhv", s, p) - v[:, t]
        m = mu[:, t, :, None, None] * m + (eta[:, t, :, None] * k[:, t])[..., None] * e[..., None, :]
        s = alpha[:, t, :, None, None] * s - beta[:, t, :, None, None] * m
        o[:, t] = np.einsum("bhkv,bhk->bhv", s, q[:, t]) / np.sqrt(dk)
    gate = (x @ _np(mixer.g_proj.kernel)).reshape(B, length, h, dv)
    normed = o / np.sqrt(np.mean(o * o, -1, keepdims=True) + CFG.norm_eps) * _np(mixer.o_norm.scale)
    return (normed * _sigmoid(gate)).reshape(B, length, h * dv) @ _np(mixer.o_proj.kernel)


def test_registered():
    assert MIXERS.get("mdn") is MomentumDeltaNet


@pytest.mark.parametrize("options, length", [((), 10), (OTHER, 20)], ids=["defaults", "other_options"])
def test_layer_matches_float64_reference(options, length):
    mixer = _lively(_mixer(*options))
    x, positions = _inputs(1, length)
    y, cache = mh.apply_mixer(mixer, x, None, positions)
    assert cache is None and y.dtype == jnp.float32
    # The N(0, 0.02) output init keeps y small; compare at the conformance tolerance, relative to 1.
    np.testing.assert_allclose(y, _layer_reference(mixer, x), **F32)
    assert float(jnp.abs(y).max()) > 1e-4  # the check above is not vacuous
    mu = _reference_gates(mixer, np.asarray(x, np.float64))[1]
    assert mu.min() == pytest.approx(np.exp(mixer.options.min_log_mu))  # the μ floor was exercised


def test_constraint_holds_for_extreme_pre_activations():
    """±1e4 pre-activations saturate every gate; all stay finite with α ≤ cos²θ, β ≤ sin²θ, μ ≥ e^{min_log_mu}."""
    mixer = _lively(_mixer())
    mixer.log_factor[...] = jnp.array([-3.0, 0.0, 1.4, 4.0])  # c from 0.05 to 55 (init: log U(0, 4))
    x = 1e4 * jnp.sign(jax.random.normal(jax.random.key(2), (B, 16, CFG.d_model)))
    gates = _gates(mixer, x)
    pre = {n: np.asarray(getattr(mixer, n)(x)) for n in GATES}
    assert all(np.abs(p).max() > 1e4 for p in pre.values()) and min(np.abs(pre["e_proj"]).max(axis=(0, 1))) > 1e3
    for name, value in gates.items():
        assert value.dtype == jnp.float32 and value.shape == (B, 16, CFG.num_heads), name
        assert bool(jnp.all(jnp.isfinite(value))), name
    eta = np.asarray(gates["eta"], np.float64)
    theta = np.arctan(eta * np.exp(_np(mixer.log_factor)))
    alpha, beta = np.exp(np.asarray(gates["g"], np.float64)), np.asarray(gates["beta"], np.float64)
    assert np.all(gates["g"] <= 0) and np.all(alpha <= np.cos(theta) ** 2 * (1 + 1e-6))
    assert np.all(beta >= 0) and np.all(beta <= np.sin(theta) ** 2 * (1 + 1e-6))
    assert np.all(alpha + beta <= 1 + 1e-6) and np.all((eta >= 0) & (eta <= 2))
    assert np.all(gates["log_mu"] >= -2.0) and np.all(gates["log_mu"] <= 0)
    assert eta.min() < 0.01 and eta.max() > 1.99  # both saturations of η = 1 + tanh were reached
    # The bound is attained where sigmoid(W_b x) saturates to 1 and the decay input to −∞ (softplus → 0).
    np.testing.assert_allclose(beta.max(axis=(0, 1)), (np.sin(theta) ** 2).max(axis=(0, 1)), rtol=1e-5)
    y, _ = mh.apply_mixer(mixer, x, None, _inputs(0, 16)[1])
    assert bool(jnp.all(jnp.isfinite(y)))  # the whole layer, not only the gates


def test_chunked_prefill_and_steps_equal_forward():
    """Mixer-level decode: chunked prefills (one crossing a 16-token chunk) carry (S, M) and the conv
    states; single tokens go through the step op. Outputs and final states match the full forward."""
    mixer = _lively(_mixer(*OTHER))
    x, positions = _inputs(17, 22)
    expected, _ = mh.apply_mixer(mixer, x, None, positions)
    _, full_cache = mh.apply_mixer(mixer, x, None, positions, mixer.init_cache(B, 32, jnp.float32))
    # 3 compiles: T = 3, 1 and 17
    y, cache = mh.decode_in_chunks(mixer, x, positions, mixer.init_cache(B, 32, jnp.float32), (3, 1, 17, 1))
    np.testing.assert_allclose(y, expected, **F32)
    for name in ("state_s", "state_m"):
        assert cache[name].dtype == jnp.float32 and float(jnp.abs(cache[name]).max()) > 0
        np.testing.assert_allclose(cache[name], full_cache[name], **F32)
    np.testing.assert_array_equal(cache["conv_v"], full_cache["conv_v"])


def test_cache_shapes_and_wrong_cache_raises():
    mixer = _mixer(("expand_v", 2))
    cache = mixer.init_cache(B, 32, jnp.bfloat16)
    d = CFG.resolved_head_dim
    assert cache["state_s"].shape == cache["state_m"].shape == (B, CFG.num_heads, d, 2 * d)
    assert cache["state_m"].dtype == jnp.float32 and cache["conv_q"].dtype == jnp.bfloat16
    x, positions = _inputs(3, 1)
    with pytest.raises(ValueError, match="cache must have entries"):
        mixer(x, positions=positions, cache={**cache, "state_m": cache["state_m"][:, :2]})


@pytest.mark.parametrize(
    "options, match",
    [
        ((("allow_neg_eigval", True),), r"unknown mdn mixer option 'allow_neg_eigval'"),
        ((("conv_size", 1),), r"'conv_size' must be an integer >= 2"),
        ((("chunk_size", 48),), r"'chunk_size' must be one of"),
        ((("expand_v", 0),), r"'expand_v' must be an integer >= 1"),
        ((("min_log_mu", 0.0),), r"'min_log_mu' must be a finite number < 0"),
        ((("min_log_mu", float("-inf")),), r"'min_log_mu' must be a finite number < 0"),
        ((("tau_factor", -1.0),), r"'tau_factor' must be a finite number > 0"),
        ((("implementation", "pallas_triton"),), r"'implementation' must be None"),
    ],
)
def test_bad_option_raises_naming_it(options, match):
    with pytest.raises(ValueError, match=match):
        _mixer(*options)


def test_bfloat16_compute_forward_is_finite():
    """bf16 activations with packed segments stay finite (test_conformance compares bf16 with fp32)."""
    mixer = _lively(_mixer(compute_dtype="bfloat16"))
    x, positions = _inputs(14)
    y, _ = mh.apply_mixer(mixer, 100.0 * x.astype(jnp.bfloat16), jnp.asarray(SEGMENTS), positions)
    assert y.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(y)))
    assert float(jnp.abs(y.astype(jnp.float32)).max()) > 0
