"""Parity, invariant, decode and validation tests of kernels.value_forget_attention (reference and xla).

FiX is a reconstruction (docs/papers.md). Parity, packing and decode run through the shared harness
(`tests/kernels/harness.py`) with the "value_forget_attention" entries of the tolerance table: max|actual −
expected| / max(1, max|expected|) ≤ 1e-5 in float32 for the forward and every gradient (the blocked path only
reorders float32 sums; observed ≤ 2e-7 forward and ≤ 1.1e-6 on gradients at T ≤ 257 with gates U(−3, 0); a
path that differences a global float32 cumsum is 5.9e-5 off the float64 oracle at T = 257 with gates
U(−20, 0)). Decode at the same 1e-5: the float32 value cache is multiplied once per step.
RMSNorm below is per head over Dv, as the FiX mixer applies it: the softmax denominator is a per-(row, head)
scalar, so only a per-head norm removes it.

Compiles dominate the runtime, so the parity cases are a covering set (T = 1, remainder 1 and another, both block
sizes, with and without packing, with and without the scalar gate) and later tests run on their compiled
programs (same shapes, B = 2): compile once, check many.
"""

from __future__ import annotations

import functools

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import (
    FIX_CASE,
    fix_case,
    fix_float64_oracle,
    make_fix_inputs,
)
from tolerances import tolerance

from icml26zoo.kernels import value_forget_attention
from icml26zoo.kernels._dispatch import select_implementation
from icml26zoo.kernels.forgetting_attention import reference as fox_reference
from icml26zoo.kernels.value_forget_attention import api, decode, reference, xla

TOL = tolerance("value_forget_attention")
INPUTS = FIX_CASE.time_inputs
# (T, packed, scalar gate, block size, Dv): T = 1; T = 63 (3 blocks of 16 + 15) without the scalar gate;
# T = 100 (1 block of 64 + 36) packed; T = 129 (8 blocks of 16 + 1) packed, and plain: the segments alone of
# the packed-rows check.
CASES = [(1, False, True, 16, 8), (63, False, False, 16, 16), (100, True, True, 64, 8),
         (129, True, True, 16, 8), (129, False, True, 16, 8)]


def _inputs(length: int, *, seed: int = 0, **kwargs) -> dict[str, jax.Array]:
    """The case's inputs at T = length (B = 2), seeded per length, without segment ids."""
    return make_fix_inputs(np.random.default_rng(seed + length), 2, length, **kwargs) | {"segment_ids": None}


def _cotangent(inputs: dict[str, jax.Array]) -> jax.Array:
    """A random cotangent [B, T, H, Dv] for the op's output (not .sum())."""
    shape = jax.ShapeDtypeStruct(inputs["q"].shape[:3] + inputs["v"].shape[-1:], jnp.float32)
    return harness.random_cotangents(np.random.default_rng(1), shape)


@functools.cache
def _xla(block: int) -> functools.partial:
    """One function object per block size, so that the harness compiles each shape once."""
    return functools.partial(xla.value_forget_attention, block_size=block)


def _rms_norm(x: jax.Array) -> np.ndarray:
    """Per-head RMSNorm over Dv with ε → 0 (B.5 (3)): exactly invariant to a positive per-row scalar.

    The mixer's ε = 1e-6 is not negligible for strongly decayed u: with mean(u²) ≈ 1e-4 it moves the
    output by about 0.5% (the RMSNorm-ε pitfall), which is why these invariants are stated at ε → 0.
    """
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True))


