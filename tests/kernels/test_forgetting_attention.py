"""Parity, numerics, decode and validation tests of kernels.forgetting_attention (all implementations).

Parity, packing and decode run through the shared harness (`tests/kernels/harness.py`) with the
"forgetting_attention" entries of the tolerance table: max|actual − expected| / max(1, max|expected|) ≤ 1e-5
in float32 for the forward and every gradient (the blocked paths only reorder float32 sums; observed
≤ 3e-7 forward and ≤ 8e-7 on gradients at T ≤ 257 with gates U(−3, 0)), 2e-2 for bfloat16 inputs. A path
that differences a global float32 cumsum is 5.6e-5 off the float64 oracle at T = 257 with gates U(−20, 0),
so 1e-5 catches it.
"""

from __future__ import annotations

import dataclasses
import functools

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import FOX_CASE, FOX_INPUTS, HKV, D, H, make_fox_inputs
from tolerances import tolerance

from icml26zoo import kernels
from icml26zoo.kernels import forgetting_attention
from icml26zoo.kernels._dispatch import select_implementation
from icml26zoo.kernels.forgetting_attention import (
    ForgettingAttentionState,
    api,
    forgetting_attention_step,
    init_forgetting_attention_state,
    pallas,
    reference,
    xla,
)

TOL = tolerance("forgetting_attention")
BLOCK = 16  # small blocks so that T = 63, 100, 129 span several blocks plus a padded tail


def _one_token_step(q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array, *,
                    state: ForgettingAttentionState) -> tuple[jax.Array, ForgettingAttentionState]:
    """The decode step on one token ([B, H, D] inputs, as the harness slices them)."""
    o, state = forgetting_attention_step(q[:, None], k[:, None], v[:, None], log_fgate[:, None], state=state)
    return o[:, 0], state


CASE = dataclasses.replace(
    FOX_CASE,
    fast={"xla": xla.forgetting_attention, "pallas": pallas.forgetting_attention},
    step=_one_token_step,
    init_state=lambda inputs: init_forgetting_attention_state(*inputs["q"].shape[:2], H, HKV, D, jnp.float32),
)
# Every path by name for the op-specific tests below: the reference and the fast paths at BLOCK.
PATHS = {"reference": reference.forgetting_attention,
         **{name: functools.partial(fn, block_size=BLOCK) for name, fn in CASE.fast.items()}}


# Compile once, check many: each parity case compiles one VJP per path (reference, xla, pallas); the checks below
# run on these programs where their shapes allow. GQA everywhere; T = 1, T = 63 (3 blocks of 16 + 15) and
# T = 129 (8 blocks + 1), plain rows, and T = 129 packed: remainder 1 and another, T = 1, packed rows with a
# padded tail. T = 129 plain also serves the segments alone of the packed-rows check.
PARITY = [(1, False), (63, False), (129, False), (129, True)]


@pytest.mark.parametrize("length, packed", PARITY, ids=[f"{t}-{'packed' if p else 'gqa'}" for t, p in PARITY])
def test_parity_forward_and_all_gradients(length, packed):
    harness.check_forward_and_grads(CASE, length, chunk_size=BLOCK, packed=packed)


def test_parity_other_block_sizes():
    """Block 64 (xla) and the api's default dispatch (xla with its default block on CPU), packed, T = 129."""
    harness.check_forward_and_grads(CASE, 129, chunk_size=64, packed=True, impls=["xla"])
    harness.check_forward_and_grads(dataclasses.replace(CASE, fast={"api": forgetting_attention}), 129, packed=True)


@pytest.mark.parametrize("impl", ["xla", "pallas"])
def test_packed_equals_loop_over_segments(impl):
    """Outputs and every gradient of packed rows (T = 129: segments of 16, 1, 31, 81 / 31, 1, 68, 29, edges on
    and inside blocks) equal each segment run alone, on the programs of the T = 129 parity cases."""
    bounds = [[0, 16, 17, 48, 129], [0, 31, 32, 100, 129]]
    harness.check_packed_equals_segments_alone(CASE, bounds, impl=impl, chunk_size=BLOCK)


