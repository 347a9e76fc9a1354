"""The Hyena mixer: implicit filter shape and decay window, the layer vs a float64 numpy reference, cached
decode in chunks vs the forward, the FFT path vs the direct path, bad options, bfloat16. The model-level
checks (causality, packed = padded, ...) run in tests/zoo/test_conformance.py."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.mixers.hyena import Hyena, decay_rates
from icml26zoo.models import ModelConfig

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = ModelConfig(mixer="hyena", vocab_size=64, d_model=8, num_layers=1, num_heads=2, num_kv_heads=2, max_seq_len=16)
B, T = 2, 10


def _mixer(*options, **overrides) -> Hyena:
    return Hyena(dataclasses.replace(CFG, mixer_options=tuple(options), **overrides), rngs=nnx.Rngs(0))


def _x(dtype=jnp.float32):
    return jax.random.normal(jax.random.key(1), (B, T, CFG.d_model), jnp.float32).astype(dtype)


def _pos():
    return jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))


def test_filter_shape_and_decay_window():
    m = _mixer(("order", 3))
    assert m.hyena_filter().shape == (CFG.max_seq_len, 2, CFG.d_model)
    assert m.hyena_filter(5).shape == (5, 2, CFG.d_model)
    assert m.hyena_filter(100).shape == (CFG.max_seq_len, 2, CFG.d_model)  # l_filter = min(L, L_max)
    rates = np.asarray(decay_rates(16))
    t = np.linspace(0, 1, 16)
    window = np.exp(-t[:, None] * rates[None])
    assert np.all(np.diff(window, axis=0) < 0)  # monotone in t for every channel
    np.testing.assert_allclose(window[-1, [0, -1]], [1e-2 ** (1 / 1.5), 1e-2 ** (1 / 0.3)], rtol=1e-5)


def _reference(m: Hyena, x: np.ndarray) -> np.ndarray:
    p = lambda v: np.asarray(v[...], np.float64)  # noqa: E731
    d = CFG.d_model
    proj = x @ p(m.in_proj.kernel) + p(m.in_proj.bias)
    w, cb = p(m.conv_weight), p(m.conv_bias)
    conv = np.zeros_like(proj) + cb
    for t in range(T):
        for lag in range(w.shape[0]):
            if t - lag >= 0:
                conv[:, t] += w[w.shape[0] - 1 - lag] * proj[:, t - lag]
    x0, x1, v = conv[..., :d], conv[..., d : 2 * d], conv[..., 2 * d :]
    h = np.asarray(m.hyena_filter(T), np.float64)[:, 0]
    u = v * x1
    y = np.zeros_like(u)
    for t in range(T):
        for s in range(t + 1):
            y[:, t] += h[t - s] * u[:, s]
    y = y + p(m.filter_bias)[0] * u
    return (y * x0) @ p(m.out_proj.kernel) + p(m.out_proj.bias)


@pytest.mark.parametrize("impl", ["direct", "xla"])
def test_layer_matches_float64_reference(impl):
    m = _mixer(("implementation", impl))
    x = _x()
    y, _ = m(x, positions=_pos())
    np.testing.assert_allclose(np.asarray(y), _reference(m, np.asarray(x, np.float64)), atol=1e-4, rtol=1e-4)


def test_decode_in_chunks_equals_forward():
    m = _mixer()
    x = _x()
    full, _ = m(x, positions=_pos())
    cache, outs, start = m.init_cache(B, CFG.max_seq_len, jnp.float32), [], 0
    for size in (4, 1, 3, 2):
        y, cache = m(x[:, start : start + size], positions=_pos()[:, start : start + size], cache=cache)
        outs.append(y)
        start += size
    assert int(cache["index"]) == T
    np.testing.assert_allclose(np.asarray(jnp.concatenate(outs, 1)), np.asarray(full), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("option", "value"),
    [("order", 1), ("emb_dim", 4), ("filter_order", 0), ("short_filter_order", True), ("implementation", "pallas"),
     ("bogus", 1)],
)
def test_bad_options_raise(option, value):
    with pytest.raises(ValueError, match=option):
        _mixer((option, value))


def test_bfloat16_finite():
    m = _mixer(compute_dtype="bfloat16")
    y, _ = m(_x(jnp.bfloat16), positions=_pos())
    assert y.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(y.astype(jnp.float32))))
