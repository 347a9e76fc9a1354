"""Momentum delta rule, Pallas path (interpret mode), on the shared parity harness: forward and every gradient
(q, k, v, p, g, log_mu, beta, eta, S0, M0; random cotangents on o and on both final states) against the
float32 recurrence, at odd lengths, chunk 16 and 64, packed rows, log_mu over (-5, 0] without clamping;
packed against a per-segment loop; bf16 inputs; dispatch. Inputs and the op case come from
test_momentum_delta_rule.py; the bounds are the table's `momentum_delta_rule.pallas` entry."""

from __future__ import annotations

import dataclasses
import functools

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_momentum_delta_rule import CASE, REFERENCE, STRONG, TOL_BF16, with_gates
from tolerances import tolerance

from icml26zoo.kernels.momentum_delta_rule import api, momentum_delta_rule

PALLAS = dataclasses.replace(CASE, name="momentum_delta_rule.pallas",
                             fast={"pallas": functools.partial(momentum_delta_rule, implementation="pallas")})
TOL = tolerance(PALLAS.name)

# Weak decays keep S, M (and their cotangents) alive across many chunks, so the carried state pass and its
# reverse walk matter; under strong decays the chunks barely talk to each other.
WEAK = (-0.2, 0.0)

# Compile once, check many: each parity case compiles the reference's and the Pallas path's VJP, and the checks
# below run on these programs (same shapes, B = 2). (T, chunk, packed, gate range): T = 1; T = 100 packed at
# chunk 64 (1 chunk + 36; the log_mu range checks); T = 129 at chunk 16 (8 + 1) packed, and plain (the
# final-state-only gradients, the segments alone of the packed-rows check); both regimes.
PARITY_CASES = [(1, 16, False, STRONG), (100, 64, True, STRONG), (129, 16, True, WEAK), (129, 16, False, WEAK)]


@pytest.mark.parametrize("t, chunk, packed, gates", PARITY_CASES)
def test_pallas_forward_and_all_gradients(t: int, chunk: int, packed: bool, gates: tuple[float, float]) -> None:
    case = with_gates(PALLAS, g_range=gates, mu_range=gates)
    harness.check_forward_and_grads(case, t, chunk_size=chunk, packed=packed, seed=t)


@pytest.mark.parametrize("mu_range, mu_ones", [((-5.0, 0.0), 0.25), ((-2.0, 0.0), 0.0)])
def test_pallas_log_mu_full_range_at_chunk_64(mu_range: tuple[float, float], mu_ones: float) -> None:
    """log_mu anywhere in (-5, 0] (a quarter exactly 0: mu = 1), weak decay (Gam up to ~t - j + 1), chunk 64,
    no clamp; (-2, 0) is where a difference-of-cumulants Gam is off by O(1). T = 100 packed, the parity
    programs (was B 1, T 192)."""
    case = with_gates(PALLAS, g_range=(-0.3, 0.0), mu_range=mu_range, mu_ones=mu_ones)
    harness.check_forward_and_grads(case, 100, chunk_size=64, packed=True, seed=1)


def test_pallas_final_state_only_gradients() -> None:
    """Cotangents on the final (S, M) only (o's cotangent zero): the gradient paths through the carried
    states alone, chunk 16 over 9 chunks, weak decays, including dS0 and dM0 (the T = 129 plain programs)."""
    case = with_gates(PALLAS, g_range=WEAK, mu_range=WEAK)
    inputs = harness.make_case_inputs(case, 129, seed=4)
    do, dfinal = harness.random_cotangents(np.random.default_rng(5), jax.eval_shape(lambda i: REFERENCE(**i), inputs))
    cotangents = (jnp.zeros_like(do), dfinal)
    got = harness.forward_and_grads(case, "pallas", inputs, cotangents, 16)
    want = harness.forward_and_grads(case, "reference", inputs, cotangents)
    harness.assert_trees_close(got[0], want[0], TOL, what="pallas output")
    harness.assert_trees_close(got[1], want[1], TOL, kind="grad", what="pallas d")


def test_pallas_packed_equals_per_segment_loop() -> None:
    """Two rows of T = 129 in eight segments (single tokens included), chunk 16, identity-padded segments alone:
    outputs, final (S, M) and every gradient, on the T = 129 parity programs."""
    harness.check_packed_equals_segments_alone(PALLAS, [[0, 11, 12, 40, 71, 129], [0, 1, 90, 129]], impl="pallas",
                                               chunk_size=16)


def test_pallas_bf16_inputs_match_reference() -> None:
    inputs = harness.make_case_inputs(PALLAS, 40, seed=11, packed=True)
    xb = {n: (v.astype(jnp.bfloat16) if n in ("q", "k", "v", "p") else v) for n, v in inputs.items()}
    run = lambda impl: harness.jit(lambda d: momentum_delta_rule(**d, chunk_size=16, implementation=impl))(xb)
    o_ref, state_ref = run("reference")
    o, state = run("pallas")
    assert o.dtype == jnp.bfloat16
    # Only the final cast of o to bf16 differs (float32 maths on both sides); the states are float32.
    harness.assert_close(o, o_ref, TOL_BF16, what="o")
    harness.assert_trees_close(state, state_ref, TOL, what="final (S, M)")


def test_pallas_runs_on_every_backend_and_never_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    x = harness.make_case_inputs(PALLAS, 8, batch=1)
    fn, backends = api._IMPLEMENTATIONS["pallas"]
    assert backends == ("cpu", "gpu", "tpu")
    monkeypatch.setitem(api._IMPLEMENTATIONS, "pallas", (fn, ("tpu",)))
    with pytest.raises(RuntimeError, match="cannot run"):
        momentum_delta_rule(**x, implementation="pallas")
    assert api._select(("pallas", "xla")) is api._IMPLEMENTATIONS["xla"][0]