@pytest.mark.parametrize("length", [1, 63])
def test_decode_equals_forward(length):
    """One token at a time through `forgetting_attention_step` equals the reference forward (read from the
    reference's parity program of this length)."""
    harness.check_decode_equals_forward(CASE, length, via_vjp=True)


def test_chunked_prefill_equals_forward():
    """Chunks of 1, 5, 1, 20 and 36 tokens, with and without the gate, equal the reference forward."""
    x = harness.make_case_inputs(CASE, 63)
    step = harness.jit(forgetting_attention_step)
    for gated in (True, False):
        args = (x["q"], x["k"], x["v"], x["log_fgate"] if gated else None)
        state = init_forgetting_attention_state(2, 63, H, HKV, D, jnp.float32, gated=gated)
        outputs, start = [], 0
        for size in (1, 5, 1, 20, 36):
            o, state = step(*[None if a is None else a[:, start:start + size] for a in args], state=state)
            outputs.append(o)
            start += size
        # Gated: the reference's T = 63 parity program; ungated: the reference as it is.
        expected = harness.outputs(CASE, "reference", x) if gated else reference.forgetting_attention(*args)
        harness.assert_close(jnp.concatenate(outputs, axis=1), expected, TOL, what=f"chunked prefill, gated={gated}")
        assert int(state.index) == 63


def _float64_oracle(q: jax.Array, k: jax.Array, v: jax.Array, a: jax.Array) -> np.ndarray:
    """Direct float64 numpy FoX: logits from float64 prefix sums (exact enough to judge float32 paths)."""
    q, k, v, a = (np.asarray(x, np.float64) for x in (q, k, v, a))
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    lam = np.cumsum(a, axis=1)  # [B, T, H]
    s = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    s = s + np.transpose(lam, (0, 2, 1))[..., :, None] - np.transpose(lam, (0, 2, 1))[..., None, :]
    t = q.shape[1]
    s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhts,bshd->bthd", p / p.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("impl", list(PATHS))
def test_strong_gates_match_float64(impl):
    """Gates U(−20, 0) at T = 257: |Λ_T| ≈ 2.6e3; a global float32 cumsum is 5.6e-5 off here (measured)."""
    x = make_fox_inputs(np.random.default_rng(257), 2, 257, gate=(-20.0, 0.0))
    args = [x[n] for n in FOX_INPUTS]
    harness.assert_close(harness.jit(PATHS[impl])(*args), _float64_oracle(*args), TOL, what="o")


@pytest.mark.parametrize("impl", list(PATHS))
def test_zero_gate_is_causal_dot_product_attention(impl):
    """A zero log gate (on the T = 129 plain parity program) and no gate at all are causal softmax attention."""
    x = harness.make_case_inputs(CASE, 129, seed=100)
    q, k, v = x["q"], x["k"], x["v"]
    expected = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    zeros = x | {"log_fgate": jnp.zeros(q.shape[:3], jnp.float32)}
    block = None if impl == "reference" else BLOCK
    harness.assert_close(harness.outputs(CASE, impl, zeros, block), expected, TOL, what="zeros gate")
    harness.assert_close(harness.jit(PATHS[impl])(q, k, v, None), expected, TOL, what="no gate")


