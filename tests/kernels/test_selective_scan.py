"""Selective scan (Mamba's S6): reference = chunked associative scan = float64 numpy, gradients, packed segments,
decode, long T, bad input. Parity through the shared harness (`harness.py`); errors are max-normalized
(`tests/tolerances.py`).
"""

from __future__ import annotations

import functools

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import tolerance

from icml26zoo import kernels
from icml26zoo.kernels.selective_scan import reference, selective_scan, selective_scan_step, xla

F32, F64 = tolerance("selective_scan"), tolerance("selective_scan.float64")
B, D_IN, N = 2, 6, 4


def _make(rng: np.random.Generator, batch: int, length: int, *, strong: bool = False) -> dict[str, jax.Array]:
    """u, delta [B, T, D_in] (Δ = softplus(·) > 0), A [D_in, N] < 0, B, C [B, T, N], D [D_in], initial state
    [B, D_in, N], float32. `strong`: larger Δ and |A|, so the state forgets within a few steps."""
    f = lambda z: jnp.asarray(z, jnp.float32)
    normal = lambda *shape: f(rng.standard_normal(shape))
    return {"u": normal(batch, length, D_IN),
            "delta": jax.nn.softplus(normal(batch, length, D_IN) - (0.0 if strong else 1.0)),
            "A": f(-np.exp(rng.uniform(-1.0, 2.0 if strong else 1.0, (D_IN, N)))),
            "B": normal(batch, length, N), "C": normal(batch, length, N), "D": normal(D_IN),
            "initial_state": normal(batch, D_IN, N)}


def _case(strong: bool) -> harness.OpCase:
    return harness.OpCase(name="selective_scan", make_inputs=functools.partial(_make, strong=strong),
                          reference=reference.selective_scan, fast={"xla": xla.selective_scan},
                          differentiable=("u", "delta", "A", "B", "C", "D", "initial_state"),
                          time_inputs=("u", "delta", "B", "C"), step=selective_scan_step)


CASE, STRONG = _case(False), _case(True)


def _numpy64(u, delta, A, B, C, D, initial_state, segments=None) -> tuple[np.ndarray, np.ndarray]:
    """The recurrence in float64 numpy, one step at a time, resetting at every segment start after t = 0."""
    u, delta, a, b, c, d, h = (np.asarray(z, np.float64) for z in (u, delta, A, B, C, D, initial_state))
    h, y = h.copy(), np.zeros(u.shape)
    for t in range(u.shape[1]):
        if segments is not None and t > 0:
            h[segments[:, t] != segments[:, t - 1]] = 0.0
        h = np.exp(delta[:, t, :, None] * a) * h + (delta[:, t] * u[:, t])[..., None] * b[:, t, None, :]
        y[:, t] = np.einsum("bdn,bn->bd", h, c[:, t]) + d * u[:, t]
    return y, h


def test_exported_from_kernels():
    assert kernels.selective_scan is selective_scan and "selective_scan" in kernels.__all__


# Compile once, check many: each parity case compiles the reference's and the xla path's VJP (strong decays;
# CASE has the same shapes, so its checks run on the same programs). T = 1; T = 100 at chunk 64 (1 chunk + 36);
# T = 129 at chunk 16 (8 chunks + 1), packed, and plain: the segments alone of the packed-rows check and the
# forward of the decode check.
PARITY = [(1, 16, True), (100, 64, True), (129, 16, True), (129, 16, False)]


@pytest.mark.parametrize("seqlen, chunk, packed", PARITY)
def test_xla_matches_reference_forward_and_gradients(seqlen, chunk, packed):
    _, grads = harness.check_forward_and_grads(STRONG, seqlen, chunk_size=chunk, packed=packed, seed=seqlen)
    # The initial state must matter in the first segment (a wiring check that can fail).
    assert float(jnp.max(jnp.abs(grads["initial_state"]))) > 0


@pytest.mark.parametrize("impl", ["reference", "xla"])
def test_matches_float64_numpy(impl):
    """Both paths against a float64 numpy loop on packed rows (segments 0:20, 20:129 / 0:7, 7:125, 125:129; the
    T = 129 packed parity programs)."""
    segments = np.array([[0] * 20 + [1] * 109, [4] * 7 + [5] * 118 + [6] * 4], np.int32)
    inputs = _make(np.random.default_rng(3), B, 129) | {"segment_ids": jnp.asarray(segments)}
    y, h = harness.outputs(CASE, impl, inputs, None if impl == "reference" else 16)
    want_y, want_h = _numpy64(**{k: v for k, v in inputs.items() if k != "segment_ids"}, segments=segments)
    harness.assert_close(y, want_y, F64, what="y")
    harness.assert_close(h, want_h, F64, what="state")