def _loop_oracle(q, k, v, av, af) -> np.ndarray:
    """The same maths as explicit loops over (b, h, i, j), for one tiny case."""
    q, k, v, av, af = (np.asarray(x, np.float64) for x in (q, k, v, av, af))
    b_size, t, h_size, d = q.shape
    groups = h_size // k.shape[2]
    u = np.zeros((b_size, t, h_size, v.shape[-1]))
    for b in range(b_size):
        for h in range(h_size):
            for i in range(t):
                logits = [q[b, i, h] @ k[b, j, h // groups] / np.sqrt(d) + af[b, j + 1:i + 1, h].sum()
                          for j in range(i + 1)]
                p = np.exp(np.array(logits) - max(logits))
                for j in range(i + 1):
                    u[b, i, h] += p[j] / p.sum() * np.exp(av[b, j + 1:i + 1, h].sum(0)) * v[b, j, h // groups]
    return u


def test_reference_equals_float64_loops():
    x = make_fix_inputs(np.random.default_rng(11), 2, 11, dv=6)
    q, k, v, av, af = (x[n][..., :8] if n in ("q", "k") else x[n] for n in INPUTS)
    u = reference.value_forget_attention(q, k, v, av, log_fgate=af)
    harness.assert_close(u, _loop_oracle(q, k, v, av, af), TOL, what="u")
    seg = jnp.asarray([[0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3], [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]], jnp.int32)
    harness.assert_close(reference.value_forget_attention(q, k, v, av, log_fgate=af, segment_ids=seg),
                         fix_float64_oracle(q, k, v, av, af, seg)[0], TOL, what="u packed")


@pytest.mark.parametrize("length, packed, with_fgate, block, dv", CASES)
def test_xla_matches_reference_forward_and_all_gradients(length, packed, with_fgate, block, dv):
    harness.check_forward_and_grads(fix_case(with_fgate, dv), length, chunk_size=block, packed=packed)


def test_packed_equals_loop_over_segments_and_no_gradient_crosses():
    """Packed rows of T = 129 (segments of 50, 1, 78 / 17, 112: edges inside blocks of 16) against each segment
    alone, outputs and every gradient; then two segments per row (ids 0, 1 and 5, 9) with a loss on the later
    ones only. All on the T = 129 parity programs."""
    harness.check_packed_equals_segments_alone(FIX_CASE, [[0, 50, 51, 129], [0, 17, 129]], impl="xla",
                                               chunk_size=16)
    inputs = _inputs(129)
    seg = jnp.asarray([np.repeat([0, 1], [50, 79]), np.repeat([5, 9], [50, 79])], jnp.int32)
    # A loss on the later segments only: exactly zero gradient for every first-segment input.
    later_only = _cotangent(inputs) * (seg != seg[:, :1]).astype(jnp.float32)[..., None, None]
    for impl in ("xla", "reference"):
        _, grads = harness.forward_and_grads(FIX_CASE, impl, inputs | {"segment_ids": seg}, later_only,
                                             None if impl == "reference" else 16)
        for name, grad in grads.items():
            np.testing.assert_array_equal(np.asarray(grad[:, :50]), 0.0, err_msg=f"{impl} d{name} leaked")
            assert np.any(np.asarray(grad[:, 50:]) != 0.0), f"{impl} d{name}: no gradient at all"


def test_strong_gates_match_float64():
    """Gates U(−20, 0) at T = 257 (|Λ_T| ≈ 2.6e3): only local gate sums keep float32 at 1e-5 here."""
    x = _inputs(257, gate=(-20.0, 0.0))
    args = [x[n] for n in INPUTS]
    expected = fix_float64_oracle(*args)[0]
    harness.assert_close(harness.jit(reference.value_forget_attention)(*args[:4], log_fgate=args[4]), expected, TOL,
                         what="reference")
    harness.assert_close(harness.jit(_xla(64))(*args[:4], log_fgate=args[4]), expected, TOL, what="xla")


def test_zero_gates_are_causal_dot_product_attention():
    """B.5 (4): log_vgate ≡ 0 without a scalar gate is plain causal softmax attention (the T = 63 programs)."""
    x = _inputs(63, dv=16, with_fgate=False)
    x["log_vgate"] = jnp.zeros(x["q"].shape[:3] + (16,), jnp.float32)
    expected = jax.nn.dot_product_attention(x["q"], x["k"], x["v"], is_causal=True)
    for impl in ("xla", "reference"):
        got = harness.outputs(fix_case(False, 16), impl, x, None if impl == "reference" else 16)
        harness.assert_close(got, expected, TOL, what=impl)


def test_uniform_gates_equal_fox_only_after_rms_norm():
    """B.5 (8): a gate equal in every channel gives FiX u = (positive per-row scalar)·FoX o, never FiX = FoX.

    FiX normalizes by Σ_j exp(s_ij) while FoX normalizes by Σ_j exp(s_ij)·f-decay_ij, so the per-head
    RMSNorm of both agree while the raw outputs differ. (The T = 63 xla program, without the scalar gate.)
    """
    x = _inputs(63, dv=16, gate=(-0.5, 0.0))
    q, k, v, af = x["q"], x["k"], x["v"], x.pop("log_fgate")
    x["log_vgate"] = jnp.broadcast_to(af[..., None], q.shape[:3] + (16,))
    u_fix = harness.outputs(fix_case(False, 16), "xla", x, 16)
    o_fox = harness.jit(fox_reference.forgetting_attention)(q, k, v, af)
    harness.assert_close(_rms_norm(u_fix), _rms_norm(o_fox), TOL, what="RMSNorm(FiX) vs RMSNorm(FoX)")
    assert harness.max_normalized_error(u_fix, o_fox) > 0.05, "raw FiX u must differ from FoX (FoX renormalizes)"


def test_denominator_is_redundant_under_rms_norm():
    """B.5 (3): RMSNorm(Σ_j exp(s_ij) D_ij ⊙ v_j) = RMSNorm(u), with packed segments and a scalar gate (the
    T = 129 packed xla program)."""
    x = _inputs(129)
    x["segment_ids"] = jnp.asarray(np.sort(np.random.default_rng(0).integers(1, 4, size=(2, 129)), axis=1), jnp.int32)
    u = harness.outputs(FIX_CASE, "xla", x, 16)
    numerator = fix_float64_oracle(*[x[n] for n in INPUTS], x["segment_ids"])[1]
    harness.assert_close(_rms_norm(u), _rms_norm(numerator), TOL, what="RMSNorm")


def test_long_sequence_bf16_strong_gates_stay_finite():
    """B.5 (6): no NaN/Inf at T = 16384 with log f ≈ −5 per step, bf16 inputs (float32 gate sums)."""
    t = 16384
    rng = np.random.default_rng(0)
    # Logits O(0.3), so the scalar gate e^-5 per step leaves P_ii ≈ 0.99 and every earlier token is forgotten.
    q = jnp.asarray(0.25 * rng.normal(size=(1, t, 1, 16)), jnp.bfloat16)
    k, v = (jnp.asarray(rng.normal(size=(1, t, 1, 16)), jnp.bfloat16) for _ in range(2))
    av = jnp.asarray(rng.uniform(-5.5, -4.5, size=(1, t, 1, 16)), jnp.float32)
    af = jnp.asarray(rng.uniform(-5.5, -4.5, size=(1, t, 1)), jnp.float32)
    u = harness.jit(_xla(128))(q, k, v, av, log_fgate=af)
    assert u.dtype == jnp.bfloat16
    assert np.all(np.isfinite(np.asarray(u, np.float32)))
    harness.assert_close(_rms_norm(u), _rms_norm(v), tolerance("value_forget_attention", jnp.bfloat16),
                         what="RMSNorm(u) ≈ RMSNorm(v)")


@pytest.mark.parametrize("length", [1, 129])
def test_very_strong_gates_are_finite_and_local(length):
    """log f = −1e4 in both gates: each query sees only itself, u_i = v_i; all gradients finite, gates' zero
    (the parity programs: T = 1 plain, T = 129 packed)."""
    inputs = _inputs(length)
    inputs["log_vgate"] = jnp.full(inputs["log_vgate"].shape, -1e4, jnp.float32)
    inputs["log_fgate"] = jnp.full(inputs["log_fgate"].shape, -1e4, jnp.float32)
    if length > 1:
        inputs["segment_ids"] = jnp.asarray(np.sort(np.random.default_rng(0).integers(1, 4, (2, length)), 1),
                                            jnp.int32)
    for impl in ("xla", "reference"):
        block = None if impl == "reference" else 16
        u, grads = harness.forward_and_grads(FIX_CASE, impl, inputs, _cotangent(inputs), block)
        harness.assert_close(u, jnp.repeat(inputs["v"], 2, axis=2), TOL, what=f"{impl} u")
        for name, g in grads.items():
            assert np.all(np.isfinite(np.asarray(g))), f"{impl} d{name} not finite"
            if name != "v":
                harness.assert_close(g, jnp.zeros_like(g), TOL, kind="grad", what=f"{impl} d{name}")


# The reference forward of the decode check comes from a plain parity program: with the scalar gate T = 129
# (Dv 8), without it T = 63 (Dv 16).
DECODE = {True: (129, 8), False: (63, 16)}


@pytest.mark.parametrize("with_fgate", [True, False])
def test_decode_one_token_at_a_time_equals_forward(with_fgate):
    """The harness's decode check: `value_forget_attention_step` per token against the reference forward."""
    length, dv = DECODE[with_fgate]
    harness.check_decode_equals_forward(fix_case(with_fgate, dv), length, via_vjp=True)


@functools.cache
def _decode_step(prune_eps: float | None, prefill_block: int):
    return harness.jit(functools.partial(decode.value_forget_attention_step, prune_eps=prune_eps,
                                         prefill_block=prefill_block))


def _decode_all(inputs, chunks, capacity, *, with_fgate=True, prune_eps=None, prefill_block=64):
    """Feed (q, k, v, log_vgate, log_fgate) through the decode step in chunks; returns (u [B,T,H,Dv], state)."""
    q, k, v, av, af = inputs
    b, t, h, d = q.shape
    state = decode.init_value_forget_attention_state(b, capacity, h, k.shape[2], d, v.shape[-1], q.dtype)
    outputs, start = [], 0
    for size in chunks:
        piece = [None if x is None else x[:, start:start + size] for x in (q, k, v, av, af)]
        u, state = _decode_step(prune_eps, prefill_block)(*piece[:4], piece[4] if with_fgate else None, state=state)
        outputs.append(u)
        start += size
    assert start == t
    return jnp.concatenate(outputs, axis=1), state


@pytest.mark.parametrize("with_fgate", [True, False])
def test_decode_equals_full_forward_at_every_position(with_fgate):
    """B.5 (7), cache (a): single tokens and chunked prefill (chunks of 5) equal the full forward."""
    x = _inputs(30)
    args = [x[n] for n in INPUTS]
    u, state = _decode_all(args, [1, 5, 1, 5, 5, 1, 5, 1, 5, 1], capacity=32, with_fgate=with_fgate)
    expected = fix_float64_oracle(*args[:4], args[4] if with_fgate else None)[0]
    harness.assert_close(u, expected, TOL, what="decode")
    assert state.v.dtype == jnp.float32
    np.testing.assert_array_equal(state.length, [30, 30])
    np.testing.assert_array_equal(state.evicted, [0, 0])
    assert int(state.valid.sum()) == 2 * 30


def test_long_prefill_runs_in_pieces():
    """A 30-token prompt in one call with prefill_block 8: a scan over 3 pieces plus a remainder of 6."""
    args = [_inputs(30)[n] for n in INPUTS]
    u, state = _decode_all(args, [30], capacity=32, prefill_block=8)
    harness.assert_close(u, fix_float64_oracle(*args)[0], TOL, what="prefill")
    np.testing.assert_array_equal(state.length, [30, 30])


def test_pruned_decode_with_small_capacity_matches_forward_after_rms_norm():
    """B.4 (c): with fast gates (every channel below e^-3 per step) 8 slots hold every remembered token.

    Pruning drops forgotten tokens from the softmax denominator too, a positive per-(row, head) scalar, so
    the per-head RMSNorm of u matches the full forward (up to the dropped terms, ≤ 1e-6 each) while the raw
    u may not.
    """
    x = _inputs(40)
    k, v = x["k"], x["v"]
    av = jnp.asarray(np.random.default_rng(3).uniform(-6.0, -3.0, size=x["q"].shape[:3] + (8,)), jnp.float32)
    q = x["q"] * 0.3  # logits O(1): a dropped term's weight e^{s_ij} stays within a few e of the kept ones
    expected = _rms_norm(fix_float64_oracle(q, k, v, av)[0])
    u, state = _decode_all((q, k, v, av, None), [1] * 40, capacity=8, with_fgate=False, prune_eps=1e-6)
    harness.assert_close(_rms_norm(u), expected, TOL, what="RMSNorm(u)")
    np.testing.assert_array_equal(state.evicted, [0, 0])
    assert int(state.valid.sum(axis=1).max()) <= 6  # e^-3 per step: gone below 1e-6 after at most 5 steps
    # The whole prompt in one call, T = 40 > capacity: pieces of 8 tokens, each freed by the next piece's decay.
    u, state = _decode_all((q, k, v, av, None), [40], capacity=8, with_fgate=False, prune_eps=1e-6)
    harness.assert_close(_rms_norm(u), expected, TOL, what="RMSNorm(u), one call")
    np.testing.assert_array_equal(state.evicted, [0, 0])


def test_full_cache_evicts_the_most_forgotten_slot_and_counts_it():
    """Capacity 4 without pruning and gates constant in time: the oldest slot is evicted at every step, so a
    query sees the 4 cached tokens plus itself (a sliding window of 5), and `evicted` counts T − 4."""
    x = _inputs(12)
    q, k, v = x["q"], x["k"], x["v"]
    rates = np.random.default_rng(4).uniform(-0.5, -0.05, size=(1, 1, 4, 8))
    av = jnp.asarray(np.broadcast_to(rates, q.shape[:3] + (8,)), jnp.float32)
    u, state = _decode_all((q, k, v, av, None), [1] * 12, capacity=4, with_fgate=False)
    for i in range(12):
        lo = max(0, i - 4)
        window = fix_float64_oracle(*(y[:, lo:i + 1] for y in (q, k, v, av)))[0]
        harness.assert_close(u[:, i], window[:, -1], TOL, what=f"u[{i}]")
    np.testing.assert_array_equal(state.evicted, [8, 8])


def test_fwd_bwd_memory_is_linear_in_length():
    """Compiled temp memory of forward + backward, T = 2048 over T = 1024: ≤ 2.3 (quadratic would be 4)."""

    def temp_bytes(t):
        shapes = [(1, t, 2, 16), (1, t, 1, 16), (1, t, 1, 16), (1, t, 2, 16)]
        args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]

        def loss(q, k, v, av):
            return jnp.sum(xla.value_forget_attention(q, k, v, av, block_size=64))

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).lower(*args).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    ratio = temp_bytes(2048) / temp_bytes(1024)
    assert ratio <= 2.3, f"temp memory grows {ratio:.2f}x from T = 1024 to 2048"


