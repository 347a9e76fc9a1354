"""The Mamba1 mixer: a float64 reference of the whole layer (segments included), decode in chunks = forward,
initialization, options, bfloat16. The model-level checks (decode = forward, packed = padded, causality, ...)
run in tests/zoo/test_conformance.py.
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

from icml26zoo.mixers.mamba import Mamba
from icml26zoo.models import ModelConfig
from icml26zoo.registry import MIXERS

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = mh.small_config(mixer="mamba")
_mixer = functools.partial(mh.build_mixer, Mamba, CFG)
_inputs = functools.partial(mh.random_inputs, CFG.d_model, draw_dtype=jnp.float32)


def _layer_reference(m: Mamba, x, segments) -> np.ndarray:
    """The Mamba1 layer (`mamba_simple.py`) as a plain float64 per-token loop, conv and state reset per segment."""
    silu = lambda v: v / (1.0 + np.exp(-v))
    x = np.asarray(x, np.float64)
    di, n, r = m.d_inner, m.state_size, m.dt_rank
    xs, z = np.split(x @ mh.f64(m.in_proj.kernel), [di], axis=-1)
    w, bias = mh.f64(m.conv_weight), mh.f64(m.conv_bias)
    width = w.shape[0]
    conv = np.zeros(xs.shape) + bias
    for b in range(B):
        for t in range(T):
            for lag in range(width):
                if t - lag >= 0 and segments[b, t - lag] == segments[b, t]:
                    conv[b, t] += w[width - 1 - lag] * xs[b, t - lag]
    xs = silu(conv)
    proj = xs @ mh.f64(m.x_proj.kernel)
    dt_low, bm, cm = proj[..., :r], proj[..., r : r + n], proj[..., r + n :]
    dt = np.logaddexp(0.0, dt_low @ mh.f64(m.dt_proj.kernel) + mh.f64(m.dt_proj.bias))  # [B, T, d_inner]
    a = -np.exp(mh.f64(m.A_log))
    y = np.zeros((B, T, di))
    for b in range(B):
        h = np.zeros((di, n))
        for t in range(T):
            if t > 0 and segments[b, t] != segments[b, t - 1]:
                h = np.zeros((di, n))
            h = np.exp(dt[b, t][:, None] * a) * h + (dt[b, t] * xs[b, t])[:, None] * bm[b, t][None, :]
            y[b, t] = h @ cm[b, t] + mh.f64(m.D) * xs[b, t]
    return (y * silu(z)) @ mh.f64(m.out_proj.kernel)


def test_registered_and_init():
    assert MIXERS.get("mamba") is Mamba
    m = _mixer()
    assert m.dt_rank == 2 and m.d_inner == 64  # ceil(32 / 16), expand 2
    np.testing.assert_allclose(-np.exp(mh.f64(m.A_log))[5], -np.arange(1, 17))  # S4D-real
    dt0 = np.logaddexp(0.0, mh.f64(m.dt_proj.bias))
    assert (dt0 >= 1e-4 - 1e-9).all() and (dt0 <= 0.1 + 1e-6).all()
    assert np.abs(mh.f64(m.dt_proj.kernel)).max() <= m.dt_rank**-0.5


@pytest.mark.parametrize("options", [(), (("state_size", 4), ("conv_size", 3), ("chunk_size", 16), ("dt_rank", 3))],
                         ids=["default", "n4-conv3-chunk16-rank3"])
def test_layer_matches_float64_reference(options):
    m = _mixer(*options)
    # Train-like parameters instead of the init's tiny Δ, so that the decays and the conv matter.
    m.dt_proj.bias[...] = m.dt_proj.bias[...] + 3.0
    x, pos = _inputs(1)
    want = _layer_reference(m, x, SEGMENTS)
    np.testing.assert_allclose(mh.mixer_output(m, x, jnp.asarray(SEGMENTS), pos), want, **F32)
    # The segments matter: without them the second segments differ.
    assert np.abs(np.asarray(mh.mixer_output(m, x, None, pos)) - want).max() > 1e-3


def test_decode_in_chunks_equals_forward():
    m = _mixer(("chunk_size", 16))
    m.dt_proj.bias[...] = m.dt_proj.bias[...] + 3.0
    x, pos = _inputs(2)
    full = mh.mixer_output(m, x, None, pos)
    y, cache = mh.decode_in_chunks(m, x, pos, m.init_cache(B, T, jnp.float32), (1, 4, 1, 1, 3))
    np.testing.assert_allclose(y, full, **F32)
    assert cache["ssm"].dtype == jnp.float32 and cache["ssm"].shape == (B, m.d_inner, m.state_size)


@pytest.mark.parametrize(
    "option, value",
    [("expand", 0), ("state_size", 1.5), ("dt_rank", -1), ("conv_size", True), ("chunk_size", 10),
     ("implementation", "pallas"), ("dt_min", 0.0), ("dt_max", "big"), ("no_such_option", 1)],
)
def test_bad_options_raise(option, value):
    with pytest.raises(ValueError, match=repr(option)):
        _mixer((option, value))


def test_dt_min_above_dt_max_raises():
    with pytest.raises(ValueError, match="'dt_min'"):
        _mixer(("dt_min", 0.5), ("dt_max", 0.1))


def test_bfloat16_finite_and_close():
    m = _mixer(compute_dtype="bfloat16")
    x, pos = _inputs(3)
    y = mh.mixer_output(m, x.astype(jnp.bfloat16), jnp.asarray(SEGMENTS), pos)
    assert y.dtype == jnp.bfloat16 and np.isfinite(np.asarray(y, np.float32)).all()
    want = _layer_reference(m, x, SEGMENTS)
    assert np.abs(np.asarray(y, np.float64) - want).max() <= 0.05 * max(np.abs(want).max(), 1.0)


@pytest.mark.parametrize("scan_layers", [True, False])
def test_backbone_without_mlp_is_the_mixer_stack(scan_layers):
    """mlp_dim=0 (Mamba's own backbone, EDEN presets): blocks hold no MLP, and decoding still equals the forward."""
    from icml26zoo.models import build_model, count_params

    cfg = ModelConfig(mixer="mamba", vocab_size=32, d_model=16, num_layers=2, num_heads=2, num_kv_heads=2,
                      max_seq_len=16, mlp_dim=0, scan_layers=scan_layers)
    model = build_model(cfg, rngs=nnx.Rngs(0))
    with_mlp = build_model(dataclasses.replace(cfg, mlp_dim=8), rngs=nnx.Rngs(0))
    mlp_and_norm = 2 * (3 * 16 * 8 + 16)
    assert count_params(with_mlp) - count_params(model) == mlp_and_norm
    tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, 32)
    full = model(tokens)
    step, cache = [], model.init_cache(2)
    for t in range(9):
        logits, cache = model.decode(tokens[:, t : t + 1], cache)
        step.append(logits)
    np.testing.assert_allclose(np.asarray(jnp.concatenate(step, axis=1)), np.asarray(full), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="mlp_dim"):
        ModelConfig(mlp_dim=-1)
