"""The causal long convolution: FFT (xla) vs the direct O(T²) sum, forward and gradients, odd lengths,
short filters, causality (the 2T padding), packed rows vs a per-segment loop, and bad inputs."""

from __future__ import annotations

import functools

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import tolerance

from icml26zoo.kernels import causal_long_conv, checked
from icml26zoo.kernels.long_conv import LongConvState, causal_long_conv_init, causal_long_conv_step

D = 3


def _make(rng: np.random.Generator, batch: int, length: int) -> dict[str, jax.Array]:
    """u [B, T, D] ~ N(0, 1) and a full-length filter h [T, D] ~ N(0, 1/T)."""
    u = jnp.asarray(rng.standard_normal((batch, length, D)), jnp.float32)
    h = jnp.asarray(rng.standard_normal((length, D)) / np.sqrt(length), jnp.float32)
    return {"u": u, "h": h}


def _segment_alone(inputs: dict[str, jax.Array], row: int, lo: int, hi: int) -> dict[str, jax.Array]:
    """One segment alone: its slice of u, and the filter cut to the segment (L <= T)."""
    return {"u": inputs["u"][row:row + 1, lo:hi], "h": inputs["h"][:hi - lo]}


CASE = harness.OpCase(
    name="long_conv",
    make_inputs=_make,
    reference=functools.partial(causal_long_conv, implementation="reference"),
    fast={"xla": functools.partial(causal_long_conv, implementation="xla")},
    differentiable=("u", "h"),
    time_inputs=("u",),
    state_input=None,
    returns_state=False,
    chunk_arg=None,
    slice_segment=_segment_alone,
    step=causal_long_conv_step,
    init_state=lambda inputs: causal_long_conv_init(*inputs["u"].shape),
)


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


# T = 1, 63 and 129 (the FFT pads to 2T; the packed path's blocks of 64 run below). Each case compiles the
# direct sum's and the FFT's VJP; the float64 check and the decode forward read these programs.
@pytest.mark.parametrize("length", [1, 63, 129])
def test_fft_equals_direct_forward_and_grads(length):
    harness.check_forward_and_grads(CASE, length, seed=length, tol=tolerance("long_conv").scaled(np.sqrt(length)))
    if length <= 100:
        inputs = harness.make_case_inputs(CASE, length, seed=length)
        y = harness.outputs(CASE, "xla", inputs)
        harness.assert_close(y, _numpy_direct(inputs["u"], inputs["h"]), tolerance("long_conv.float64"),
                             what="y vs float64")


def test_short_filter_and_bf16():
    u, h = _inputs(50, filter_len=7, seed=3)
    y = harness.jit(causal_long_conv)(u, h)
    harness.assert_close(y, _numpy_direct(u, h), tolerance("long_conv.float64"), what="short filter")
    yb = harness.jit(causal_long_conv)(u.astype(jnp.bfloat16), h.astype(jnp.bfloat16))
    assert yb.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(yb.astype(jnp.float32))))


def test_causal_no_circular_wraparound():
    """Perturbing u at s > t never changes y_t (padding only to T would wrap the future into the past)."""
    u, h = _inputs(40, seed=5)
    cut = 17
    conv = harness.jit(causal_long_conv)  # one compile for both calls
    y = conv(u, h)
    y2 = conv(u.at[:, cut:].add(10.0), h)
    harness.assert_close(y2[:, :cut], y[:, :cut], tolerance("long_conv.causal"), what="past outputs")
    assert float(jnp.abs(y2[:, cut:] - y[:, cut:]).max()) > 1e-2


def test_packed_equals_per_segment_loop():
    """Packed rows through the xla path = each segment alone in float64; packed gradients = the reference's."""
    bounds = [[0, 5, 40, 70], [0, 66, 70]]  # T = 70 > the xla block of 64: a segment crosses a block edge
    tol = tolerance("long_conv.packed")
    harness.check_forward_and_grads(CASE, 0, bounds=bounds, seed=7, tol=tol)
    # The packed forward read from the VJP just compiled.
    harness.check_packed_equals_loop(CASE, bounds, impl="xla", alone=_numpy_direct, seed=7, tol=tol, via_vjp=True)


def test_decode_equals_forward():
    """Token by token against the direct sum's forward (the T = 63 parity program)."""
    harness.check_decode_equals_forward(CASE, 63, tol=tolerance("long_conv.decode"), via_vjp=True)


def test_chunked_decode_equals_forward():
    """A prefill of 10 tokens in one step ([B, T', D] in, [B, T', D] out), then one token: the forward's outputs."""
    u, h = _inputs(16, seed=2)
    step = harness.jit(causal_long_conv_step)
    y_pre, state = step(u[:, :10], h, state=causal_long_conv_init(2, 16, D))
    assert y_pre.shape == (2, 10, D) and int(state.index) == 10
    y_next, state = step(u[:, 10], h, state=state)
    assert y_next.shape == (2, D) and int(state.index) == 11
    want = harness.jit(functools.partial(causal_long_conv, implementation="reference"))(u, h)
    got = jnp.concatenate([y_pre, y_next[:, None]], axis=1)
    harness.assert_close(got, want[:, :11], tolerance("long_conv.decode"), what="prefill + step")


def test_decode_bad_state_raises():
    u, h = _inputs(8)
    with pytest.raises(ValueError, match="`state.buffer`"):
        causal_long_conv_step(u[:, 0], h, state=causal_long_conv_init(3, 8, D))
    with pytest.raises(ValueError, match="`max_len`"):
        causal_long_conv_init(2, 0, D)
    with pytest.raises(ValueError, match="`u`"):
        causal_long_conv_step(u[0, 0], h, state=LongConvState(jnp.zeros((2, 8, D)), jnp.zeros((), jnp.int32)))


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


def test_decode_past_capacity_raises_eagerly_and_under_checked_jit():
    """Writing past `max_len` raises (the clamped write would return wrong outputs), naming the capacity and the
    position; under jit through `checked`."""
    u, h = _inputs(4)
    state = causal_long_conv_init(2, 3, D)
    _, full = causal_long_conv_step(u[:, :2], h, state=state)  # index 2 of 3
    with pytest.raises(ValueError, match=r"causal_long_conv_step: writing 2 token\(s\) at position 2 .*capacity 3"):
        causal_long_conv_step(u[:, :2], h, state=full)
    step = harness.jit(checked(causal_long_conv_step))
    jax.block_until_ready(step(u[:, :2], h, state=state))
    with pytest.raises(Exception, match=r"causal_long_conv_step: writing 2 token\(s\) at position 2 .*capacity 3"):
        jax.block_until_ready(step(u[:, :2], h, state=full))


def test_numpy_inputs_on_every_path():
    """NumPy u and h are accepted like jax arrays (the blocked "direct" path indexed a NumPy h with tracers)."""
    u, h = _inputs(5)
    want = causal_long_conv(u, h, implementation="reference")
    for impl in ("direct", "xla"):
        got = causal_long_conv(np.asarray(u), np.asarray(h), implementation=impl)
        harness.assert_close(got, want, tolerance("long_conv"), what=f"{impl} on NumPy inputs")
