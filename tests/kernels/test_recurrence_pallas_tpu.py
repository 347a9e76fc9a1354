"""The recurrences' Pallas paths built for TPU (head-major blocks, Mosaic's index maps) and run under Pallas's TPU
interpreter on CPU (`lowering.interpret_as("tpu")`): delta rule (DeltaNet, GDN, KDA), momentum delta rule,
SSD (scalar and diagonal decay) against the reference, forward and every gradient with random cotangents,
initial and final state, an odd length over several chunks, packed rows. The generic interpreter's parity
lives in each op's own test file. Segment isolation is enforced by each op's public entry before any path
runs, whatever the layout, and is tested for every implementation in test_segment_isolation.py.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import harness
import jax
import pytest
import test_delta_rule
import test_momentum_delta_rule
import test_ssd

from icml26zoo.kernels._common import lowering
from icml26zoo.kernels.delta_rule import gated_delta_rule
from icml26zoo.kernels.momentum_delta_rule import momentum_delta_rule
from icml26zoo.kernels.ssd import ssd

PATH = "pallas_tpu"
CHUNK = 16
# T = 37: three chunks of 16, the last one padded.
LENGTH = 37


def _on_tpu_interpreter(op: Callable[..., Any]) -> Callable[..., Any]:
    """op(..., implementation="pallas") traced with the TPU-shaped kernels (a new function object, so the
    harness compiles it apart from the generic-interpreter path)."""

    def run(**kwargs: Any) -> Any:
        with lowering.interpret_as("tpu"):
            return op(**kwargs, implementation="pallas")

    return run


def _tpu_case(case: harness.OpCase, op: Callable[..., Any]) -> harness.OpCase:
    return dataclasses.replace(case, fast={PATH: _on_tpu_interpreter(op)})


CASES = {
    "deltanet": _tpu_case(test_delta_rule.CASES["deltanet"], gated_delta_rule),
    "gdn": _tpu_case(test_delta_rule.CASES["gdn"], gated_delta_rule),
    "kda": _tpu_case(test_delta_rule.CASES["kda"], gated_delta_rule),
    "mdn": _tpu_case(test_momentum_delta_rule.CASE, momentum_delta_rule),
    "ssd_scalar": _tpu_case(test_ssd.CASES[False], ssd),
    "ssd_diagonal": _tpu_case(test_ssd.CASES[True], ssd),
}
OPS = pytest.mark.parametrize("op", list(CASES))


@pytest.fixture(autouse=True, scope="module")
def _fresh_traces() -> Iterator[None]:
    """The interpreter choice is made at trace time; a trace cached by an earlier test of the same shapes
    (the ops' own jits) would otherwise be reused with the generic interpreter."""
    jax.clear_caches()
    yield
    jax.clear_caches()


def test_the_tpu_build_runs_under_the_tpu_interpreter() -> None:
    x = harness.make_case_inputs(CASES["gdn"], 20, batch=1)
    jaxpr = str(jax.make_jaxpr(functools.partial(CASES["gdn"].fast[PATH], chunk_size=CHUNK))(**x))
    assert "InterpretParams" in jaxpr


@OPS
def test_tpu_build_matches_reference(op: str) -> None:
    harness.check_forward_and_grads(CASES[op], LENGTH, chunk_size=CHUNK, packed=True, batch=1, seed=3)

