"""Selective scan's Pallas kernels against the reference: outputs, final state and every gradient (random
cotangents on y and on the final state, so the initial-state gradient and the gradient through the final
state are both checked), odd lengths, packed segments, several channel blocks, a state size that is not a
power of two; in generic interpret mode (the GPU-shaped kernel) and under `interpret_as("tpu")` (the
TPU-shaped kernel: its blocks, index maps and sequential time-block grid axis)."""

from __future__ import annotations

import functools

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import tolerance

from icml26zoo.kernels._common import lowering
from icml26zoo.kernels.selective_scan import pallas, reference, selective_scan

F32 = tolerance("selective_scan")


def _make(rng: np.random.Generator, batch: int, length: int, *, d_in: int = 6,
          n: int = 4) -> dict[str, jax.Array]:
    """u, delta [B, T, D_in] (Δ = softplus(·) > 0), A [D_in, N] < 0, B, C [B, T, N], D [D_in], initial state
    [B, D_in, N], float32; decays strong enough that packed segments and the initial state both matter."""
    f = lambda z: jnp.asarray(z, jnp.float32)
    normal = lambda *shape: f(rng.standard_normal(shape))
    return {"u": normal(batch, length, d_in), "delta": jax.nn.softplus(normal(batch, length, d_in) - 1.0),
            "A": f(-np.exp(rng.uniform(-1.0, 1.0, (d_in, n)))), "B": normal(batch, length, n),
            "C": normal(batch, length, n), "D": normal(d_in), "initial_state": normal(batch, d_in, n)}


def _tpu_interpreted(**inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The Pallas path traced with the TPU-shaped kernel on CPU (the harness jits this function)."""
    with lowering.interpret_as("tpu"):
        return pallas.selective_scan(**inputs)


def _case(**dims: int) -> harness.OpCase:
    return harness.OpCase(name="selective_scan", make_inputs=functools.partial(_make, **dims),
                          reference=reference.selective_scan,
                          fast={"pallas": pallas.selective_scan, "pallas_tpu": _tpu_interpreted},
                          differentiable=("u", "delta", "A", "B", "C", "D", "initial_state"),
                          time_inputs=("u", "delta", "B", "C"))


CASE = _case()
# D_in = 40: two GPU channel blocks of 32 (the second padded); N = 3: padded to 4 on GPU.
WIDE = _case(d_in=40, n=3)


# Generic interpreter (sub-chunks of 16 steps, channel blocks of 32), one compile per case: T = 1 (shorter than a
# sub-chunk) packed; T = 63 (3 sub-chunks + 15) plain; T = 129 (8 sub-chunks + 1) packed with two channel
# blocks and a padded state size.
def test_generic_interpret_matches_reference():
    harness.check_forward_and_grads(CASE, 1, packed=True, impls=["pallas"], seed=1)


def test_generic_interpret_unpacked_with_initial_state():
    _, grads = harness.check_forward_and_grads(CASE, 63, impls=["pallas"], seed=2)
    # Without resets the initial state reaches every output: its gradient cannot be zero.
    assert float(jnp.max(jnp.abs(grads["initial_state"]))) > 0


def test_channel_blocks_and_padded_state_size():
    harness.check_forward_and_grads(WIDE, 129, packed=True, impls=["pallas"], seed=4)


@pytest.mark.parametrize("length", [19, 129])
def test_tpu_interpret_matches_reference(length):
    """T = 19: one time block (2 sub-chunks, the last partial); T = 129 pads to 256 steps: two sequential time
    blocks of 128, the state (and the backward's dL/dh and dA) carried between them, the last one partial."""
    harness.check_forward_and_grads(CASE, length, packed=True, impls=["pallas_tpu"], seed=length)


def test_public_entry_point_runs_the_kernel():
    inputs = harness.make_case_inputs(CASE, 21, packed=True, seed=9)
    y, state = selective_scan(**inputs, implementation="pallas")
    want_y, want_state = pallas.selective_scan(**inputs)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(want_y))
    np.testing.assert_array_equal(np.asarray(state), np.asarray(want_state))
    ref_y, _ = reference.selective_scan(**inputs)
    harness.assert_close(y, ref_y, F32, what="pallas via the api")
