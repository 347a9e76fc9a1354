"""Momentum delta rule on the shared parity harness: the chunked XLA form against the float32 recurrence
(forward and every gradient), which is itself checked against a float64 numpy recurrence; packed rows against
a per-segment loop; the MDN -> GDN reduction; accuracy over the whole log_mu range at chunk 64; decode; state
passing; bf16; long T; input errors. The Pallas path's cases are in test_momentum_delta_rule_pallas.py."""

from __future__ import annotations

import dataclasses
import functools

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import tolerance

from icml26zoo.kernels import gated_delta_rule
from icml26zoo.kernels.momentum_delta_rule import api, momentum_delta_rule, momentum_delta_rule_step

B, H, K, V = 2, 2, 16, 16
SEQ = ("q", "k", "v", "p", "g", "log_mu", "beta", "eta")  # per-step inputs
STRONG = (-5.0, 0.0)  # g, log_mu: a chunk of 64 sums to ~-160, overflow if a mask came after exp
TOL = tolerance("momentum_delta_rule")
TOL_BF16 = tolerance("momentum_delta_rule", jnp.bfloat16)


def make_inputs(rng: np.random.Generator, batch: int, length: int, *, h: int = H, dk: int = K, dv: int = V,
                g_range: tuple[float, float] = STRONG, mu_range: tuple[float, float] = STRONG,
                mu_ones: float = 0.0) -> dict[str, jax.Array]:
    """Inputs as the MDN layer feeds them: L2-normalized q, k [B, T, H, K], p = alpha * p_hat [B, T, H, K]
    with p_hat a unit vector near k, beta <= 1 - alpha (the alpha + beta <= 1 constraint), eta ~ U(0, 2),
    g, log_mu uniform in their ranges [B, T, H] (a fraction `mu_ones` of log_mu exactly 0), non-zero
    (S0, M0) [B, H, K, V]. The default ranges are strong decays."""
    nrm = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    f = lambda x: jnp.asarray(x, jnp.float32)
    k = nrm(rng.standard_normal((batch, length, h, dk)))
    g = rng.uniform(*g_range, (batch, length, h))
    alpha = np.exp(g)
    log_mu = np.where(rng.random((batch, length, h)) < mu_ones, 0.0, rng.uniform(*mu_range, (batch, length, h)))
    return dict(q=f(nrm(rng.standard_normal((batch, length, h, dk)))), k=f(k),
                v=f(rng.standard_normal((batch, length, h, dv))),
                p=f(alpha[..., None] * nrm(k + 0.5 * rng.standard_normal(k.shape))), g=f(g), log_mu=f(log_mu),
                beta=f(rng.uniform(0, 1, (batch, length, h)) * (1 - alpha)),
                eta=f(rng.uniform(0, 2, (batch, length, h))),
                initial_state=(f(rng.standard_normal((batch, h, dk, dv))),
                               f(0.3 * rng.standard_normal((batch, h, dk, dv)))))


# One function object per path: the harness compiles each (path, shapes) once per session.
REFERENCE = functools.partial(momentum_delta_rule, implementation="reference")
CASE = harness.OpCase(name="momentum_delta_rule", make_inputs=make_inputs, reference=REFERENCE,
                      fast={"xla": functools.partial(momentum_delta_rule, implementation="xla")},
                      differentiable=SEQ + ("initial_state",), time_inputs=SEQ, step=momentum_delta_rule_step)


def with_gates(case: harness.OpCase, **ranges: object) -> harness.OpCase:
    """`case` drawing its inputs with other gate ranges (`g_range`, `mu_range`, `mu_ones`)."""
    return dataclasses.replace(case, make_inputs=functools.partial(make_inputs, **ranges))


def _inputs(length: int, *, seed: int, packed: bool, batch: int = B, **kw: object) -> dict:
    rng = np.random.default_rng(seed)
    x = make_inputs(rng, batch, length, **kw)
    x["segment_ids"] = harness.random_segment_ids(rng, batch, length) if packed else None
    return x


def _run(x: dict, **kw: object) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """momentum_delta_rule(**x, **kw), jitted with the fast-compile options."""
    return harness.jit(lambda x: momentum_delta_rule(**x, **kw))(x)


# Compile once, check many: each parity case compiles the reference's and the xla path's VJP, and the checks
# below run on these programs (same shapes, B = 2). T = 1; T = 100 packed at chunk 64 (1 chunk + 36); T = 129
# packed at 16 (8 + 1), plain at 16 (the segments alone of the packed-rows check, decode, state passing) and
# plain at 64 (2 chunks + 1: the log_mu range checks).
PARITY_CASES = [(1, 16, False), (100, 64, True), (129, 16, True), (129, 16, False), (129, 64, False)]


@pytest.mark.parametrize("t, chunk, packed", PARITY_CASES)
def test_parity_forward_and_all_gradients(t: int, chunk: int, packed: bool) -> None:
    harness.check_forward_and_grads(CASE, t, chunk_size=chunk, packed=packed)