def test_implementation_dispatch():
    """None picks the blocked XLA path; names and sequences select; unknown names raise."""
    pick = functools.partial(select_implementation, "value_forget_attention", implementations=api._IMPLEMENTATIONS,
                             defaults=api._DEFAULT)
    assert pick(None) is xla.value_forget_attention
    assert pick("reference") is reference.value_forget_attention
    assert pick(("xla", "reference")) is xla.value_forget_attention
    with pytest.raises(ValueError, match="unknown"):
        pick("cuda")
    args = [_inputs(8)[n] for n in INPUTS]
    u = harness.jit(functools.partial(value_forget_attention, block_size=4))(*args[:4], log_fgate=args[4])
    expected = harness.jit(reference.value_forget_attention)(*args[:4], log_fgate=args[4])
    harness.assert_close(u, expected, TOL, what="default path")


def _bad_cases() -> dict[str, tuple[dict, str]]:
    x = _inputs(8)
    q, k, v, av, af = (x[n] for n in INPUTS)
    seg = jnp.zeros((2, 8), jnp.int32)
    return {
        "q rank": (dict(q=q[0]), "`q` has shape"),
        "k length": (dict(k=k[:, :4]), "`k` has shape"),
        "heads": (dict(k=jnp.zeros((2, 8, 3, 16)), v=jnp.zeros((2, 8, 3, 8))), "divides H = 4"),
        "v shape": (dict(v=v[:, :5]), "`v` has shape"),
        "dtype": (dict(k=k.astype(jnp.bfloat16)), "share one floating dtype"),
        "int q": (dict(q=q.astype(jnp.int32)), "share one floating dtype"),
        "vgate shape": (dict(log_vgate=av[..., :4]), r"`log_vgate` has shape \(2, 8, 4, 4\)"),
        "positive vgate": (dict(log_vgate=av.at[0, 3, 1, 2].set(0.5)), "`log_vgate` must be finite and ≤ 0"),
        "fgate shape": (dict(log_fgate=af[:, :, :2]), r"`log_fgate` has shape \(2, 8, 2\)"),
        "positive fgate": (dict(log_fgate=af.at[0, 3, 1].set(0.5)), "`log_fgate` must be finite and ≤ 0"),
        "segment shape": (dict(segment_ids=seg[:, :5]), r"`segment_ids` has shape \(2, 5\)"),
        "segment dtype": (dict(segment_ids=seg.astype(jnp.float32)), "integer"),
        "block size": (dict(block_size=0), "`block_size` is 0"),
        "non-causal": (dict(causal=False), "causal only"),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_inputs_raise(case):
    args = dict(_inputs(8))
    change, message = _bad_cases()[case]
    args.update(change)
    with pytest.raises(ValueError, match=message):
        value_forget_attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("log_vgate"), **args)


def test_bad_decode_inputs_raise():
    q, k, v, av, af = (_inputs(3)[n] for n in INPUTS)
    state = decode.init_value_forget_attention_state(2, 2, 4, 2, 16, 8, jnp.float32)
    step = decode.value_forget_attention_step
    with pytest.raises(ValueError, match=r"`q` has shape \(2, 3, 16\)"):
        step(q[:, :, 0], k, v, av, state=state)
    with pytest.raises(ValueError, match="`prefill_block` is 0"):
        step(q, k, v, av, state=state, prefill_block=0)
    with pytest.raises(ValueError, match="`v` has shape"):
        step(q, k, v[..., :4], av, state=state)
    with pytest.raises(ValueError, match="`log_vgate` must be ≤ 0"):
        step(q, k, v, -av, state=state)
    with pytest.raises(ValueError, match="`prune_eps` is 2.0"):
        step(q, k, v, av, af, state=state, prune_eps=2.0)
    with pytest.raises(ValueError, match="`state` must be the ValueForgetAttentionState"):
        step(q, k, v, av, state={"k": state.k})
    with pytest.raises(ValueError, match="`num_kv_heads` = 3"):
        decode.init_value_forget_attention_state(2, 4, 4, 3, 16, 8, jnp.float32)
