"""The Mamba2 mixer: a float64 reference of the whole layer (scalar and diagonal decay, groups, segments),
the short conv at segment boundaries and its decode state, Δ and decay ranges, diagonal → scalar, options,
bfloat16. The model-level checks (decode = forward, packed = padded, causality, ...) run in
tests/zoo/test_conformance.py for every CONFORMANCE_OPTIONS entry.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mixer_helpers as mh
import numpy as np
import pytest
from flax import nnx
from mixer_helpers import F32, SEGMENTS, B, T

from icml26zoo.layers.short_conv import short_conv
from icml26zoo.mixers.mamba2 import Mamba2
from icml26zoo.registry import MIXERS

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = mh.small_config(mixer="mamba2")
_mixer = functools.partial(mh.build_mixer, Mamba2, CFG)
_inputs = functools.partial(mh.random_inputs, CFG.d_model, draw_dtype=jnp.float32)


def _conv_reference(u, weight, bias, segments) -> np.ndarray:
    """u [B, T, C] float64 -> causal depthwise conv, zero outside each token's own segment."""
    width, out = weight.shape[0], np.zeros(u.shape) + bias
    for b in range(u.shape[0]):
        for t in range(u.shape[1]):
            for lag in range(width):
                s = t - lag
                if s >= 0 and segments[b, s] == segments[b, t]:
                    out[b, t] += weight[width - 1 - lag] * u[b, s]
    return out


