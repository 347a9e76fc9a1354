"""SSD (Mamba-2's state-space duality): recurrence = chunked = masked-attention form = Pallas, decode, packing,
bad input. Parity through the shared harness (`harness.py`); errors are max-normalized (`tests/tolerances.py`).
"""

from __future__ import annotations

import functools

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import tolerance

from icml26zoo.kernels.ssd import api, attention_form, kernel_matrix, ssd, ssd_step, xla
from icml26zoo.kernels.ssd import pallas_chunk as pallas
from icml26zoo.kernels.ssd import reference as ref

F32, F64, BF16 = tolerance("ssd"), tolerance("ssd.float64"), tolerance("ssd", jnp.bfloat16)
B, H, P, N = 2, 2, 16, 16


def _make(rng: np.random.Generator, batch: int, length: int, *, diagonal: bool, heads: int = H, p: int = P,
          n: int = N) -> dict[str, jax.Array]:
    """x ~ N(0, 1) [B, T, H, P]; log-decays a [B, T, H] (or [B, T, H, N]) with magnitudes log-uniform in
    [1e-3, 5] (slow to strong); b, c [B, T, H, N] ~ N(0, 1/N); a random initial state [B, H, P, N]."""
    a_shape = (batch, length, heads, n) if diagonal else (batch, length, heads)
    f = lambda z: jnp.asarray(z, jnp.float32)
    return {"x": f(rng.standard_normal((batch, length, heads, p))),
            "a": f(-np.exp(rng.uniform(np.log(1e-3), np.log(5.0), a_shape))),
            "b": f(rng.standard_normal((batch, length, heads, n)) / np.sqrt(n)),
            "c": f(rng.standard_normal((batch, length, heads, n)) / np.sqrt(n)),
            "initial_state": f(rng.standard_normal((batch, heads, p, n)))}


def _case(diagonal: bool) -> harness.OpCase:
    return harness.OpCase(name="ssd", make_inputs=functools.partial(_make, diagonal=diagonal), reference=ref.ssd,
                          fast={"xla": xla.ssd, "attention": attention_form.ssd, "pallas": pallas.ssd},
                          differentiable=("x", "a", "b", "c", "initial_state"), time_inputs=("x", "a", "b", "c"),
                          step=ssd_step)


CASES = {False: _case(False), True: _case(True)}
DIAGONAL = pytest.mark.parametrize("diagonal", [False, True], ids=["scalar", "diagonal"])


def _inputs(seed: int, length: int, diagonal: bool, packed: bool, batch: int = B, **dims: int) -> dict[str, jax.Array]:
    """The op's inputs for the op-specific tests below (`segment_ids` random when `packed`)."""
    rng = np.random.default_rng(seed)
    inputs = _make(rng, batch, length, diagonal=diagonal, **dims)
    inputs["segment_ids"] = harness.random_segment_ids(rng, batch, length) if packed else None
    return inputs


# Compile once, check many: each parity case compiles the recurrence's, the chunked form's and the attention
# form's VJP, and the checks below run on these programs (same shapes, B = 2). Per decay kind: T = 1; T = 100
# packed at chunk 64 (1 chunk + 36); T = 129 packed at chunk 16 (8 + 1) and plain at 16 (the segments alone of
# the packed-rows check, the decode forward).
PARITY = [(1, 16, False), (100, 64, True), (129, 16, True), (129, 16, False)]


@DIAGONAL
@pytest.mark.parametrize("seqlen,chunk,packed", PARITY)
def test_three_way_equality(diagonal, seqlen, chunk, packed):
    """Recurrence = chunked = attention form: forward, final state and every gradient."""
    harness.check_forward_and_grads(CASES[diagonal], seqlen, chunk_size=chunk, packed=packed, impls=("xla",),
                                    seed=seqlen)
    # The attention form has no chunks: one compile per length.
    harness.check_forward_and_grads(CASES[diagonal], seqlen, packed=packed, impls=("attention",), seed=seqlen)


@pytest.mark.parametrize("diagonal,seqlen,chunk,packed",
                         [(False, 129, 16, True), (True, 100, 64, True), (True, 129, 16, False)])
