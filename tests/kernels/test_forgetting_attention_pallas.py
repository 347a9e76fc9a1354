"""Tests of the Pallas FoX kernels' lowering-time layouts (kernels.forgetting_attention.pallas).

The generic-interpreter parity of the Pallas path (the GPU-shaped kernels, as Triton gets them) runs in
tests/kernels/test_forgetting_attention.py with every other path. This file checks what that one cannot:

* the TPU-shaped kernels (head-major tiles, gate rows [B, H, N, 1, C], the roll-doubling cumsum), run on CPU
  by Pallas's TPU interpreter inside `lowering.interpret_as("tpu")`, against the reference: outputs and every
  gradient, an odd length over several blocks, packed segment ids, GQA (tolerance "forgetting_attention");
* NaN isolation inside the kernels: a NaN log gate handed straight to them reaches no other segment (the
  public entry's isolation, whatever the layout, is tested in test_segment_isolation.py);
* the block settings (`tuning.for_platform`, `attention_tiles.geometry`) and that the trace-time
  `interpret=` switch is gone.

Shapes are tiny: the TPU interpreter simulates every load and store.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect

import harness
import jax.numpy as jnp
import pytest
from attention_cases import FOX_CASE, check_nan_gate_stays_in_its_segment
from test_segment_isolation import BOUNDS, POISONED
from tolerances import tolerance

from icml26zoo.kernels._common import attention_tiles, lowering
from icml26zoo.kernels.forgetting_attention import pallas, tuning

BLOCK = 16
# A distinct function object for the TPU-shaped path: the harness caches one jit per function, and a trace made
# inside `interpret_as("tpu")` must never serve a call outside it (or the reverse).
_TPU_PATH = functools.partial(pallas.forgetting_attention)
TPU_CASE = dataclasses.replace(FOX_CASE, fast={"pallas_tpu": _TPU_PATH})
GENERIC_CASE = dataclasses.replace(FOX_CASE, fast={"pallas": pallas.forgetting_attention})


def test_nan_log_gate_stays_in_its_segment():
    """NaN log_fgate on positions 10:20 of row 0 (a segment straddling a block edge, clean segments on both
    sides in the same blocks), straight into the kernels, generic interpreter (the CPU default); the TPU
    layout's twin is in TestTpuLayout."""
    check_nan_gate_stays_in_its_segment(GENERIC_CASE, "pallas", "log_fgate", BOUNDS, POISONED, BLOCK)


class TestTpuLayout:
    """The TPU-shaped kernels under Pallas's TPU interpreter. All tests of the class run inside one
    `interpret_as("tpu")` (entering and leaving it clears JAX's caches), so they share their compiled programs:
    the NaN check runs on the T = 37 parity program."""

    @pytest.fixture(autouse=True, scope="class")
    def _tpu_interpreter(self):
        with lowering.interpret_as("tpu"):
            yield

    @pytest.mark.parametrize(("packed", "length"), [(True, 37), (False, 20)], ids=["packed-T37", "plain-T20"])
    def test_parity_forward_and_all_gradients(self, packed, length):
        """T = 37: three 16-step blocks and a padded tail; T = 20: two blocks, no segments."""
        harness.check_forward_and_grads(TPU_CASE, length, chunk_size=BLOCK, packed=packed, batch=1)

    def test_nan_log_gate_stays_in_its_segment(self):
        """The generic test's check: NaN log_fgate on 10:20 of T = 37 (the packed parity program)."""
        check_nan_gate_stays_in_its_segment(TPU_CASE, "pallas_tpu", "log_fgate", [[0, 10, 20, 37]], (0, 1), BLOCK)

    def test_without_gate_matches_reference(self):
        """log_fgate None skips the gate refs in every kernel (plain causal attention), packed, T = 20 (two
        blocks, the last partial; was T = 33)."""
        no_gate = dataclasses.replace(TPU_CASE, make_inputs=lambda rng, b, t: {
            **FOX_CASE.make_inputs(rng, b, t), "log_fgate": None}, differentiable=("q", "k", "v"))
        harness.check_forward_and_grads(no_gate, 20, chunk_size=BLOCK, packed=True, batch=1)

    def test_bfloat16(self):
        """bfloat16 q, k, v (bf16 tiles and matmuls, the backward run too): the forward at the bfloat16 entry of
        the table (it bounds no gradient)."""
        bf16 = dataclasses.replace(TPU_CASE, make_inputs=functools.partial(FOX_CASE.make_inputs, dtype=jnp.bfloat16))
        harness.check_forward_and_grads(bf16, 20, chunk_size=BLOCK, packed=True, batch=1,
                                        tol=tolerance("forgetting_attention", jnp.bfloat16))


def test_block_config_defaults_fit_each_layout():
    for mode in lowering.MODES:
        for dtype in (jnp.float32, jnp.bfloat16):
            cfg = tuning.for_platform(mode, dtype)
            geo = attention_tiles.geometry(mode, 1000, cfg.block)
            assert geo.block == cfg.block, (mode, dtype)
            if lowering.is_tpu_layout(mode):
                assert geo.block % 128 == 0
            else:
                assert geo.block >= 16 and geo.block & (geo.block - 1) == 0


@pytest.mark.parametrize(("mode", "length", "block", "expected"), [
    ("triton", 37, 16, (16, 48)), ("triton", 37, 20, (32, 64)), ("triton", 5, 64, (16, 16)),
    ("interpret", 200, 32, (32, 224)), ("mosaic_tpu", 37, 16, (16, 48)), ("mosaic_tpu", 200, 128, (128, 256)),
    ("tpu_interpret", 5, 128, (16, 16)), ("mosaic_tpu", 37, 20, (32, 64)),
])
def test_geometry_rounds_blocks_per_layout(mode, length, block, expected):
    """GPU layouts: powers of two ≥ 16 (Triton); TPU layouts: multiples of 16 rows (Mosaic's (8, 128) rule,
    bf16 packing); the padded length is a multiple of the block."""
    geo = attention_tiles.geometry(mode, length, block)
    assert (geo.block, geo.padded) == expected


def test_bad_block_size_raises():
    with pytest.raises(ValueError, match="block_size"):
        tuning.for_platform("triton", jnp.float32).with_block("forgetting_attention", 0)


def test_no_trace_time_interpret_switch():
    """The interpret/Triton/Mosaic choice is made at lowering time (lowering.by_platform), not by an argument."""
    assert "interpret" not in inspect.signature(pallas.forgetting_attention).parameters
