"""Tests of the Pallas FiX kernels (kernels.value_forget_attention.pallas), interpreted on CPU.

Parity runs through the shared harness (`tests/kernels/harness.py`): the Pallas path against the package's
materialized reference, outputs and the gradients of q, k, v, log_vgate and log_fgate under a random
cotangent, with the "value_forget_attention" entries of the tolerance table (float32 1e-5 forward and
gradients: the kernels only reorder float32 sums, observed ≤ 2e-7 forward and ≤ 1.3e-6 on gradients at
T = 257, packed, scalar gate, for gates U(−3, 0), U(−20, 0) and U(−0.05, 0); bfloat16 2e-2: inputs rounded to
bf16, P and V' cast to bf16 for the P·V' matmul). A float64 numpy oracle judges strong gates.

Most tests run the generic interpreter, i.e. the GPU-shaped kernels Triton gets (F padded to a power of two,
the [C, C, Dv] diagonal decays). TestTpuLayout runs the TPU-shaped kernels (head-major tiles, gate rows, the
diagonal block walked row by row with VMEM scratch) under Pallas's TPU interpreter inside one
`lowering.interpret_as("tpu")`; it uses tiny shapes, since that interpreter simulates every load and store.
The lowering itself (Triton, Mosaic) is checked by export in tests/kernels/test_lowering.py.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import FIX_CASE, check_nan_gate_stays_in_its_segment, fix_case, fix_float64_oracle, make_fix_inputs
from tolerances import tolerance

from icml26zoo.kernels import _dispatch
from icml26zoo.kernels._common import attention_tiles, lowering
from icml26zoo.kernels.value_forget_attention import pallas, reference, tuning, value_forget_attention

TOL = tolerance("value_forget_attention")
BLOCK = 16  # small blocks so that T = 63, 100, 129 span several blocks plus a padded tail
INPUTS = FIX_CASE.time_inputs


@functools.cache
def _case(with_fgate: bool, dv: int = 8) -> harness.OpCase:
    """The FiX harness case with the Pallas path as its only fast path."""
    return dataclasses.replace(fix_case(with_fgate, dv), fast={"pallas": pallas.value_forget_attention})


def _pallas(*args, **kwargs) -> jax.Array:
    return pallas.value_forget_attention(*args, block_size=BLOCK, **kwargs)


def _inputs(length: int, **kwargs) -> dict[str, jax.Array]:
    return make_fix_inputs(np.random.default_rng(length), 2, length, **kwargs)


# Compile once, check many: each parity case compiles the reference's and the kernels' VJP (one interpret-mode
# compile of the three kernels, the file's main cost) and the checks below run on these programs. GQA in all;
# T = 1 and T = 63 (3 blocks of 16 + 15) plain with the value gate only (Dv = 16, which the zero-gate check
# needs); T = 129 (8 blocks + 1) packed with both gates (Dv = 8).
PARITY = [(1, False, False, 16), (63, False, False, 16), (129, True, True, 8)]


@pytest.mark.parametrize(("length", "packed", "with_fgate", "dv"), PARITY,
                         ids=[f"{t}-{'packed-fgate' if p else 'gqa-vgate'}" for t, p, _, _ in PARITY])
def test_parity_forward_and_all_gradients(length, packed, with_fgate, dv):
    harness.check_forward_and_grads(_case(with_fgate, dv), length, chunk_size=BLOCK, packed=packed)


def test_strong_gates_match_float64():
    """Gates U(−20, 0) at T = 257: |Λ_T| ≈ 2.6e3, so any difference of global float32 cumsums shows up."""
    args = [_inputs(257, gate=(-20.0, 0.0))[n] for n in INPUTS]
    u = harness.jit(functools.partial(_pallas, log_fgate=args[4]))(*args[:4])
    harness.assert_close(u, fix_float64_oracle(*args)[0], TOL, what="u")


@pytest.mark.parametrize("with_fgate", [False, True], ids=["vgate", "vgate+fgate"])
def test_very_strong_gates_are_finite(with_fgate):
    """log gates = −1e4: every off-diagonal decay underflows to 0; outputs and all gradients stay finite (on the
    parity programs: value gate at T = 63 plain, both gates at T = 129 packed)."""
    length, packed, _, dv = PARITY[2] if with_fgate else PARITY[1]
    case = _case(with_fgate, dv)
    inputs = harness.make_case_inputs(case, length, seed=length, packed=packed)
    inputs["log_vgate"] = jnp.full(inputs["log_vgate"].shape, -1e4, jnp.float32)
    if with_fgate:
        inputs["log_fgate"] = jnp.full(inputs["q"].shape[:3], -1e4, jnp.float32)
    shape = jax.ShapeDtypeStruct(inputs["q"].shape[:3] + inputs["v"].shape[-1:], jnp.float32)
    cotangent = harness.random_cotangents(np.random.default_rng(1), shape)
    u, grads = harness.forward_and_grads(case, "pallas", inputs, cotangent, BLOCK)
    for x in [u, *grads.values()]:
        assert np.all(np.isfinite(np.asarray(x)))
    u_ref, grads_ref = harness.forward_and_grads(case, "reference", inputs, cotangent)
    harness.assert_close(u, u_ref, TOL, what="u")
    for name in case.differentiable:
        harness.assert_close(grads[name], grads_ref[name], TOL, kind="grad", what=f"d{name}")
    if with_fgate:
        # Only the diagonal survives the scalar gate: P_ii = 1, so u_i = v_i of its kv head.
        harness.assert_close(u, jnp.repeat(inputs["v"], 2, axis=2), TOL, what="u")


def test_zero_gates_are_causal_dot_product_attention():
    """log_vgate ≡ 0 without the scalar gate is causal softmax attention (the T = 63 parity program)."""
    length, _, _, dv = PARITY[1]
    x = harness.make_case_inputs(_case(False, dv), length, seed=100)
    x["log_vgate"] = jnp.zeros(x["q"].shape, jnp.float32)
    expected = jax.nn.dot_product_attention(x["q"], x["k"], x["v"], is_causal=True)
    harness.assert_close(harness.outputs(_case(False, dv), "pallas", x, BLOCK), expected, TOL, what="zero gates")


def test_no_gradient_crosses_a_segment_boundary():
    """A loss on the second segment's outputs gives exactly zero gradient to every first-segment input (the
    T = 129 packed parity program: segments 0:17 and 17:129, the edge inside a block)."""
    length, _, _, dv = PARITY[2]
    case = _case(True, dv)
    x = harness.make_case_inputs(case, length, seed=40, packed=True)
    x["segment_ids"] = jnp.asarray(np.repeat([[1] * 17 + [2] * (length - 17)], 2, axis=0), jnp.int32)
    weights = jnp.asarray(np.random.default_rng(1).normal(size=x["log_vgate"].shape), jnp.float32)
    weights = weights * (x["segment_ids"] == 2).astype(jnp.float32)[..., None, None]
    _, grads = harness.forward_and_grads(case, "pallas", x, weights, BLOCK)
    for name in INPUTS:
        np.testing.assert_array_equal(np.asarray(grads[name][:, :17]), 0.0, err_msg=f"d{name} leaked across segments")


def test_bfloat16_forward():
    x = _inputs(63, dtype=jnp.bfloat16)
    args = [x[n] for n in INPUTS]
    u = harness.jit(functools.partial(_pallas, log_fgate=args[4]))(*args[:4])
    assert u.dtype == jnp.bfloat16
    expected = harness.jit(functools.partial(reference.value_forget_attention, log_fgate=args[4]))(*args[:4])
    harness.assert_close(u, expected, tolerance("value_forget_attention", jnp.bfloat16), what="u bf16")


def test_api_dispatch_runs_pallas_on_every_backend(monkeypatch):
    """implementation="pallas" with the default block (T = 129 packed, both gates: several blocks and a tail)
    matches the reference (its parity program), and the api accepts it whatever the default backend says: the
    kernel flavour is chosen when the function is lowered (here for the CPU: interpreted), not from
    `jax.default_backend()` (T = 1, against the reference's T = 1 parity program)."""
    length, _, _, dv = PARITY[2]
    x = harness.make_case_inputs(_case(True, dv), length, packed=True)
    fn = harness.jit(lambda x: value_forget_attention(x["q"], x["k"], x["v"], x["log_vgate"], log_fgate=x["log_fgate"],
                                                      segment_ids=x["segment_ids"], implementation="pallas"))
    harness.assert_close(fn(x), harness.outputs(_case(True, dv), "reference", x), TOL, what="api pallas")
    length, _, _, dv = PARITY[0]
    short = harness.make_case_inputs(_case(False, dv), length)
    expected = harness.outputs(_case(False, dv), "reference", short)
    for backend in ["gpu", "tpu"]:
        monkeypatch.setattr(_dispatch.jax, "default_backend", lambda backend=backend: backend)
        u = value_forget_attention(short["q"], short["k"], short["v"], short["log_vgate"], implementation="pallas")
        harness.assert_close(u, expected, TOL, what=f"api pallas, default backend {backend}")


# The NaN checks run on the packed parity shapes of each layout: generic T = 129 (B 2), TPU T = 37 (B 1).
NAN_BOUNDS = {"generic": [[0, 10, 20, 129], [0, 7, 129]], "tpu": [[0, 10, 20, 37]]}


def test_nan_scalar_gate_stays_in_its_segment():
    """NaN log_fgate on positions 10:20 of row 0 (a segment straddling a block edge, clean segments on both
    sides in the same blocks), straight into the kernels: it reaches no other segment. The generic interpreter
    (the CPU default) on the T = 129 packed parity program; the TPU layout's twin is in TestTpuLayout."""
    check_nan_gate_stays_in_its_segment(_case(True, PARITY[2][3]), "pallas", "log_fgate", NAN_BOUNDS["generic"],
                                        (0, 1), BLOCK)


# A distinct function object for the TPU-shaped path: the harness caches one jit per function, and a trace made
# inside `interpret_as("tpu")` must never serve a call outside it (or the reverse).
_TPU_PATH = functools.partial(pallas.value_forget_attention)


def _tpu_case(with_fgate: bool) -> harness.OpCase:
    return dataclasses.replace(fix_case(with_fgate), fast={"pallas_tpu": _TPU_PATH})


class TestTpuLayout:
    """The TPU-shaped kernels under Pallas's TPU interpreter. All tests of the class run inside one
    `interpret_as("tpu")` (entering and leaving it clears JAX's caches), so they share their compiled programs:
    the NaN check runs on the T = 37 parity program."""

    @pytest.fixture(autouse=True, scope="class")
    def _tpu_interpreter(self):
        with lowering.interpret_as("tpu"):
            yield

    @pytest.mark.parametrize(("packed", "with_fgate", "length"), [(True, True, 37), (False, False, 20)],
                             ids=["packed-fgate-T37", "vgate-T20"])
    def test_parity_forward_and_all_gradients(self, packed, with_fgate, length):
        """T = 37 is three 16-step blocks and a padded tail (packed, scalar gate, GQA); T = 20 two blocks with
        the value gate only."""
        harness.check_forward_and_grads(_tpu_case(with_fgate), length, chunk_size=BLOCK, packed=packed, batch=1)

    def test_nan_scalar_gate_stays_in_its_segment(self):
        """The generic test's check, NaN log_fgate on 10:20 of T = 37 (the packed parity program)."""
        check_nan_gate_stays_in_its_segment(_tpu_case(True), "pallas_tpu", "log_fgate", NAN_BOUNDS["tpu"], (0, 1),
                                            BLOCK)

    def test_bfloat16(self):
        """bfloat16 q, k, v (bf16 tiles and matmuls, the backward run too): the forward at the bfloat16 entry of
        the table (it bounds no gradient)."""
        bf16 = dataclasses.replace(_tpu_case(True), make_inputs=functools.partial(make_fix_inputs, dtype=jnp.bfloat16))
        harness.check_forward_and_grads(bf16, 20, chunk_size=BLOCK, packed=True, batch=1,
                                        tol=tolerance("value_forget_attention", jnp.bfloat16))


def test_block_config_defaults_fit_each_layout():
    for mode in lowering.MODES:
        cfg = tuning.for_platform(mode, jnp.float32)
        geo = attention_tiles.geometry(mode, 1000, cfg.block)
        assert geo.block == cfg.block, mode
        if lowering.is_tpu_layout(mode):
            assert geo.block % 128 == 0
        else:
            assert geo.block >= 16 and geo.block & (geo.block - 1) == 0


def test_no_trace_time_interpret_switch():
    """The interpret/Triton/Mosaic choice is made at lowering time (lowering.by_platform), not by an argument."""
    assert "interpret" not in inspect.signature(pallas.value_forget_attention).parameters
