"""Selective scan (Mamba1, spec 06 §B.5): reference = chunked associative scan = float64 numpy, gradients,
packed segments, decode, long T, bad input.

Errors are max-normalized: max|got - want| / max(max|want|, 1), per output and per gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kernels
from kernels.selective_scan import selective_scan, selective_scan_step

# float32 tolerances (max-normalized). Both paths run float32 with per-step decays <= 1; they differ only
# in the order of the additions (sequential vs. a log-depth tree), observed <= 1e-6 on y, state and all
# gradients here; the table keeps ~5x headroom. Against float64 the reference's error is one float32
# rounding per step, observed <= 5e-7.
TOL = {"fwd": 5e-6, "grad": 1e-5, "float64": 2e-6}
B, D_IN, N = 2, 6, 4


def err(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1.0))


def _inputs(seqlen, seed=0, batch=B, strong=False):
    """u, delta [B,T,D_in], A [D_in,N] < 0, B, C [B,T,N], D [D_in], initial state [B,D_in,N] (float32)."""
    k = jax.random.split(jax.random.key(seed), 7)
    u = jax.random.normal(k[0], (batch, seqlen, D_IN))
    delta = jax.nn.softplus(jax.random.normal(k[1], (batch, seqlen, D_IN)) - (0.0 if strong else 1.0))
    a = -jnp.exp(jax.random.uniform(k[2], (D_IN, N), minval=-1.0, maxval=2.0 if strong else 1.0))
    b = jax.random.normal(k[3], (batch, seqlen, N))
    c = jax.random.normal(k[4], (batch, seqlen, N))
    d = jax.random.normal(k[5], (D_IN,))
    h0 = jax.random.normal(k[6], (batch, D_IN, N))
    return u, delta, a, b, c, d, h0


def _numpy64(u, delta, a, b, c, d, h0, segments=None):
    """The recurrence in float64 numpy, one step at a time, resetting at every segment start after t = 0."""
    u, delta, a, b, c, d, h = (np.asarray(z, np.float64) for z in (u, delta, a, b, c, d, h0))
    h, y = h.copy(), np.zeros(u.shape)
    for t in range(u.shape[1]):
        if segments is not None and t > 0:
            h[segments[:, t] != segments[:, t - 1]] = 0.0
        h = np.exp(delta[:, t, :, None] * a) * h + (delta[:, t] * u[:, t])[..., None] * b[:, t, None, :]
        y[:, t] = np.einsum("bdn,bn->bd", h, c[:, t]) + d * u[:, t]
    return y, h


def test_exported_from_kernels():
    assert kernels.selective_scan is selective_scan and "selective_scan" in kernels.__all__


@pytest.mark.parametrize("seqlen", [1, 63, 100, 257])
def test_xla_matches_reference_forward_and_gradients(seqlen):
    u, delta, a, b, c, d, h0 = _inputs(seqlen, seed=seqlen, strong=True)
    segments = jnp.asarray(np.repeat(np.arange(3), -(-seqlen // 3))[None, :seqlen].repeat(B, 0))
    ks = jax.random.split(jax.random.key(99), 2)
    dy = jax.random.normal(ks[0], u.shape)
    dh = jax.random.normal(ks[1], h0.shape)

    def loss(impl, chunk, *args):
        y, h = selective_scan(*args[:5], D=args[5], initial_state=args[6], segment_ids=segments,
                              chunk_size=chunk, implementation=impl)
        return jnp.sum(y * dy) + jnp.sum(h * dh), (y, h)

    grad = jax.grad(loss, argnums=tuple(range(2, 9)), has_aux=True)
    want_g, want = grad("reference", 64, u, delta, a, b, c, d, h0)
    for chunk in (16, 64):
        got_g, got = grad("xla", chunk, u, delta, a, b, c, d, h0)
        for g, w in zip(got, want, strict=True):
            assert err(g, w) < TOL["fwd"]
        names = ("u", "delta", "A", "B", "C", "D", "initial_state")
        for name, g, w in zip(names, got_g, want_g, strict=True):
            assert np.all(np.isfinite(np.asarray(g))), name
            assert err(g, w) < TOL["grad"], (name, chunk, err(g, w))
    # The initial state must matter in the first segment (a wiring check that can fail).
    assert float(jnp.max(jnp.abs(want_g[6]))) > 0


@pytest.mark.parametrize("impl", ["reference", "xla"])
def test_matches_float64_numpy(impl):
    seqlen = 50
    segments = np.array([[0] * 20 + [1] * 30, [4] * 7 + [5] * 40 + [6] * 3], np.int32)
    args = _inputs(seqlen, seed=3)
    y, h = selective_scan(*args[:5], D=args[5], initial_state=args[6], segment_ids=jnp.asarray(segments),
                          chunk_size=16, implementation=impl)
    want_y, want_h = _numpy64(*args, segments=segments)
    assert err(y, want_y) < TOL["float64"] and err(h, want_h) < TOL["float64"]


@pytest.mark.parametrize("impl", ["reference", "xla"])
def test_packed_segments_equal_per_segment_loop(impl):
    """Packed rows = each segment run alone (the initial state only reaches each row's first segment)."""
    lengths = [(5, 40, 19), (64, 0, 0)]
    seqlen = 64
    u, delta, a, b, c, d, h0 = _inputs(seqlen, seed=5)
    segments = np.array([np.repeat(np.arange(3), row) for row in lengths], np.int32)
    y, h = selective_scan(u, delta, a, b, c, D=d, initial_state=h0, segment_ids=jnp.asarray(segments),
                          chunk_size=16, implementation=impl)
    for row, parts in enumerate(lengths):
        start = 0
        for i, length in enumerate(p for p in parts if p):
            sl = slice(start, start + length)
            init = h0[row:row + 1] if i == 0 else None
            ys, hs = selective_scan(u[row:row + 1, sl], delta[row:row + 1, sl], a, b[row:row + 1, sl],
                                    c[row:row + 1, sl], D=d, initial_state=init, implementation="reference")
            assert err(y[row:row + 1, sl], ys) < TOL["fwd"]
            start += length
        assert err(h[row:row + 1], hs) < TOL["fwd"]


def test_decode_chained_equals_forward():
    seqlen = 20
    u, delta, a, b, c, d, h0 = _inputs(seqlen, seed=7)
    y, h = selective_scan(u, delta, a, b, c, D=d, initial_state=h0, chunk_size=16)
    state, ys = h0, []
    for t in range(seqlen):
        yt, state = selective_scan_step(u[:, t], delta[:, t], a, b[:, t], c[:, t], D=d, state=state)
        ys.append(yt)
    assert err(jnp.stack(ys, 1), y) < TOL["fwd"] and err(state, h) < TOL["fwd"]
    assert state.dtype == jnp.float32


def test_long_sequence_finite_and_bf16():
    seqlen = 16384
    u, delta, a, b, c, d, h0 = _inputs(seqlen, seed=11, batch=1)
    y, h = selective_scan(u, delta, a, b, c, D=d, chunk_size=128)
    assert np.all(np.isfinite(np.asarray(y))) and np.all(np.isfinite(np.asarray(h)))
    ref = selective_scan(u[:, -300:], delta[:, -300:], a, b[:, -300:], c[:, -300:], D=d, implementation="reference")
    # The state forgets (decay <= exp(-0.37 * 0.1) per step at worst): the last 50 outputs hardly see the cut.
    assert err(y[:, -50:], ref[0][:, -50:]) < 1e-3
    yb, hb = selective_scan(*(z.astype(jnp.bfloat16) for z in (u[:, :100], delta[:, :100])), a,
                            b[:, :100].astype(jnp.bfloat16), c[:, :100].astype(jnp.bfloat16), D=d)
    assert yb.dtype == jnp.bfloat16 and hb.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(yb, np.float32)))


