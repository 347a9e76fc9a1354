"""Tests of the Pallas FiX kernels (kernels.value_forget_attention.pallas), interpreted on CPU.

Parity runs through the shared harness (`tests/kernels/harness.py`): the Pallas path against the package's
materialized reference, outputs and the gradients of q, k, v, log_vgate and log_fgate under a random
cotangent, with the "value_forget_attention" entries of the tolerance table (float32 1e-5 forward and
gradients: the kernels only reorder float32 sums, observed ≤ 2e-7 forward and ≤ 1.3e-6 on gradients at
T = 257, packed, scalar gate, for gates U(−3, 0), U(−20, 0) and U(−0.05, 0); bfloat16 2e-2: inputs rounded to
bf16, P and V' cast to bf16 for the P·V' matmul). A float64 numpy oracle judges strong gates.

Most tests run the generic interpreter, i.e. the GPU-shaped kernels Triton gets (F padded to a power of two,
the [C, C, Dv] diagonal decays). The `tpu_layout` tests run the TPU-shaped kernels (head-major tiles, gate
rows, the diagonal block walked row by row with VMEM scratch) under Pallas's TPU interpreter inside
`lowering.interpret_as("tpu")`; they use tiny shapes, since that interpreter simulates every load and store.
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
from test_segment_isolation import BOUNDS, POISONED
from tolerances import tolerance

from icml26zoo.kernels import _dispatch
from icml26zoo.kernels._common import attention_tiles, lowering
from icml26zoo.kernels.value_forget_attention import pallas, reference, tuning, value_forget_attention

TOL = tolerance("value_forget_attention")
BLOCK = 16  # small blocks so that T = 63, 100, 129 span several blocks plus a padded tail
INPUTS = FIX_CASE.time_inputs


@functools.cache
def _case(with_fgate: bool) -> harness.OpCase:
    """The FiX harness case with the Pallas path as its only fast path."""
    return dataclasses.replace(fix_case(with_fgate), fast={"pallas": pallas.value_forget_attention})


def _pallas(*args, **kwargs) -> jax.Array:
    return pallas.value_forget_attention(*args, block_size=BLOCK, **kwargs)


def _inputs(length: int, **kwargs) -> dict[str, jax.Array]:
    return make_fix_inputs(np.random.default_rng(length), 2, length, **kwargs)


# Every T runs once without segments or scalar gate and once packed with the scalar gate (GQA in both):
# each case costs one interpret-mode compile of the three kernels, the file's main runtime.
@pytest.mark.parametrize(("packed", "with_fgate"), [(False, False), (True, True)], ids=["gqa-vgate", "packed-fgate"])
@pytest.mark.parametrize("length", harness.LENGTHS)
def test_parity_forward_and_all_gradients(length, packed, with_fgate):
    harness.check_forward_and_grads(_case(with_fgate), length, chunk_size=BLOCK, packed=packed)


def test_strong_gates_match_float64():
    """Gates U(−20, 0) at T = 257: |Λ_T| ≈ 2.6e3, so any difference of global float32 cumsums shows up."""
    args = [_inputs(257, gate=(-20.0, 0.0))[n] for n in INPUTS]
    u = jax.jit(functools.partial(_pallas, log_fgate=args[4]))(*args[:4])
    harness.assert_close(u, fix_float64_oracle(*args)[0], TOL, what="u")


@pytest.mark.parametrize("with_fgate", [False, True], ids=["vgate", "vgate+fgate"])
def test_very_strong_gates_are_finite(with_fgate, length=63):
    """log gates = −1e4: every off-diagonal decay underflows to 0; outputs and all gradients stay finite."""
    case = _case(with_fgate)
    inputs = {n: x for n, x in _inputs(length).items() if n in case.time_inputs} | {"segment_ids": None}
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
    x = _inputs(100, dv=16)
    zeros = jnp.zeros(x["q"].shape, jnp.float32)
    expected = jax.nn.dot_product_attention(x["q"], x["k"], x["v"], is_causal=True)
    harness.assert_close(jax.jit(_pallas)(x["q"], x["k"], x["v"], zeros), expected, TOL, what="zero gates")


def test_no_gradient_crosses_a_segment_boundary():
    """A loss on the second segment's outputs gives exactly zero gradient to every first-segment input."""
    x = _inputs(40)
    seg = jnp.asarray(np.repeat([[1] * 17 + [2] * 23], 2, axis=0), jnp.int32)
    weights = jnp.asarray(np.random.default_rng(1).normal(size=x["log_vgate"].shape), jnp.float32)
    weights = weights * (seg == 2).astype(jnp.float32)[..., None, None]

    def loss(q, k, v, av, af):
        return jnp.sum(_pallas(q, k, v, av, log_fgate=af, segment_ids=seg) * weights)

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))(*[x[n] for n in INPUTS])
    for name, grad in zip(INPUTS, grads, strict=True):
        np.testing.assert_array_equal(np.asarray(grad[:, :17]), 0.0, err_msg=f"d{name} leaked across segments")