def _numpy_f64(x: dict) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Float64 recurrence in plain numpy, written independently of the JAX reference."""
    q, k, v, p, g, lm, beta, eta = (np.asarray(x[n], np.float64) for n in SEQ)
    b, t, h, dk = q.shape
    seg = np.zeros((b, t), int) if x["segment_ids"] is None else np.asarray(x["segment_ids"])
    s_all, m_all = (np.array(a, np.float64) for a in x["initial_state"])
    o = np.zeros(v.shape)
    for bi in range(b):
        for hi in range(h):
            s, m = s_all[bi, hi], m_all[bi, hi]
            for ti in range(t):
                if ti > 0 and seg[bi, ti] != seg[bi, ti - 1]:
                    s, m = np.zeros_like(s), np.zeros_like(m)
                e = s.T @ p[bi, ti, hi] - v[bi, ti, hi]
                m = np.exp(lm[bi, ti, hi]) * m + eta[bi, ti, hi] * np.outer(k[bi, ti, hi], e)
                s = np.exp(g[bi, ti, hi]) * s - beta[bi, ti, hi] * m
                o[bi, ti, hi] = s.T @ (q[bi, ti, hi] * dk**-0.5)
            s_all[bi, hi], m_all[bi, hi] = s, m
    return o, (s_all, m_all)


def _assert_matches_f64(got: tuple, x: dict, what: str) -> None:
    """(o, (S, M)) float32 against the float64 recurrence on the same inputs, leaf by leaf."""
    for name, a, b in zip(("o", "S", "M"), jax.tree.leaves(got), jax.tree.leaves(_numpy_f64(x)), strict=True):
        harness.assert_close(a, b, TOL, what=f"{what} {name}")


@pytest.mark.parametrize("mu_range", [(-5.0, 0.0), (-2.0, 0.0), (0.0, 0.0)])
def test_log_mu_full_range_at_chunk_64(mu_range: tuple[float, float]) -> None:
    """log_mu anywhere in (-5, 0] (the last case is exactly 0: mu = 1), weak decay (long memory: Gam up to
    ~t - j + 1), chunk 64, no clamping. (-2, 0) is where the difference-of-cumulants form loses all precision
    (measured: O(1) forward error, NaN for (-5, 0)). The XLA path also matches a float64 recurrence. T = 129:
    two full chunks of 64 and one step, plain rows (the T = 129 chunk-64 parity programs)."""
    case = with_gates(CASE, g_range=(-0.3, 0.0), mu_range=mu_range)
    want = harness.check_forward_and_grads(case, 129, chunk_size=64, seed=1)
    inputs = harness.make_case_inputs(case, 129, seed=1)
    # The compiled VJP of the check above, run again for its outputs (any cotangents of the right structure).
    got, _ = harness.forward_and_grads(case, "xla", inputs, want[0], 64)
    _assert_matches_f64(got, inputs, "xla vs float64")


@pytest.mark.parametrize("impl", ("reference", "xla"))
def test_matches_float64_numpy(impl: str) -> None:
    """Both paths against float64 numpy on packed rows (the T = 129 packed parity programs)."""
    x = _inputs(129, seed=3, packed=True)
    _assert_matches_f64(harness.outputs(CASE, impl, x, None if impl == "reference" else 16), x, f"{impl} vs float64")


@pytest.mark.parametrize("impl", ("reference", "xla"))
def test_packed_equals_per_segment_loop(impl: str) -> None:
    """Two rows of T = 129 in eight segments (single tokens included), chunk 16, against each segment alone,
    padded with identity steps (beta = eta = 0, gates 0: S, M unchanged): outputs, final (S, M) and every
    gradient, on the T = 129 parity programs."""
    harness.check_packed_equals_segments_alone(CASE, [[0, 11, 12, 40, 71, 129], [0, 1, 90, 129]], impl=impl,
                                               chunk_size=16)


@functools.cache
def _gdn_reference() -> object:
    """The gated delta rule's reference, jitted once for both cases of the reduction test."""
    return harness.jit(lambda d: gated_delta_rule(**d, implementation="reference"))


@pytest.mark.parametrize("impl", ("reference", "xla"))
def test_reduces_to_gated_delta_rule(impl: str) -> None:
    """p = exp(g) k and log_mu = -1e4 (mu = 0 exactly in float32) is Gated DeltaNet with beta * eta (the T = 100
    packed parity programs, chunk 64)."""
    x = _inputs(100, seed=2, packed=True)
    x.update(p=jnp.exp(x["g"])[..., None] * x["k"], log_mu=jnp.full_like(x["g"], -1e4))
    o, (s, _) = harness.outputs(CASE, impl, x, None if impl == "reference" else 64)
    gdn = dict(q=x["q"], k=x["k"], v=x["v"], g=x["g"], beta=x["beta"] * x["eta"],
               initial_state=x["initial_state"][0], segment_ids=x["segment_ids"])
    # mu = 0 drops M0 entirely: the first step's M is eta k e^T whatever M0 was.
    o_gdn, s_gdn = _gdn_reference()(gdn)
    harness.assert_close(o, o_gdn, TOL, what="o")
    harness.assert_close(s, s_gdn, TOL, what="final S")


