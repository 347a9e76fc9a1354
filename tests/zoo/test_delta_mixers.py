"""The delta-rule mixers (DeltaNet, Gated DeltaNet, KDA): a float64 reference of the whole layer, the short
conv at segment boundaries and in decode, gate ranges, β = 0, grouped value heads, options and bf16.
The model-level checks (decode = forward, packed = padded, causality, ...) run in test_conformance.py for
every CONFORMANCE_OPTIONS entry.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import mixer_helpers as mh
import numpy as np
import pytest
from flax import nnx
from mixer_helpers import F32, SEGMENTS, B, T

from icml26zoo.layers.short_conv import ShortConv
from icml26zoo.mixers.delta_net import DeltaNet, GatedDeltaNet, KimiDeltaAttention
from icml26zoo.registry import MIXERS

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = mh.small_config()
CLASSES = {"deltanet": DeltaNet, "gated_deltanet": GatedDeltaNet, "kda": KimiDeltaAttention}


def _mixer(name, *options, seed=0, **overrides):
    return mh.build_mixer(CLASSES[name], CFG, *options, seed=seed, mixer=name, **overrides)


_inputs = functools.partial(mh.random_inputs, CFG.d_model)


@nnx.jit
def _conv(conv, x, segment_ids=None, state=None):
    return conv(x, segment_ids=segment_ids, state=state)


def _np(a) -> np.ndarray:
    return np.asarray(a[...] if hasattr(a, "value") else a, np.float64)


def _conv_reference(x, w, segment_ids=None):
    """float64 SiLU(causal depthwise conv): x [B, T, C], w [W, C]; taps never cross a segment."""
    width, length = w.shape[0], x.shape[1]
    out = np.zeros_like(x)
    for t in range(length):
        for back in range(width):
            s = t - back
            if s >= 0 and (segment_ids is None or np.all(segment_ids[:, s] == segment_ids[:, t])):
                out[:, t] += w[width - 1 - back] * x[:, s]
    return out / (1.0 + np.exp(-out))


def _layer_reference(mixer, x) -> np.ndarray:
    """The whole layer in float64 NumPy, one sequence per row, written from the papers' recurrences."""
    x = np.asarray(x, np.float64)
    h, hk, d = CFG.num_heads, CFG.num_kv_heads, CFG.resolved_head_dim

    def branch(name, heads):
        y = x @ _np(getattr(mixer, f"{name}_proj").kernel)
        return _conv_reference(y, _np(getattr(mixer, f"{name}_conv").weight)).reshape(B, T, heads, d)

    def l2(y):
        return np.repeat(y / np.sqrt(np.sum(y * y, -1, keepdims=True) + 1e-6), h // hk, axis=2)

    q, k, v = l2(branch("q", hk)), l2(branch("k", hk)), branch("v", h)
    beta = 1.0 / (1.0 + np.exp(-(x @ _np(mixer.b_proj.kernel))))
    g = np.zeros((B, T, h, d))
    softplus = lambda z: np.logaddexp(0.0, z)  # noqa: E731
    if isinstance(mixer, GatedDeltaNet):
        a = x @ _np(mixer.a_proj.kernel) + _np(mixer.dt_bias)
        g += (-np.exp(_np(mixer.A_log)) * softplus(a))[..., None]
    elif isinstance(mixer, KimiDeltaAttention):
        f = (x @ _np(mixer.f_down.kernel) @ _np(mixer.f_up.kernel)).reshape(B, T, h, d) + _np(mixer.dt_bias)
        g += -np.exp(_np(mixer.A_log))[:, None] * softplus(f)
    state, o = np.zeros((B, h, d, d)), np.zeros((B, T, h, d))
    for t in range(T):  # decay, then the delta update, then read out (fla's implementation order)
        state = np.exp(g[:, t])[..., None] * state
        error = v[:, t] - np.einsum("bhkv,bhk->bhv", state, k[:, t])
        state = state + beta[:, t, :, None, None] * k[:, t, ..., None] * error[..., None, :]
        o[:, t] = np.einsum("bhkv,bhk->bhv", state, q[:, t]) / np.sqrt(d)
    if isinstance(mixer, KimiDeltaAttention):
        gate = x @ _np(mixer.g_down.kernel) @ _np(mixer.g_up.kernel) + _np(mixer.g_up.bias)
        act = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    else:
        gate = x @ _np(mixer.g_proj.kernel)
        act = lambda z: z / (1.0 + np.exp(-z))  # noqa: E731
    normed = o / np.sqrt(np.mean(o * o, -1, keepdims=True) + CFG.norm_eps) * _np(mixer.o_norm.scale)
    out = normed * act(gate.reshape(B, T, h, d))
    return out.reshape(B, T, h * d) @ _np(mixer.o_proj.kernel)


def test_registered():
    for name, cls in CLASSES.items():
        assert MIXERS.get(name) is cls


@pytest.mark.parametrize("name", list(CLASSES))
def test_layer_matches_float64_reference(name):
    mixer = _mixer(name)
    x, positions = _inputs(1)
    y, cache = mh.apply_mixer(mixer, x, None, positions)
    assert cache is None and y.dtype == jnp.float32
    # The N(0, 0.02) init keeps y small; compare at the tolerance of the conformance table, relative to 1.
    np.testing.assert_allclose(y, _layer_reference(mixer, x), **F32)
    assert float(jnp.abs(y).max()) > 1e-4  # the check above is not vacuous


def test_kda_default_prefill_and_steps_equal_forward():
    """Mixer-level decode of the plain-gate KDA (the harness runs KDA with its flags on, see delta_net.py):
    chunked prefills carry the recurrent and conv states, single steps use the recurrent form."""
    mixer = _mixer("kda")
    x, positions = _inputs(17)
    expected, _ = mh.apply_mixer(mixer, x, None, positions)
    y, cache = mh.decode_in_chunks(mixer, x, positions, mixer.init_cache(B, 32, jnp.float32), (4, 1, 1, 4))
    np.testing.assert_allclose(y, expected, **F32)


def test_short_conv_matches_reference_and_never_crosses_a_segment():
    conv = ShortConv(6, 4, rngs=nnx.Rngs(0))
    conv.weight[...] = jax.random.normal(jax.random.key(1), conv.weight.shape)  # O(1) taps, not 0.02
    x = jax.random.normal(jax.random.key(2), (B, T, 6))
    y, state = _conv(conv, x, jnp.asarray(SEGMENTS))
    np.testing.assert_allclose(y[:1], _conv_reference(_np(x[:1]), _np(conv.weight), SEGMENTS[:1]), **F32)
    for row, cut in ((0, 4), (1, 7)):  # each segment alone gives the packed outputs
        first, _ = _conv(conv, x[row : row + 1, :cut])
        second, _ = _conv(conv, x[row : row + 1, cut:])
        np.testing.assert_allclose(y[row, :cut], first[0], **F32)
        np.testing.assert_allclose(y[row, cut:], second[0], **F32)
    # And by gradients: the output at a segment start does not see the previous segment at all.
    jac = jax.jit(jax.jacrev(lambda x: conv(x, segment_ids=jnp.asarray(SEGMENTS))[0][0, 4]))(x)  # [C, B, T, C]
    assert float(jnp.abs(jac[:, 0, :4]).max()) == 0.0 and float(jnp.abs(jac[:, 0, 4]).max()) > 0
    np.testing.assert_array_equal(state, x[:, -3:])


def test_short_conv_decode_state_equals_full_conv():
    conv = ShortConv(6, 4, rngs=nnx.Rngs(3))
    conv.weight[...] = jax.random.normal(jax.random.key(4), conv.weight.shape)
    x = jax.random.normal(jax.random.key(5), (B, T, 6))
    full, full_state = _conv(conv, x)
    state = jnp.zeros((B, 3, 6))
    pieces, start = [], 0
    for size in (2, 1, 1, 4, 2):  # shorter and longer than the W − 1 = 3 carried inputs
        y, state = _conv(conv, x[:, start : start + size], None, state)
        pieces.append(y)
        start += size
    np.testing.assert_allclose(jnp.concatenate(pieces, axis=1), full, **F32)
    np.testing.assert_array_equal(state, full_state)


def _scaled_inputs(scale):
    return jax.random.normal(jax.random.key(6), (B, T, CFG.d_model)) * scale


def test_gated_deltanet_decay_lies_in_unit_interval():
    mixer = _mixer("gated_deltanet")
    mixer.a_proj.kernel[...] = jax.random.normal(jax.random.key(7), mixer.a_proj.kernel.shape)
    g = mixer.log_decay(_scaled_inputs(1.0))
    assert g.dtype == jnp.float32 and g.shape == (B, T, CFG.num_heads)
    alpha = jnp.exp(g)
    assert bool(jnp.all((alpha > 0) & (alpha < 1)))
    extreme = mixer.log_decay(_scaled_inputs(1e3))  # saturated softplus: still a finite, non-positive log
    assert bool(jnp.all(jnp.isfinite(extreme) & (extreme <= 0)))


def test_kda_gates_and_safe_gate_bounds():
    plain, safe = _mixer("kda"), _mixer("kda", ("safe_gate", True))
    np.testing.assert_array_equal(safe.A_log[...], jnp.zeros(CFG.num_heads))  # fla's safe-gate init: A_log = 0
    assert bool(jnp.all(plain.A_log[...] >= 0))  # A ~ U(1, 16)
    for mixer in (plain, safe):  # pre-activations f + dt_bias ~ N(0, 1.6): both signs, no saturation
        mixer.f_down.kernel[...] = 0.1 * jax.random.normal(jax.random.key(8), mixer.f_down.kernel.shape)
        mixer.f_up.kernel[...] = jax.random.normal(jax.random.key(9), mixer.f_up.kernel.shape)
        mixer.dt_bias[...] = jnp.zeros_like(mixer.dt_bias[...])
    for scale in (1.0, 1e3):
        g_plain, g_safe = plain.log_decay(_scaled_inputs(scale)), safe.log_decay(_scaled_inputs(scale))
        assert g_plain.shape == g_safe.shape == (B, T, CFG.num_heads, CFG.resolved_head_dim)
        assert bool(jnp.all(jnp.isfinite(g_plain) & (g_plain <= 0)))
        assert bool(jnp.all((g_safe >= -5.0) & (g_safe <= 0)))
    g_safe = safe.log_decay(_scaled_inputs(1.0))
    assert bool(jnp.all((g_safe > -5.0) & (g_safe < 0)))  # open interval for moderate pre-activations
    assert float(g_safe.min()) < -2.5 and float(g_safe.max()) > -2.5  # both halves of the range are used


class _ZeroBeta(GatedDeltaNet):
    """Gated DeltaNet with β ≡ 0: the delta update writes nothing."""

    def beta(self, x):
        return jnp.zeros((*x.shape[:2], self.num_heads), jnp.float32)


def test_zero_beta_writes_nothing():
    """β = 0: from a zero state the layer outputs exactly 0 (norm of 0 is 0), and a prefill from a random
    state only decays it: S_T = exp(Σ_t g_t) S_0 per head, whatever the values."""
    mixer = _ZeroBeta(dataclasses.replace(CFG, mixer="gated_deltanet"), rngs=nnx.Rngs(9))
    x, positions = _inputs(10)
    y, _ = mh.apply_mixer(mixer, x, None, positions)
    np.testing.assert_array_equal(y, jnp.zeros_like(y))
    cache = mixer.init_cache(B, 32, jnp.float32)
    s0 = jax.random.normal(jax.random.key(11), cache["state"].shape)
    _, new_cache = mh.apply_mixer(mixer, x, None, positions, {**cache, "state": s0})
    decay = jnp.exp(jnp.sum(mixer.log_decay(x), axis=1))  # [B, H]
    np.testing.assert_allclose(new_cache["state"], decay[..., None, None] * s0, **F32)


def test_grouped_value_heads_share_query_and_key_heads():
    mixer = _mixer("deltanet")
    # O(1) q weights, so that Σq² ≫ the L2 eps (at the N(0, 0.02) init it is ~1e-5, close to eps = 1e-6).
    mixer.q_proj.kernel[...] = jax.random.normal(jax.random.key(15), mixer.q_proj.kernel.shape)
    mixer.q_conv.weight[...] = jnp.ones_like(mixer.q_conv.weight[...])
    q, k, v, _ = nnx.jit(lambda m, x: m._project_qkv(x, None, None))(mixer, _inputs(12)[0])
    assert q.shape == k.shape == v.shape == (B, T, CFG.num_heads, CFG.resolved_head_dim)
    np.testing.assert_array_equal(q[:, :, 0], q[:, :, 1])  # value heads 0, 1 read key head 0
    np.testing.assert_array_equal(k[:, :, 2], k[:, :, 3])
    assert float(jnp.abs(v[:, :, 0] - v[:, :, 1]).max()) > 0
    np.testing.assert_allclose(jnp.linalg.norm(q, axis=-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize(
    "name, options, match",
    [
        ("deltanet", (("gate", "full"),), r"unknown deltanet mixer option 'gate'"),
        ("gated_deltanet", (("safe_gate", True),), r"unknown gated_deltanet mixer option 'safe_gate'"),
        ("kda", (("conv_size", 1),), r"'conv_size' must be an integer >= 2"),
        ("kda", (("chunk_size", 48),), r"'chunk_size' must be one of"),
        ("deltanet", (("allow_neg_eigval", "yes"),), r"'allow_neg_eigval' must be a bool"),
        ("kda", (("safe_gate", 1),), r"'safe_gate' must be a bool"),
        ("gated_deltanet", (("implementation", "cuda"),), r"'implementation' must be None"),
    ],
)
def test_bad_option_raises_naming_it(name, options, match):
    with pytest.raises(ValueError, match=match):
        _mixer(name, *options)


def test_implementation_and_chunk_size_options_reach_the_op():
    """The recurrent reference and a 16-step chunking give the default (chunked XLA, C = 64) outputs."""
    x, positions = _inputs(16)
    segments = jnp.asarray(SEGMENTS)
    expected, _ = mh.apply_mixer(_mixer("gated_deltanet"), x, segments, positions)
    other = _mixer("gated_deltanet", ("implementation", "reference"), ("chunk_size", 16))
    assert other.options.implementation == "reference" and other.options.chunk_size == 16
    np.testing.assert_allclose(mh.apply_mixer(other, x, segments, positions)[0], expected, **F32)


def test_allow_neg_eigval_doubles_beta():
    plain, doubled = _mixer("deltanet"), _mixer("deltanet", ("allow_neg_eigval", True))
    x = _inputs(13)[0]
    np.testing.assert_allclose(doubled.beta(x), 2.0 * plain.beta(x), **F32)


@pytest.mark.parametrize("name", list(CLASSES))
def test_bfloat16_compute_forward_is_finite(name):
    """bf16 activations with packed segments stay finite (test_conformance compares bf16 with fp32)."""
    mixer = _mixer(name, compute_dtype="bfloat16")
    x, positions = _inputs(14)
    y, _ = mh.apply_mixer(mixer, 100.0 * x.astype(jnp.bfloat16), jnp.asarray(SEGMENTS), positions)
    assert y.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(y)))
    assert float(jnp.abs(y.astype(jnp.float32)).max()) > 0