def test_bfloat16_forward():
    x = _inputs(63, dtype=jnp.bfloat16)
    args = [x[n] for n in INPUTS]
    u = jax.jit(functools.partial(_pallas, log_fgate=args[4]))(*args[:4])
    assert u.dtype == jnp.bfloat16
    expected = reference.value_forget_attention(*args[:4], log_fgate=args[4])
    harness.assert_close(u, expected, tolerance("value_forget_attention", jnp.bfloat16), what="u bf16")


def test_api_dispatch_runs_pallas_on_every_backend(monkeypatch):
    """implementation="pallas" with the default block (T = 100: several blocks and a tail) matches the
    reference, and the api accepts it whatever the default backend says: the kernel flavour is chosen when
    the function is lowered (here for the CPU: interpreted), not from `jax.default_backend()`."""
    args = [_inputs(100)[n] for n in INPUTS]
    fn = jax.jit(lambda *x: value_forget_attention(*x[:4], log_fgate=x[4], implementation="pallas"))
    expected = reference.value_forget_attention(*args[:4], log_fgate=args[4])
    harness.assert_close(fn(*args), expected, TOL, what="api pallas")
    short = [x[:, :8] for x in args]
    expected = reference.value_forget_attention(*short[:4], log_fgate=short[4])
    for backend in ["gpu", "tpu"]:
        monkeypatch.setattr(_dispatch.jax, "default_backend", lambda backend=backend: backend)
        u = value_forget_attention(*short[:4], log_fgate=short[4], implementation="pallas")
        harness.assert_close(u, expected, TOL, what=f"api pallas, default backend {backend}")


# Distinct function objects: the harness caches one jit per function, and a trace made inside
# `interpret_as("tpu")` must never serve a call outside it (or the reverse).
_TPU_PATH = functools.partial(pallas.value_forget_attention)
_GENERIC_PATH = functools.partial(pallas.value_forget_attention)


def _tpu_case(with_fgate: bool) -> harness.OpCase:
    return dataclasses.replace(fix_case(with_fgate), fast={"pallas_tpu": _TPU_PATH})


@pytest.mark.parametrize(("packed", "with_fgate", "length"), [(True, True, 37), (False, False, 20)],
                         ids=["packed-fgate-T37", "vgate-T20"])
def test_tpu_layout_parity_forward_and_all_gradients(packed, with_fgate, length):
    """The TPU-shaped kernels: T = 37 is three 16-step blocks and a padded tail (packed, scalar gate, GQA);
    T = 20 two blocks with the value gate only."""
    with lowering.interpret_as("tpu"):
        harness.check_forward_and_grads(_tpu_case(with_fgate), length, chunk_size=BLOCK, packed=packed, batch=1)


def test_tpu_layout_bfloat16():
    """bfloat16 q, k, v through the TPU-shaped kernels (bf16 tiles and matmuls, the backward run too): the
    forward at the bfloat16 entry of the table (it bounds no gradient)."""
    case = _tpu_case(True)
    bf16 = dataclasses.replace(case, make_inputs=functools.partial(make_fix_inputs, dtype=jnp.bfloat16))
    with lowering.interpret_as("tpu"):
        harness.check_forward_and_grads(bf16, 20, chunk_size=BLOCK, packed=True, batch=1,
                                        tol=tolerance("value_forget_attention", jnp.bfloat16))


@pytest.mark.parametrize("target", ["generic", "tpu"])
def test_nan_scalar_gate_stays_in_its_segment(target):
    """NaN log_fgate on positions 10:20 of row 0 (a segment straddling a block edge, clean segments on both
    sides in the same blocks), straight into the kernels: it reaches no other segment."""
    path = _TPU_PATH if target == "tpu" else _GENERIC_PATH
    case = dataclasses.replace(fix_case(True), fast={target: path})
    with lowering.interpret_as(target):
        check_nan_gate_stays_in_its_segment(case, target, "log_fgate", BOUNDS, POISONED, BLOCK)


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