@pytest.mark.parametrize("impl", ["reference", "xla"])
def test_packed_segments_equal_per_segment_loop(impl):
    """Packed rows = each segment run alone (the initial state only reaches each row's first segment), outputs,
    final states and every per-step and initial-state gradient; each segment is right-padded with Δ = 0 steps
    (the identity). On the T = 129 parity programs: nothing compiles."""
    bounds = [[0, 5, 45, 64, 129], [0, 1, 129]]
    harness.check_packed_equals_segments_alone(CASE, bounds, impl=impl, chunk_size=16, seed=5)


def test_decode_chained_equals_forward():
    harness.check_decode_equals_forward(CASE, 129, impl="xla", chunk_size=16, seed=7, via_vjp=True)


def test_long_sequence_finite_and_bf16():
    seqlen = 16384
    i = _make(np.random.default_rng(11), 1, seqlen)
    y, h = harness.jit(functools.partial(selective_scan, chunk_size=128))(**dict(i, initial_state=None))
    assert np.all(np.isfinite(np.asarray(y))) and np.all(np.isfinite(np.asarray(h)))
    tail = {k: (v[:, -300:] if k in CASE.time_inputs else v) for k, v in i.items()}
    reference_path = harness.jit(functools.partial(selective_scan, implementation="reference"))
    y_ref, _ = reference_path(**dict(tail, initial_state=None))
    # The state forgets (decay <= exp(-0.37 * 0.1) per step at worst): the last 50 outputs hardly see the cut.
    harness.assert_close(y[:, -50:], y_ref[:, -50:], tolerance("selective_scan.truncated"), what="cut at T - 300")
    head = {k: (v[:, :100].astype(jnp.bfloat16) if k in ("u", "delta", "B", "C") else v) for k, v in i.items()}
    yb, hb = harness.jit(selective_scan)(**dict(head, initial_state=None))
    assert yb.dtype == jnp.bfloat16 and hb.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(yb, np.float32)))


def test_bad_inputs_raise():
    i = _make(np.random.default_rng(0), B, 8)
    u, delta, a, b, c, d, h0 = (i[k] for k in ("u", "delta", "A", "B", "C", "D", "initial_state"))
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
        selective_scan(u, delta, a, b, c, implementation="triton")
    with pytest.raises(ValueError, match="`state`"):
        selective_scan_step(u[:, 0], delta[:, 0], a, b[:, 0], c[:, 0], state=h0[:1])


_JITTED_SCAN = harness.jit(lambda i: selective_scan(**i))


def _valid(seqlen: int = 8) -> dict[str, jax.Array]:
    i = _make(np.random.default_rng(0), B, seqlen)
    return {k: i[k] for k in ("u", "delta", "A", "B", "C")}


@pytest.mark.parametrize("name, value, message", [
    ("A", lambda i: i["A"].at[1, 2].set(jnp.nan), r"`A`.*not < 0 \(NaN or >= 0\)"),
    ("A", lambda i: i["A"].at[0, 0].set(0.0), r"`A`.*expected A < 0"),
    ("delta", lambda i: i["delta"].at[1, 3, 2].set(jnp.nan), r"`delta`.*first at \(1, 3, 2\): nan.*> 0 and finite"),
    ("delta", lambda i: i["delta"].at[0, 5, 1].set(jnp.inf), r"`delta`.*first at \(0, 5, 1\): inf"),
    ("delta", lambda i: i["delta"].at[0, 2, 0].set(-0.5), r"`delta`.*first at \(0, 2, 0\): -0.5"),
    ("delta", lambda i: i["delta"].at[0, 2, 0].set(0.0), r"`delta`.*expected the step Δ > 0"),
])
def test_values_checked_in_eager_mode_nan_included(name, value, message):
    inputs = _valid()
    inputs[name] = value(inputs)
    with pytest.raises(ValueError, match=message):
        selective_scan(**inputs)
    # Under jit the values are unknown: the checks are skipped, nothing raises. (One jitted function for all
    # the cases: its trace sees no values, so it is the same whatever they are.)
    _JITTED_SCAN(inputs)