def test_pallas_matches_reference(diagonal, seqlen, chunk, packed):
    """Pallas (interpret) forward and custom_vjp backward against the recurrence (its parity programs)."""
    harness.check_forward_and_grads(CASES[diagonal], seqlen, chunk_size=chunk, packed=packed, impls=("pallas",),
                                    seed=seqlen + 1)


def _float64_recurrence(x, a, b, c, s0, seg) -> tuple[np.ndarray, np.ndarray]:
    x, a, b, c, s = (np.asarray(z, np.float64) for z in (x, a, b, c, s0))
    a = a[..., None] if a.ndim == 3 else a
    y = np.zeros(x.shape)
    seg = None if seg is None else np.asarray(seg)[:, :, None, None, None]
    for t in range(x.shape[1]):
        if seg is not None and t > 0:
            s = np.where(seg[:, t] != seg[:, t - 1], 0.0, s)
        s = s * np.exp(a[:, t, :, None, :]) + x[:, t, :, :, None] * b[:, t, :, None, :]
        y[:, t] = np.einsum("bhpn,bhn->bhp", s, c[:, t])
    return y, s


@DIAGONAL
def test_float32_forms_against_float64(diagonal):
    """Each float32 form against a float64 recurrence (the T = 129 packed parity programs)."""
    i = _inputs(5, 129, diagonal, True)
    want = _float64_recurrence(i["x"], i["a"], i["b"], i["c"], i["initial_state"], i["segment_ids"])
    for impl in ("reference", "xla", "attention"):
        got = harness.outputs(CASES[diagonal], impl, i, 16 if impl == "xla" else None)
        for name, g, w in zip(("y", "S"), got, want, strict=True):
            harness.assert_close(g, w, F64, what=f"{impl} {name}")


@DIAGONAL
def test_packed_equals_loop_over_segments(diagonal):
    """Each segment alone, right-padded with identity steps (a = x = b = c = 0: padding after the segment changes
    neither its outputs nor its final state), outputs, final states and every gradient; on the T = 129 parity
    programs."""
    bounds = [[0, 17, 18, 61, 129], [0, 1, 90, 129]]  # includes one-token segments
    harness.check_packed_equals_segments_alone(CASES[diagonal], bounds, impl="xla", chunk_size=16, seed=11)


@DIAGONAL
def test_decode_chain_equals_forward(diagonal):
    harness.check_decode_equals_forward(CASES[diagonal], 129, impl="xla", chunk_size=16, seed=3, via_vjp=True)


def test_diagonal_with_equal_decays_is_scalar():
    """The chunked form with a diagonal decay equal in every state channel equals the scalar form (both T = 129
    packed parity programs)."""
    i = _inputs(4, 129, False, True)
    got = harness.outputs(CASES[True], "xla", dict(i, a=jnp.broadcast_to(i["a"][..., None], i["b"].shape)), 16)
    want = harness.outputs(CASES[False], "xla", i, 16)
    for g, w in zip(got, want, strict=True):
        harness.assert_close(g, w, F32, what="diagonal = scalar")


def test_zero_input_gives_zero_output():
    """x = 0 from a zero state: y = 0 and S = 0 exactly (the T = 129 packed diagonal program)."""
    i = _inputs(6, 129, True, True)
    y, s = harness.outputs(CASES[True], "xla", dict(i, x=jnp.zeros_like(i["x"]),
                                                    initial_state=jnp.zeros_like(i["initial_state"])), 16)
    assert not np.any(np.asarray(y)) and not np.any(np.asarray(s))


@DIAGONAL
def test_semiseparable_rank_at_most_n(diagonal):
    """Every lower block M[t:, :t] has rank <= N (1 per 1-SS component when scalar)."""
    n = 3
    i = _inputs(8, 40, diagonal, False, batch=1, heads=1, n=n)
    m = np.asarray(harness.jit(kernel_matrix)(i["a"], i["b"], i["c"]), np.float64)[0, 0]
    for t in range(1, 40):
        sv = np.linalg.svd(m[t:, :t], compute_uv=False)
        assert int(np.sum(sv > 1e-5 * max(sv[0], 1e-30))) <= n, t


