"""The causal long convolution: FFT (xla) vs the direct O(T²) sum, forward and gradients, odd lengths,
short filters, causality (the 2T padding), packed rows vs a per-segment loop, and bad inputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import causal_long_conv

D = 3


def _inputs(length: int, filter_len: int | None = None, seed: int = 0, batch: int = 2):
    ku, kh = jax.random.split(jax.random.key(seed))
    u = jax.random.normal(ku, (batch, length, D), jnp.float32)
    h = jax.random.normal(kh, (filter_len or length, D), jnp.float32) / np.sqrt(length)
    return u, h


def _numpy_direct(u, h) -> np.ndarray:
    """float64 loop oracle, independent of the jnp reference."""
    u, h = np.asarray(u, np.float64), np.asarray(h, np.float64)
    y = np.zeros_like(u)
    for t in range(u.shape[1]):
        for s in range(max(0, t - h.shape[0] + 1), t + 1):
            y[:, t] += h[t - s] * u[:, s]
    return y


def test_one_segment_per_row_takes_the_fft_and_packed_rows_the_exact_sum():
    """With segment_ids, a batch of single-segment rows gives exactly the FFT result (the run-time switch);
    as soon as one row is packed, the whole batch takes the exact masked sum."""
    u, h = _inputs(100, seed=5)
    fft = causal_long_conv(u, h, implementation="xla")
    one_each = jnp.array([[3] * 100, [7] * 100], jnp.int32)
    np.testing.assert_array_equal(np.asarray(causal_long_conv(u, h, segment_ids=one_each, implementation="xla")),
                                  np.asarray(fft))
    packed = one_each.at[1, 60:].set(8)
    exact = causal_long_conv(u, h, segment_ids=packed, implementation="direct")
    np.testing.assert_array_equal(np.asarray(causal_long_conv(u, h, segment_ids=packed, implementation="xla")),
                                  np.asarray(exact))


@pytest.mark.parametrize("length", [1, 63, 100, 257])
def test_fft_equals_direct_forward_and_grads(length):
    u, h = _inputs(length, seed=length)
    cot = jax.random.normal(jax.random.key(99), u.shape, jnp.float32)
    outs = {}
    for impl in ("reference", "xla"):
        def loss(u, h, impl=impl):
            return jnp.sum(causal_long_conv(u, h, implementation=impl) * cot)
        outs[impl] = (causal_long_conv(u, h, implementation=impl), *jax.grad(loss, argnums=(0, 1))(u, h))
    scale = {"atol": 2e-5 * np.sqrt(length), "rtol": 1e-5}
    for ref, fft in zip(outs["reference"], outs["xla"], strict=True):
        np.testing.assert_allclose(np.asarray(fft), np.asarray(ref), **scale)
    if length <= 100:
        np.testing.assert_allclose(np.asarray(outs["xla"][0]), _numpy_direct(u, h), atol=1e-5, rtol=1e-5)


def test_short_filter_and_bf16():
    u, h = _inputs(50, filter_len=7, seed=3)
    y = causal_long_conv(u, h)
    np.testing.assert_allclose(np.asarray(y), _numpy_direct(u, h), atol=1e-5, rtol=1e-5)
    yb = causal_long_conv(u.astype(jnp.bfloat16), h.astype(jnp.bfloat16))
    assert yb.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(yb.astype(jnp.float32))))


def test_causal_no_circular_wraparound():
    """Perturbing u at s > t never changes y_t (padding only to T would wrap the future into the past)."""
    u, h = _inputs(40, seed=5)
    cut = 17
    y = causal_long_conv(u, h)
    y2 = causal_long_conv(u.at[:, cut:].add(10.0), h)
    # FFT round-off grows with the perturbation (~1e-5 here); a circular leak would be O(1)
    np.testing.assert_allclose(np.asarray(y2[:, :cut]), np.asarray(y[:, :cut]), atol=1e-4)
    assert float(jnp.abs(y2[:, cut:] - y[:, cut:]).max()) > 1e-2


def test_packed_equals_per_segment_loop():
    length = 70  # > the xla block of 64: a segment crosses a block edge
    u, h = _inputs(length, seed=7)
    bounds = [[0, 5, 40, 70], [0, 66, 70]]
    seg = np.zeros((2, length), np.int32)
    for row, edges in enumerate(bounds):
        for k, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
            seg[row, a:b] = k + 1
    packed = causal_long_conv(u, h, segment_ids=jnp.asarray(seg), implementation="xla")
    for row, edges in enumerate(bounds):
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            alone = _numpy_direct(u[row : row + 1, a:b], h[: b - a])
            np.testing.assert_allclose(np.asarray(packed[row : row + 1, a:b]), alone, atol=2e-5, rtol=1e-5)
    cot = jax.random.normal(jax.random.key(1), u.shape, jnp.float32)
    grads = [jax.grad(lambda u, h, i=i: jnp.sum(causal_long_conv(u, h, segment_ids=jnp.asarray(seg),
                                                                  implementation=i) * cot), (0, 1))(u, h)
             for i in ("reference", "xla")]
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("u_shape", "h_shape", "seg_shape", "name"),
    [
        ((2, 8), (8, D), None, "`u`"),
        ((2, 8, D), (9, D), None, "`h`"),
        ((2, 8, D), (8, D + 1), None, "`h`"),
        ((2, 8, D), (8,), None, "`h`"),
        ((2, 8, D), (8, D), (2, 7), "`segment_ids`"),
    ],
)
def test_bad_shapes_raise(u_shape, h_shape, seg_shape, name):
    seg = None if seg_shape is None else jnp.zeros(seg_shape, jnp.int32)
    with pytest.raises(ValueError, match=name):
        causal_long_conv(jnp.zeros(u_shape), jnp.zeros(h_shape), segment_ids=seg)


def test_bad_dtype_and_implementation_raise():
    u, h = _inputs(8)
    with pytest.raises(ValueError, match="`segment_ids`"):
        causal_long_conv(u, h, segment_ids=jnp.zeros((2, 8), jnp.float32))
    with pytest.raises(ValueError, match="`u`"):
        causal_long_conv(u.astype(jnp.int32), h)
    with pytest.raises(ValueError, match="implementation"):
        causal_long_conv(u, h, implementation="pallas")