@pytest.mark.parametrize("length", [1, 63])
@pytest.mark.parametrize("impl", list(PATHS))
def test_very_strong_gates_are_finite_and_local(impl, length):
    """log f = −1e4: every query sees only itself, o_i = v_i of its kv head; all gradients finite."""
    inputs = harness.make_case_inputs(CASE, length)
    inputs["log_fgate"] = jnp.full(inputs["q"].shape[:3], -1e4, jnp.float32)
    out_shape = jax.ShapeDtypeStruct(inputs["q"].shape, jnp.float32)
    cotangent = harness.random_cotangents(np.random.default_rng(1), out_shape)
    o, grads = harness.forward_and_grads(CASE, impl, inputs, cotangent, None if impl == "reference" else BLOCK)
    harness.assert_close(o, jnp.repeat(inputs["v"], 2, axis=2), TOL, what="o")
    for g in grads.values():
        assert np.all(np.isfinite(np.asarray(g)))
    # Only the diagonal survives: P_ii = 1 so dS = 0 everywhere and no gradient reaches q, k or the gate.
    harness.assert_close(grads["q"], jnp.zeros_like(inputs["q"]), TOL, kind="grad", what="dq")
    harness.assert_close(grads["log_fgate"], jnp.zeros_like(inputs["log_fgate"]), TOL, kind="grad", what="dlog_fgate")


@pytest.mark.parametrize("impl", list(PATHS))
def test_no_gradient_crosses_a_segment_boundary(impl):
    """A loss on the second segment's outputs gives exactly zero gradient to every first-segment input (on the
    T = 129 packed parity program: segments 0:17 and 17:129, the edge inside a block)."""
    x = harness.make_case_inputs(CASE, 129, seed=40, packed=True)
    x["segment_ids"] = jnp.asarray(np.repeat([[1] * 17 + [2] * 112], 2, axis=0), jnp.int32)
    mask = (x["segment_ids"] == 2).astype(jnp.float32)[..., None, None]
    cotangent = jnp.asarray(np.random.default_rng(1).normal(size=x["q"].shape), jnp.float32) * mask
    _, grads = harness.forward_and_grads(CASE, impl, x, cotangent, None if impl == "reference" else BLOCK)
    for name in FOX_INPUTS:
        np.testing.assert_array_equal(np.asarray(grads[name][:, :17]), 0.0, err_msg=f"d{name} leaked across segments")


@pytest.mark.parametrize("impl", ["xla", "pallas"])
def test_bfloat16_forward(impl):
    x = make_fox_inputs(np.random.default_rng(63), 2, 63, dtype=jnp.bfloat16)
    args = [x[n] for n in FOX_INPUTS]
    o = harness.jit(PATHS[impl])(*args)
    assert o.dtype == jnp.bfloat16
    harness.assert_close(o, reference.forgetting_attention(*args), tolerance("forgetting_attention", jnp.bfloat16),
                         what="o bf16")


def test_implementation_dispatch(monkeypatch):
    """None picks the blocked XLA path, names and sequences select their path (the paths' numerics are the parity
    cases'), the api's default runs and matches the reference, unknown names raise, and an explicit choice that
    cannot run never falls back."""
    pick = functools.partial(select_implementation, "forgetting_attention", implementations=api._IMPLEMENTATIONS,
                             defaults=api._DEFAULT)
    for impl, fn in [(None, xla), ("reference", reference), ("xla", xla), ("pallas", pallas),
                     (("pallas", "xla"), pallas)]:
        assert pick(impl) is fn.forgetting_attention, impl
    args = [make_fox_inputs(np.random.default_rng(8), 2, 8)[n] for n in FOX_INPUTS]
    harness.assert_close(harness.jit(forgetting_attention)(*args), reference.forgetting_attention(*args), TOL,
                         what="default path")
    with pytest.raises(ValueError, match="unknown"):
        forgetting_attention(*args, implementation="cuda")
    # "pallas" runs on every backend now: register it for TPU only to see an explicit choice refuse to fall back.
    monkeypatch.setitem(api._IMPLEMENTATIONS, "pallas", (api._IMPLEMENTATIONS["pallas"][0], ("tpu",)))
    with pytest.raises(RuntimeError, match="pallas"):
        forgetting_attention(*args, implementation="pallas")
    # A sequence is tried in order: here "pallas" cannot run, "xla" can.
    assert pick(["pallas", "xla"]) is xla.forgetting_attention