def test_bfloat16_inputs():
    i = _inputs(9, 70, False, True)
    bf = dict(i, **{k: i[k].astype(jnp.bfloat16) for k in ("x", "b", "c")})
    y, s = harness.jit(functools.partial(ssd, chunk_size=16))(**bf)
    assert y.dtype == jnp.bfloat16 and s.dtype == jnp.float32
    y_ref, s_ref = harness.jit(ref.ssd)(**bf)
    harness.assert_close(y, y_ref, BF16, what="y bf16")
    harness.assert_close(s, s_ref, F32, what="S")  # same bf16 inputs, float32 state on both sides


@DIAGONAL
def test_long_sequence_stays_finite(diagonal):
    """T = 16384 in the chunked form, strong and slow decays, forward and gradients."""
    i = _inputs(10, 16384, diagonal, False, batch=1, heads=1, p=4, n=4)
    cotangents = harness.random_cotangents(np.random.default_rng(1), jax.eval_shape(lambda i: ref.ssd(**i), i))
    out, grads = harness.forward_and_grads(CASES[diagonal], "xla", i, cotangents, chunk_size=64)
    for name, z in list(zip(("y", "S"), out, strict=True)) + list(grads.items()):
        assert np.all(np.isfinite(np.asarray(z))), name


def test_dispatch():
    assert api._select(None) is xla.ssd  # the chunked XLA form is the default on every backend
    assert api._select(("pallas", "xla")) is pallas.ssd  # pallas runs (interpreted) on CPU
    assert api._select("attention") is attention_form.ssd
    i = _inputs(4, 129, False, True)
    got = harness.jit(functools.partial(ssd, chunk_size=16, implementation=("xla",)))(**i)
    harness.assert_close(got[0], harness.outputs(CASES[False], "reference", i)[0], F32, what="y")
    with pytest.raises(ValueError, match="unknown implementation"):
        ssd(i["x"], i["a"], i["b"], i["c"], implementation="triton")


def test_named_path_that_cannot_run_raises(monkeypatch):
    # Every path runs on every backend today; a path registered for TPU only stands in for one that cannot.
    fn, _ = api._IMPLEMENTATIONS["pallas"]
    monkeypatch.setitem(api._IMPLEMENTATIONS, "pallas", (fn, ("tpu",)))
    i = _inputs(12, 8, False, False)
    with pytest.raises(RuntimeError, match="cannot run"):
        ssd(i["x"], i["a"], i["b"], i["c"], implementation="pallas")


def _bad_cases() -> tuple[dict[str, dict], dict[str, jax.Array]]:
    i = _inputs(13, 8, False, False)
    x, a, b, c, s0 = i["x"], i["a"], i["b"], i["c"], i["initial_state"]
    return {
        "x": dict(x=x[0]),
        "b": dict(b=b[:, :4]),
        "c": dict(c=c[..., :3]),
        "a": dict(a=a[..., None][..., [0, 0]]),
        "initial_state": dict(initial_state=s0[..., :5]),
        "segment_ids": dict(segment_ids=jnp.zeros((B, 9), jnp.int32)),
        "positive": dict(a=-a),
        "dtype": dict(b=b.astype(jnp.bfloat16)),
        "int_seg": dict(segment_ids=jnp.zeros((B, 8), jnp.float32)),
        "chunk_size": dict(chunk_size=48),
    }, dict(x=x, a=a, b=b, c=c)


@pytest.mark.parametrize("case", list(_bad_cases()[0]))
def test_bad_inputs_raise(case):
    bad, good = _bad_cases()
    kwargs = dict(good, initial_state=None, segment_ids=None, chunk_size=16)
    kwargs.update(bad[case])
    expect = {"positive": "must be finite and <= 0", "dtype": "expected x.dtype", "int_seg": "integer dtype",
              "chunk_size": "`chunk_size` is 48"}.get(case, f"`{case}` has shape")
    with pytest.raises(ValueError, match=expect):
        ssd(kwargs.pop("x"), kwargs.pop("a"), kwargs.pop("b"), kwargs.pop("c"), **kwargs)


def test_decode_step_state_is_keyword_only():
    i = _inputs(14, 1, False, False)
    with pytest.raises(TypeError):
        ssd_step(i["x"][:, 0], i["a"][:, 0], i["b"][:, 0], i["c"][:, 0], i["initial_state"])