def _layer_reference(m: Mamba2, x, segments) -> np.ndarray:
    """The Mamba2 layer as a plain float64 per-token recurrence (`mamba2_simple.py`), state reset per segment."""
    silu = lambda v: v / (1.0 + np.exp(-v))
    x = np.asarray(x, np.float64)
    h, p, n, g, di = m.num_heads, m.head_dim, m.state_size, m.num_groups, m.d_inner
    z, xbc = np.split(x @ mh.f64(m.in_proj.kernel), [di], axis=-1)
    xbc = silu(_conv_reference(xbc, mh.f64(m.conv_weight), mh.f64(m.conv_bias), segments))
    xs = xbc[..., :di].reshape(B, T, h, p)
    bm = np.repeat(xbc[..., di : di + g * n].reshape(B, T, g, n), h // g, axis=2)
    cm = np.repeat(xbc[..., di + g * n :].reshape(B, T, g, n), h // g, axis=2)
    dt = np.logaddexp(0.0, x @ mh.f64(m.dt_proj.kernel) + mh.f64(m.dt_bias))  # [B, T, H]
    a = np.broadcast_to((-np.exp(mh.f64(m.A_log))).reshape(h, -1), (h, n))  # scalar A: equal over n
    y = np.zeros((B, T, h, p))
    for b in range(B):
        state = np.zeros((h, p, n))
        for t in range(T):
            if t > 0 and segments[b, t] != segments[b, t - 1]:
                state = np.zeros((h, p, n))
            decay = np.exp(dt[b, t][:, None] * a)  # [H, N]
            state = state * decay[:, None, :] + (dt[b, t][:, None] * xs[b, t])[..., None] * bm[b, t][:, None, :]
            y[b, t] = np.einsum("hpn,hn->hp", state, cm[b, t]) + mh.f64(m.D)[:, None] * xs[b, t]
    return mh.norm_and_project_reference(y.reshape(B, T, di) * silu(z), m.norm, m.out_proj)


def test_registered():
    assert MIXERS.get("mamba2") is Mamba2


@pytest.mark.parametrize(
    "options",
    [(), (("decay", "diagonal"),), (("num_groups", 2), ("state_size", 8), ("conv_size", 3), ("chunk_size", 16))],
    ids=["scalar", "diagonal", "groups-conv3-chunk16"],
)
def test_layer_matches_float64_recurrence(options):
    m = _mixer(*options)
    x, pos = _inputs(1)
    expected = _layer_reference(m, x, SEGMENTS)
    np.testing.assert_allclose(mh.mixer_output(m, x, jnp.asarray(SEGMENTS), pos), expected, **F32)


def test_conv_matches_reference_and_never_crosses_segments():
    keys = jax.random.split(jax.random.key(2), 3)
    u = jax.random.normal(keys[0], (B, T, 6))
    weight, bias = jax.random.normal(keys[1], (4, 6)), jax.random.normal(keys[2], (6,))
    y, _ = jax.jit(short_conv)(u, weight, bias, segment_ids=jnp.asarray(SEGMENTS))
    expected = _conv_reference(np.asarray(u, np.float64), np.asarray(weight, np.float64), np.asarray(bias), SEGMENTS)
    np.testing.assert_allclose(y, expected, **F32)
    # Changing every token of the first segments leaves the later segments bit-identical.
    first = jnp.asarray(SEGMENTS == SEGMENTS[:, :1])[..., None]
    y2, _ = jax.jit(short_conv)(jnp.where(first, u + 5.0, u), weight, bias, segment_ids=jnp.asarray(SEGMENTS))
    np.testing.assert_array_equal(np.asarray(y2)[~np.asarray(first[..., 0])], np.asarray(y)[~np.asarray(first[..., 0])])
    assert float(jnp.abs(y2 - y).max()) > 1.0  # ... while the first segments did change


def test_conv_decode_state_equals_full_conv():
    keys = jax.random.split(jax.random.key(3), 3)
    u = jax.random.normal(keys[0], (B, T, 5))
    weight, bias = jax.random.normal(keys[1], (4, 5)), jax.random.normal(keys[2], (5,))
    full, full_state = short_conv(u, weight, bias)
    state, pieces, start = None, [], 0
    for size in (1, 3, 1, 2, 3):  # pieces shorter than the kernel too
        y, state = short_conv(u[:, start : start + size], weight, bias, state=state)
        pieces.append(y)
        start += size
    np.testing.assert_allclose(jnp.concatenate(pieces, axis=1), full, **F32)
    np.testing.assert_array_equal(state, u[:, -3:])  # the last K−1 inputs, oldest first
    np.testing.assert_array_equal(full_state, u[:, -3:])


@pytest.mark.parametrize("decay", ["scalar", "diagonal"])
def test_dt_positive_and_decays_in_unit_interval(decay):
    m = _mixer(("decay", decay))
    x, _ = _inputs(4)
    dt, log_a = m.discretize(x)
    assert log_a.shape == ((B, T, m.num_heads) if decay == "scalar" else (B, T, m.num_heads, m.state_size))
    assert dt.dtype == log_a.dtype == jnp.float32
    decay_values = np.asarray(jnp.exp(log_a))
    assert (np.asarray(dt) > 0).all() and (decay_values > 0).all() and (decay_values < 1).all()
    # Pre-activations of Δ far outside the init's N(0, ~1) range: Δ is tiny or huge, yet stays positive
    # and the log-decay negative and finite. (Below about −87 the float32 softplus underflows to 0: the
    # token is then skipped with decay exactly 1, still a valid input of the op, which needs log a <= 0.)
    extreme = _inputs(5, scale=15.0)[0]
    pre = np.abs(np.asarray(m.dt_proj(extreme) + m.dt_bias[...]))
    assert 20 < pre.max() < 80
    dt, log_a = m.discretize(extreme)
    assert np.isfinite(log_a).all() and (np.asarray(dt) > 0).all() and (np.asarray(log_a) < 0).all()


def test_diagonal_with_a_log_equal_across_n_equals_scalar():
    scalar, diagonal = _mixer(), _mixer(("decay", "diagonal"), seed=1)
    state = nnx.state(scalar, nnx.Param)
    state["A_log"] = nnx.Param(jnp.broadcast_to(scalar.A_log[...][:, None], diagonal.A_log.shape))
    nnx.update(diagonal, state)
    assert diagonal.A_log.shape == (scalar.num_heads, scalar.state_size)
    x, pos = _inputs(6)
    segments = jnp.asarray(SEGMENTS)
    expected = mh.mixer_output(scalar, x, segments, pos)
    np.testing.assert_allclose(mh.mixer_output(diagonal, x, segments, pos), expected, **F32)


@pytest.mark.parametrize(
    "options, match",
    [
        ((("decay", "full"),), r"'decay'.*\['scalar', 'diagonal'\].*'full'"),
        ((("state_dim", 8),), r"unknown mamba2 mixer option 'state_dim'"),
        ((("head_dim", 5),), r"'head_dim' must be a divisor of d_inner = expand \* d_model = 64"),
        ((("num_groups", 3),), r"'num_groups' must be a divisor of the number of heads H .* = 8"),
        ((("chunk_size", 48),), r"'chunk_size' must be one of"),
        ((("conv_size", 0),), r"'conv_size' must be an integer >= 1, got 0"),
        ((("expand", True),), r"'expand' must be an integer"),
        ((("implementation", "cuda"),), r"'implementation' must be None"),
        ((("dt_min", 0.5), ("dt_max", 0.1)), r"'dt_min' must be <= dt_max = 0.1"),
    ],
    ids=["decay", "unknown", "head_dim", "groups", "chunk", "conv", "expand", "impl", "dt-range"],
)
def test_bad_options_raise(options, match):
    with pytest.raises(ValueError, match=match):
        _mixer(*options)


def test_bad_cache_raises():
    m = _mixer()
    x, pos = _inputs(7)
    cache = m.init_cache(B, 32, jnp.float32)
    with pytest.raises(ValueError, match=r"segment_ids must be None when decoding"):
        m(x, segment_ids=jnp.asarray(SEGMENTS), positions=pos, cache=cache)
    with pytest.raises(ValueError, match=r"cache must have entries"):
        m(x, positions=pos, cache=m.init_cache(B + 1, 32, jnp.float32))


@pytest.mark.parametrize("decay", ["scalar", "diagonal"])
def test_bfloat16_forward_finite(decay):
    m = _mixer(("decay", decay), compute_dtype="bfloat16")
    x, pos = _inputs(8, dtype=jnp.bfloat16)
    y = mh.mixer_output(m, x, jnp.asarray(SEGMENTS), pos)
    assert y.dtype == jnp.bfloat16 and y.shape == (B, T, CFG.d_model)
    assert bool(jnp.isfinite(y.astype(jnp.float32)).all()) and float(jnp.abs(y.astype(jnp.float32)).max()) > 0
