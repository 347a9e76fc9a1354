"""Packed segments cannot poison each other: a NaN or an inf in one segment's inputs reaches no other
segment's outputs, final state or input gradients, in every implementation of every op registered in
`kernels.registry.SEGMENTED_OPS` (the harness's `check_nan_segment_isolation`): a new op is covered by
registering it, and `test_every_op_with_segment_ids_is_registered` fails for one that is not.

Each op goes through its public entry with `implementation=` naming the path: the entry zeroes every position
holding a non-finite input before the path runs (`segments.quarantine`; a masked zero weight times a NaN in
a matmul over time is still NaN, so masking the weights alone cannot keep a NaN out) and puts NaN back on the
bad segment's outputs, so the run with the bad segment equals the clean run everywhere else. One tiny shape per op: two
rows of T = 40 with chunks / blocks of 16, the poisoned segment 10:20 of row 0 straddling a chunk edge with
clean segments on both sides in the same chunks. Inputs every segment reads (the long convolution's filter
`h`, the selective scan's A and D) get gradients from every segment, so theirs are left out of the check
(see the harness docstring).

Segments are contiguous runs of equal ids in every op: ids 1, 2, 1 are three segments, checked against the
same rows with ids 0, 1, 2 for every implementation of every registered op.
"""

from __future__ import annotations

import functools
import inspect

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import TOLERANCES, Tol, tolerance

from icml26zoo import kernels
from icml26zoo.kernels import registry

BOUNDS = [[0, 10, 20, 40], [0, 7, 40]]
POISONED = (0, 1)  # row 0, positions 10:20
CHUNK = 16


def _tolerance(name: str) -> Tol:
    """The op's entry of the float32 table, or the default float32 bound where it has none."""
    return tolerance(name if name in TOLERANCES[jnp.dtype(jnp.float32)] else "default")


def _case(op: registry.SegmentedOp) -> harness.OpCase:
    """The public op with every implementation of its dispatch table as one OpCase (the reference too)."""
    paths = {impl: functools.partial(op.fn, implementation=impl, **op.static) for impl in op.implementations}
    differentiable = op.time_inputs + (() if op.state_input is None else (op.state_input,))
    return harness.OpCase(name=op.name, make_inputs=op.example, reference=paths["reference"], fast=paths,
                          differentiable=differentiable, time_inputs=op.time_inputs, state_input=op.state_input,
                          returns_state=op.state_input is not None, chunk_arg=op.chunk_arg)


CASES = {key: _case(op) for key, op in registry.SEGMENTED_OPS.items()}
PARAMS = [(op, impl) for op, case in CASES.items() for impl in case.fast]


@pytest.mark.parametrize("op, impl", PARAMS)
def test_bad_values_in_one_segment_stay_in_it(op: str, impl: str) -> None:
    """Isolation, then (on the same compiled VJP: same shapes) the segment convention."""
    spec = registry.SEGMENTED_OPS[op]
    tol = _tolerance(spec.name)
    harness.check_nan_segment_isolation(CASES[op], impl, BOUNDS, POISONED, chunk_size=CHUNK, shared=spec.shared,
                                        tol=tol)
    _check_segments_are_runs(CASES[op], impl, tol)


def _check_segments_are_runs(case: harness.OpCase, impl: str, tol: Tol) -> None:
    """Ids 1, 2, 1 (row 0) and 4, 2 (row 1) are the segments of the runs 0, 1, 2 and 0, 1: equal outputs and
    gradients. Non-monotone ids are not "one segment per id value": the state resets wherever the id changes."""
    inputs = harness.make_case_inputs(case, 0, bounds=BOUNDS)
    runs = np.asarray(inputs["segment_ids"])
    relabelled = np.stack([np.array([1, 2, 1])[runs[0]], np.array([4, 2])[runs[1]]]).astype(np.int32)
    shapes = jax.eval_shape(lambda i: case.reference(**i), inputs)
    cotangents = harness.random_cotangents(np.random.default_rng(2), shapes)
    want = harness.forward_and_grads(case, impl, inputs, cotangents, CHUNK)
    got = harness.forward_and_grads(case, impl, {**inputs, "segment_ids": jnp.asarray(relabelled)}, cotangents, CHUNK)
    harness.assert_trees_close(got[0], want[0], tol, what=f"{case.name}[{impl}] ids 1, 2, 1: output")
    harness.assert_trees_close(got[1], want[1], tol, kind="grad", what=f"{case.name}[{impl}] ids 1, 2, 1: grads")


def test_every_op_with_segment_ids_is_registered() -> None:
    """Every public op taking `segment_ids` has a registry entry (so the isolation test above covers it)."""
    takes_segments = {name for name in kernels.__all__
                      if "segment_ids" in inspect.signature(getattr(kernels, name)).parameters}
    registered = {op.fn.__name__ for op in registry.SEGMENTED_OPS.values()}
    assert takes_segments <= registered, f"not in kernels.registry.SEGMENTED_OPS: {takes_segments - registered}"