def test_checked_catches_bad_values_under_jit():
    inputs = _valid()
    run = harness.jit(lambda i: kernels.checked(selective_scan)(**i))
    run(inputs)
    with pytest.raises(Exception, match=r"selective_scan: `A` must be finite and < 0"):
        jax.block_until_ready(run({**inputs, "A": inputs["A"].at[0, 1].set(jnp.nan)}))
    with pytest.raises(Exception, match=r"selective_scan: `delta` must be finite and > 0"):
        jax.block_until_ready(run({**inputs, "delta": inputs["delta"].at[1, 2, 0].set(-1.0)}))


@pytest.mark.parametrize("chunk_size", [64.0, "64", True, None])
def test_non_integer_chunk_size_raises_naming_it(chunk_size):
    with pytest.raises(ValueError, match=r"`chunk_size` is .*expected an int, one of \(16, 32, 64, 128\)"):
        selective_scan(**_valid(), chunk_size=chunk_size)


def test_zero_length_and_non_array_inputs_raise():
    inputs = _valid()
    empty = {k: (v[:, :0] if k in ("u", "delta", "B", "C") else v) for k, v in inputs.items()}
    with pytest.raises(ValueError, match=r"`u` has shape \(2, 0, 6\), expected T >= 1"):
        selective_scan(**empty)
    for name in ("u", "delta", "A", "B", "C"):
        as_list = dict(inputs, **{name: np.asarray(inputs[name]).tolist()})
        with pytest.raises(ValueError, match=rf"`{name}` is \[\[.*\(a list\), expected a jax or numpy array"):
            selective_scan(**as_list)
    with pytest.raises(ValueError, match=r"`D` is 1.5 \(a float\), expected a jax or numpy array or None"):
        selective_scan(**inputs, D=1.5)
    with pytest.raises(ValueError, match=r"selective_scan: `u` is None \(a NoneType\), expected a jax or numpy array$"):
        selective_scan(**{**inputs, "u": None})
    y, _ = selective_scan(**{k: np.asarray(v) for k, v in inputs.items()})
    assert y.shape == inputs["u"].shape


@pytest.mark.parametrize("impl", ["reference", "xla", "pallas"])
def test_nan_in_one_segment_never_reaches_another(impl):
    """Row 0 has a NaN Δ in its first segment, row 1 in its last: the other segment's outputs and every
    per-position gradient there stay finite (under jit, where the eager value checks are skipped); the
    shared A and D may turn NaN, the per-position inputs of the clean segment may not."""
    seqlen, cut = 40, 19
    i = _make(np.random.default_rng(8), B, seqlen)
    i["delta"] = i["delta"].at[0, 4, 1].set(jnp.nan).at[1, 30, 3].set(jnp.nan)
    segment_ids = jnp.asarray(np.repeat([[0, 1]], B, axis=0).repeat([cut, seqlen - cut], axis=1), jnp.int32)
    per_position = ("u", "delta", "B", "C")
    diff = {k: i[k] for k in per_position + ("initial_state",)}
    rest = {k: i[k] for k in ("A", "D")}
    cotangents = harness.random_cotangents(np.random.default_rng(9), jax.eval_shape(
        lambda d: selective_scan(**d, **rest, segment_ids=segment_ids, implementation=impl), diff))

    @harness.jit
    def run(d):
        out, pull = jax.vjp(lambda d: selective_scan(**d, **rest, segment_ids=segment_ids, chunk_size=16,
                                                     implementation=impl), d)
        return out, pull(cotangents)[0]

    (y, state), grads = run(diff)
    finite = lambda z: bool(np.all(np.isfinite(np.asarray(z))))
    clean = {0: slice(cut, seqlen), 1: slice(0, cut)}
    for row, span in clean.items():
        assert finite(y[row, span]), f"{impl}: row {row} outputs of the clean segment"
        for name in per_position:
            assert finite(grads[name][row, span]), f"{impl}: d{name} row {row} in the clean segment"
    assert finite(state[0]) and not finite(state[1]), f"{impl}: the final state is the last segment's"
    assert finite(grads["initial_state"][1]), f"{impl}: the initial state of row 1 reaches only its clean segment"
    assert not finite(y[0, :cut]) and not finite(y[1, cut:]), "the NaN must show in its own segment"