def _bad_cases() -> dict[str, tuple[dict, str]]:
    x = make_fox_inputs(np.random.default_rng(8), 2, 8)
    k, v, a = x["k"], x["v"], x["log_fgate"]
    seg = jnp.zeros((2, 8), jnp.int32)
    return {
        "q rank": (dict(q=x["q"][0]), "`q` has shape"),
        "k length": (dict(k=k[:, :4]), "`k` has shape"),
        "heads": (dict(k=jnp.zeros((2, 8, 3, 16)), v=jnp.zeros((2, 8, 3, 16))), "divides H = 4"),
        "v shape": (dict(v=v[..., :8]), "`v` has shape"),
        "dtype": (dict(k=k.astype(jnp.bfloat16)), "share one floating dtype"),
        "int q": (dict(q=x["q"].astype(jnp.int32)), "share one floating dtype"),
        "gate shape": (dict(log_fgate=a[:, :, :2]), r"`log_fgate` has shape \(2, 8, 2\)"),
        "positive gate": (dict(log_fgate=a.at[0, 3, 1].set(0.5)), "must be finite and ≤ 0"),
        "segment shape": (dict(segment_ids=seg[:, :5]), r"`segment_ids` has shape \(2, 5\)"),
        "segment dtype": (dict(segment_ids=seg.astype(jnp.float32)), "integer"),
        "non-causal": (dict(causal=False), "causal only"),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_inputs_raise(case):
    args = make_fox_inputs(np.random.default_rng(8), 2, 8)
    change, message = _bad_cases()[case]
    args.update(change)
    with pytest.raises(ValueError, match=message):
        forgetting_attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("log_fgate"), **args)


def test_bad_decode_inputs_raise():
    x = make_fox_inputs(np.random.default_rng(3), 2, 3)
    q, k, v, a = (x[n] for n in FOX_INPUTS)
    state = init_forgetting_attention_state(2, 4, H, HKV, D, jnp.float32)
    with pytest.raises(ValueError, match=r"`q` has shape \(2, 3, 16\)"):
        forgetting_attention_step(q[:, :, 0], k, v, a, state=state)
    with pytest.raises(ValueError, match="`v` has shape"):
        forgetting_attention_step(q, k, v[..., :4], a, state=state)
    with pytest.raises(ValueError, match="`log_fgate` is None"):
        forgetting_attention_step(q, k, v, None, state=state)
    with pytest.raises(ValueError, match="`state` must be the ForgettingAttentionState"):
        forgetting_attention_step(q, k, v, a, state={"k": state.k})
    with pytest.raises(ValueError, match="`num_kv_heads` = 3"):
        init_forgetting_attention_state(2, 4, H, 3, D, jnp.float32)


def test_decode_past_capacity_raises_eagerly_and_under_checked_jit():
    """A step that would write past the state's S slots raises (dynamic_update_slice would clamp the write and
    return wrong tokens): a ValueError naming the capacity and the position, under jit through `checked`."""
    x = make_fox_inputs(np.random.default_rng(4), 1, 2)
    q, k, v, a = (x[n] for n in FOX_INPUTS)
    state = init_forgetting_attention_state(1, 3, H, HKV, D, jnp.float32)
    _, full = forgetting_attention_step(q, k, v, a, state=state)  # index 2 of 3: two more tokens do not fit
    with pytest.raises(ValueError, match=r"forgetting_attention_step: writing 2 token\(s\) at position 2 .*capacity 3"):
        forgetting_attention_step(q, k, v, a, state=full)
    step = harness.jit(kernels.checked(forgetting_attention_step))
    jax.block_until_ready(step(q, k, v, a, state=state))
    with pytest.raises(Exception, match=r"forgetting_attention_step: writing 2 token\(s\) at position 2 .*capacity 3"):
        jax.block_until_ready(step(q, k, v, a, state=full))