def test_bad_inputs_raise():
    u, delta, a, b, c, d, h0 = _inputs(8)
    with pytest.raises(ValueError, match="`A`"):
        selective_scan(u, delta, -a, b, c)
    with pytest.raises(ValueError, match="`A`"):
        selective_scan(u, delta, a[:3], b, c)
    with pytest.raises(ValueError, match="`delta`"):
        selective_scan(u, delta[:, :4], a, b, c)
    with pytest.raises(ValueError, match="`C`"):
        selective_scan(u, delta, a, b, c[..., :2])
    with pytest.raises(ValueError, match="`B`"):
        selective_scan(u, delta, a, b.astype(jnp.bfloat16), c)
    with pytest.raises(ValueError, match="`D`"):
        selective_scan(u, delta, a, b, c, D=d[:2])
    with pytest.raises(ValueError, match="`initial_state`"):
        selective_scan(u, delta, a, b, c, initial_state=h0[:, :2])
    with pytest.raises(ValueError, match="`segment_ids`"):
        selective_scan(u, delta, a, b, c, segment_ids=jnp.zeros((B, 3), jnp.int32))
    with pytest.raises(ValueError, match="`chunk_size`"):
        selective_scan(u, delta, a, b, c, chunk_size=10)
    with pytest.raises(ValueError, match="unknown implementation"):
        selective_scan(u, delta, a, b, c, implementation="pallas")
    with pytest.raises(ValueError, match="`state`"):
        selective_scan_step(u[:, 0], delta[:, 0], a, b[:, 0], c[:, 0], state=h0[:1])