def test_decode_steps_chained_equal_full_forward() -> None:
    harness.check_decode_equals_forward(CASE, 129, impl="xla", chunk_size=16, seed=7, via_vjp=True)


def test_state_passing_equals_one_pass() -> None:
    """Running [x1; x2; x3] equals running x1, then x2 from x1's final (S, M), then x3 (the chunked form's
    invariant): thirds of 43 steps, each cut inside a chunk of the one pass (the T = 129 plain program)."""
    x = _inputs(129, seed=9, packed=False)
    o, state = harness.outputs(CASE, "xla", x, 16)
    thirds = [{n: (x[n][:, i * 43:(i + 1) * 43] if n in SEQ else x[n]) for n in x} for i in range(3)]
    run_third = harness.jit(lambda d: momentum_delta_rule(**d, chunk_size=16, implementation="xla"))
    pieces, carried = [], x["initial_state"]
    for third in thirds:
        o_i, carried = run_third({**third, "initial_state": carried})
        pieces.append(o_i)
    harness.assert_close(jnp.concatenate(pieces, axis=1), o, TOL, what="o")
    harness.assert_trees_close(carried, state, TOL, what="final (S, M)")


def test_bf16_inputs_match_reference() -> None:
    x = _inputs(100, seed=11, packed=True)
    xb = {n: (v.astype(jnp.bfloat16) if n in ("q", "k", "v", "p") else v) for n, v in x.items()}
    o_ref, state_ref = _run(xb, implementation="reference")
    o, state = _run(xb, implementation="xla")
    assert o.dtype == jnp.bfloat16
    harness.assert_close(o, o_ref, TOL_BF16, what="o")
    # The states are float32 on both sides.
    harness.assert_trees_close(state, state_ref, TOL, what="final (S, M)")


# Cheap on purpose (B1 H1 K=V=8), weak decay and mu near 1 (the longest memory): fp32 and bf16 inputs.
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_long_sequence_stays_finite(dtype: jnp.dtype) -> None:
    x = _inputs(16384, seed=13, packed=False, batch=1, h=1, dk=8, dv=8, g_range=(-0.5, 0.0), mu_range=(-0.5, 0.0))
    x = {n: (v.astype(dtype) if n in ("q", "k", "v", "p") else v) for n, v in x.items()}
    do = jnp.asarray(np.random.default_rng(13).standard_normal(x["v"].shape), dtype)

    def run(x: dict) -> tuple:
        f = lambda q, g, lm: momentum_delta_rule(**{**x, "q": q, "g": g, "log_mu": lm}, implementation="xla")
        (o, (s, m)), vjp = jax.vjp(f, x["q"], x["g"], x["log_mu"])
        return o, s, m, vjp((do, (jnp.ones_like(s), jnp.ones_like(m))))

    o, s, m, grads = harness.jit(run)(x)
    for a in (o, s, m, *grads):
        assert np.all(np.isfinite(np.asarray(a, np.float32)))
    assert float(jnp.max(jnp.abs(o.astype(jnp.float32)))) > 0


def _bad(**over: object) -> dict:
    x = _inputs(8, seed=0, packed=False, batch=1, h=1, dk=4, dv=4)
    x.update(over)
    return x


@pytest.mark.parametrize("over, arg", harness.DELTA_RULE_BAD_INPUTS + [
    (dict(p=jnp.zeros((1, 8, 2, 4))), "p"),
    (dict(log_mu=jnp.zeros((1, 8, 1, 4))), "log_mu"),
    (dict(eta=jnp.zeros((1, 9, 1))), "eta"),
    (dict(initial_state=jnp.zeros((1, 1, 4, 4))), "initial_state"),
    (dict(initial_state=(jnp.zeros((1, 1, 4, 4)), jnp.zeros((1, 1, 4, 5)))), r"initial_state\[1\]"),
    (dict(p=jnp.zeros((1, 8, 1, 4), jnp.bfloat16)), "p"),
    (dict(eta=jnp.zeros((1, 8, 1), jnp.int32)), "eta"),
    (dict(log_mu=jnp.full((1, 8, 1), 0.1)), "log_mu"),
    (dict(log_mu=jnp.full((1, 8, 1), -jnp.inf)), "log_mu"),
    (dict(g=jnp.full((1, 8, 1), jnp.nan)), "g"),
    (dict(eta=jnp.full((1, 8, 1), -0.1)), "eta"),
    (dict(v=jnp.full((1, 8, 1, 4), jnp.nan)), None),
])
def test_bad_inputs_raise(over: dict, arg: str | None) -> None:
    if arg is None:
        # Non-finite activations are not checked (costly); they must propagate, not crash.
        o, _ = momentum_delta_rule(**_bad(**over))
        assert np.all(np.isnan(np.asarray(o)))
        return
    with pytest.raises(ValueError, match=f"`{arg}"):
        momentum_delta_rule(**_bad(**over))


def test_bad_chunk_size_and_implementation() -> None:
    harness.check_bad_chunk_size_and_implementation(momentum_delta_rule, _bad())


def test_dispatch_never_falls_back_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    harness.check_dispatch_never_falls_back(monkeypatch, api, momentum_delta_rule, _bad(), blocked="xla",
                                            fallback="reference")
