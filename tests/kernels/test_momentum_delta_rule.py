"""Momentum delta rule: the chunked form against the float32 recurrence, which is itself checked against a
float64 numpy recurrence; packed segments against a per-segment loop; the MDN -> GDN reduction; accuracy
over the whole log_mu range at chunk 64; decode; long T; input errors."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import gated_delta_rule
from kernels.momentum_delta_rule import api, momentum_delta_rule, momentum_delta_rule_step

# Errors are max-normalized: max|got - want| / max|want| (specs/mixers-02 §2.4 measures the same way).
TOL = {
    # fp32 forward 1e-5: DESIGN invariant 1 (recurrent = chunked ~1e-5); spec §2.4 measures the factored
    # Gam at ~1e-6 forward and ~4e-6 on gradients at chunk 64, so 1e-5 / 3e-5 leave margin without hiding
    # a bug (the difference-of-cumulants form is off by O(1) in this regime).
    jnp.float32: {"fwd": 1e-5, "grad": 3e-5},
    # bf16 inputs, fp32 maths on both sides: only the final cast of o to bf16 differs, so 2 ulps.
    jnp.bfloat16: {"fwd": 2.0**-7},
}

B, H, K, V = 2, 2, 16, 16
_DIFF = ("q", "k", "v", "p", "g", "log_mu", "beta", "eta", "initial_state")
_SEQ = ("q", "k", "v", "p", "g", "log_mu", "beta", "eta")  # per-step inputs
# Compile-bound suite: same fast-compile options as the gated delta rule tests (same HLO, same IEEE
# float semantics), which halves compile time on the shared 2-core machine.
_FAST_COMPILE = {"xla_backend_optimization_level": 0}


def _err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def _make(t: int, packed: bool, seed: int = 0, b: int = B, h: int = H, dk: int = K, dv: int = V,
          g_range=(-5.0, 0.0), mu_range=(-5.0, 0.0)):
    """Random inputs as the MDN layer feeds them (spec §1.1): L2-normalized q/k, p = alpha * p_hat with
    p_hat a unit vector near k, beta <= 1 - alpha (the alpha + beta <= 1 constraint), eta ~ U(0, 2).
    Defaults are strong decays (a chunk of 64 sums to ~-160: overflow if masking came after exp)."""
    rng = np.random.default_rng(seed)
    nrm = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    f = lambda x: jnp.asarray(x, jnp.float32)
    k = nrm(rng.standard_normal((b, t, h, dk)))
    g = rng.uniform(*g_range, (b, t, h))
    alpha = np.exp(g)
    x = dict(q=f(nrm(rng.standard_normal((b, t, h, dk)))), k=f(k), v=f(rng.standard_normal((b, t, h, dv))),
             p=f(alpha[..., None] * nrm(k + 0.5 * rng.standard_normal(k.shape))), g=f(g),
             log_mu=f(rng.uniform(*mu_range, (b, t, h))), beta=f(rng.uniform(0, 1, (b, t, h)) * (1 - alpha)),
             eta=f(rng.uniform(0, 2, (b, t, h))),
             initial_state=(f(rng.standard_normal((b, h, dk, dv))), f(0.3 * rng.standard_normal((b, h, dk, dv)))))
    # Packed rows: segment starts at random positions (a different layout per row).
    x["segment_ids"] = (jnp.asarray(np.cumsum(rng.random((b, t)) < 0.04, axis=1), jnp.int32)
                        if packed else None)
    cts = (f(rng.standard_normal((b, t, h, dv))),
           (f(rng.standard_normal((b, h, dk, dv))), f(rng.standard_normal((b, h, dk, dv)))))
    return x, cts


def _compile(fn, *args):
    """jit + compile `fn` for these argument shapes (fast-compile options); returns the callable."""
    return jax.jit(fn).lower(*args).compile(compiler_options=_FAST_COMPILE)


def _mdr(x, **kw):
    """momentum_delta_rule(**x, **kw) through `_compile`."""
    return _compile(lambda x: momentum_delta_rule(**x, **kw), x)(x)


def _fwd_vjp_fn(x, cts, impl, chunk_size):
    """(o, (S, M)) and the cotangents of every differentiable input for random cotangents on o, S AND M."""
    f = lambda d: momentum_delta_rule(**d, segment_ids=x["segment_ids"], chunk_size=chunk_size,
                                      implementation=impl)
    out, vjp = jax.vjp(f, {n: x[n] for n in _DIFF})
    return out, vjp(cts)[0]


def _fwd_vjp(x, cts, impl, chunk_size):
    return _compile(functools.partial(_fwd_vjp_fn, impl=impl, chunk_size=chunk_size), x, cts)(x, cts)


def _check_all(got, want, x, tol):
    """Compares ((o, (S, M)), grads) pairs: forward at tol['fwd'], every input gradient at tol['grad']."""
    (o, (s, m)), grads = got
    (o_ref, (s_ref, m_ref)), g_ref = want
    assert _err(o, o_ref) < tol["fwd"], "o"
    assert _err(s, s_ref) < tol["fwd"], "final S"
    assert _err(m, m_ref) < tol["fwd"], "final M"
    for name in _DIFF:
        for i, (a, b) in enumerate(zip(jax.tree.leaves(grads[name]), jax.tree.leaves(g_ref[name]), strict=True)):
            assert np.all(np.isfinite(a)), name
            assert _err(a, b) < tol["grad"], f"d{name}[{i}]"


# Every T meets one chunk size; across the T values both 16 and 64 occur, and both plain and packed rows.
PARITY_CASES = [(1, 16), (63, 64), (100, 64), (257, 16)]


@pytest.mark.parametrize("t, chunk", PARITY_CASES)
def test_parity_forward_and_all_gradients(t, chunk):
    x, cts = _make(t, packed=t >= 100)
    want = _fwd_vjp(x, cts, "reference", 64)
    _check_all(_fwd_vjp(x, cts, "xla", chunk), want, x, TOL[jnp.float32])


@pytest.mark.parametrize("mu_range", [(-5.0, 0.0), (-2.0, 0.0), (0.0, 0.0)])
def test_log_mu_full_range_at_chunk_64(mu_range):
    """Spec §2.4 numerics: log_mu anywhere in (-5, 0] (the last case is exactly 0: mu = 1), weak decay (long
    memory: Gam up to ~t - j + 1), chunk 64, no clamping. (-2, 0) is where the difference-of-cumulants form
    loses all precision (measured: O(1) forward error, NaN for (-5, 0))."""
    x, cts = _make(192, packed=False, seed=1, g_range=(-0.3, 0.0), mu_range=mu_range)
    got = _fwd_vjp(x, cts, "xla", 64)
    _check_all(got, _fwd_vjp(x, cts, "reference", 64), x, TOL[jnp.float32])
    o64, (s64, m64) = _numpy_f64(x)
    (o, (s, m)), _ = got
    for out, ref in ((o, o64), (s, s64), (m, m64)):
        assert _err(out, ref) < TOL[jnp.float32]["fwd"]


def _numpy_f64(x):
    """Float64 recurrence in plain numpy, written independently of the JAX reference."""
    q, k, v, p, g, lm, beta, eta = (np.asarray(x[n], np.float64) for n in _SEQ)
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


@pytest.mark.parametrize("impl", ("reference", "xla"))
def test_matches_float64_numpy(impl):
    x, _ = _make(40, packed=True, seed=3, dk=8, dv=4)
    o64, (s64, m64) = _numpy_f64(x)
    o, (s, m) = _mdr(x, chunk_size=16, implementation=impl)
    for got, ref in ((o, o64), (s, s64), (m, m64)):
        assert _err(got, ref) < TOL[jnp.float32]["fwd"]


def _pad_identity(piece: dict, length: int) -> dict:
    """Right-pads a segment's inputs to `length` with identity steps (beta = eta = 0, gates 0: S, M
    unchanged), so every segment reuses one compiled shape; the padded outputs are dropped."""
    pad = lambda x: jnp.pad(x, [(0, 0), (0, length - x.shape[1])] + [(0, 0)] * (x.ndim - 2))
    return {n: pad(x) for n, x in piece.items()}


@pytest.mark.parametrize("impl", ("reference", "xla"))
def test_packed_equals_per_segment_loop(impl):
    t = 90
    x, _ = _make(t, packed=True, seed=5, b=1)
    o, (s, m) = _mdr(x, chunk_size=16, implementation=impl)
    seg = np.asarray(x["segment_ids"][0])
    starts = [0] + [i for i in range(1, t) if seg[i] != seg[i - 1]] + [t]
    assert len(starts) > 3, "the sample must hold several segments"
    state = x["initial_state"]
    run_one = None  # every padded segment has one shape: compile once
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        piece = _pad_identity({n: x[n][:, a:b] for n in _SEQ}, t)
        piece["initial_state"] = state
        if run_one is None:
            run_one = _compile(lambda d: momentum_delta_rule(**d, chunk_size=16, implementation=impl), piece)
        o_seg, (s_seg, m_seg) = run_one(piece)
        assert _err(o[:, a:b], o_seg[:, : b - a]) < TOL[jnp.float32]["fwd"], (a, b)
        state = tuple(jnp.zeros_like(z) for z in state)  # later segments start from zero
    assert _err(s, s_seg) < TOL[jnp.float32]["fwd"]
    assert _err(m, m_seg) < TOL[jnp.float32]["fwd"]


@pytest.mark.parametrize("impl", ("reference", "xla"))
def test_reduces_to_gated_delta_rule(impl):
    """p = exp(g) k and log_mu = -1e4 (mu = 0 exactly in float32) is GDN with beta * eta (spec §1)."""
    x, _ = _make(100, packed=True, seed=2)
    x.update(p=jnp.exp(x["g"])[..., None] * x["k"], log_mu=jnp.full_like(x["g"], -1e4))
    o, (s, _) = _mdr(x, chunk_size=64, implementation=impl)
    gdn = dict(q=x["q"], k=x["k"], v=x["v"], g=x["g"], beta=x["beta"] * x["eta"],
               initial_state=x["initial_state"][0], segment_ids=x["segment_ids"])
    # mu = 0 drops M0 entirely: the first step's M is eta k e^T whatever M0 was.
    o_gdn, s_gdn = _compile(lambda d: gated_delta_rule(**d, implementation="reference"), gdn)(gdn)
    assert _err(o, o_gdn) < TOL[jnp.float32]["fwd"]
    assert _err(s, s_gdn) < TOL[jnp.float32]["fwd"]


def test_decode_steps_chained_equal_full_forward():
    x, _ = _make(21, packed=False, seed=7)
    o_full, (s_full, m_full) = _mdr(x, chunk_size=16)

    def decode(x):
        def step(state, xt):
            o_t, state = momentum_delta_rule_step(xt["q"], xt["k"], xt["v"], p=xt["p"], g=xt["g"],
                                                  log_mu=xt["log_mu"], beta=xt["beta"], eta=xt["eta"],
                                                  state=state)
            return state, o_t

        return jax.lax.scan(step, x["initial_state"], {n: jnp.moveaxis(x[n], 1, 0) for n in _SEQ})

    (s_dec, m_dec), o_dec = _compile(decode, x)(x)
    assert _err(jnp.moveaxis(o_dec, 0, 1), o_full) < TOL[jnp.float32]["fwd"]
    assert _err(s_dec, s_full) < TOL[jnp.float32]["fwd"]
    assert _err(m_dec, m_full) < TOL[jnp.float32]["fwd"]


def test_state_passing_equals_one_pass():
    """Running [x1; x2] equals running x1, then x2 from x1's final (S, M) (spec invariant 3), chunk 32."""
    x, _ = _make(128, packed=False, seed=9)
    o, (s, m) = _mdr(x, chunk_size=32)
    halves = [{n: (x[n][:, i * 64:(i + 1) * 64] if n in _SEQ else x[n]) for n in x} for i in (0, 1)]
    run_half = _compile(lambda d: momentum_delta_rule(**d, chunk_size=32), halves[0])
    o1, state1 = run_half(halves[0])
    o2, (s2, m2) = run_half({**halves[1], "initial_state": state1})
    assert _err(jnp.concatenate([o1, o2], axis=1), o) < TOL[jnp.float32]["fwd"]
    assert _err(s2, s) < TOL[jnp.float32]["fwd"]
    assert _err(m2, m) < TOL[jnp.float32]["fwd"]


def test_bf16_inputs_match_reference():
    x, _ = _make(100, packed=True, seed=11)
    xb = {n: (v.astype(jnp.bfloat16) if n in ("q", "k", "v", "p") else v) for n, v in x.items()}
    o_ref, (s_ref, m_ref) = _mdr(xb, implementation="reference")
    o, (s, m) = _mdr(xb, implementation="xla")
    assert o.dtype == jnp.bfloat16 and s.dtype == m.dtype == jnp.float32
    assert _err(o, o_ref) < TOL[jnp.bfloat16]["fwd"]
    assert _err(s, s_ref) < TOL[jnp.float32]["fwd"]  # the states are fp32 on both sides
    assert _err(m, m_ref) < TOL[jnp.float32]["fwd"]


# Cheap on purpose (B1 H1 K=V=8), weak decay and mu near 1 (the longest memory): fp32 and bf16 inputs.
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_long_sequence_stays_finite(dtype):
    x, (do, _) = _make(16384, packed=False, seed=13, b=1, h=1, dk=8, dv=8, g_range=(-0.5, 0.0),
                       mu_range=(-0.5, 0.0))
    x = {n: (v.astype(dtype) if n in ("q", "k", "v", "p") else v) for n, v in x.items()}

    def run(x):
        f = lambda q, g, lm: momentum_delta_rule(**{**x, "q": q, "g": g, "log_mu": lm}, implementation="xla")
        (o, (s, m)), vjp = jax.vjp(f, x["q"], x["g"], x["log_mu"])
        return o, s, m, vjp((do.astype(dtype), (jnp.ones_like(s), jnp.ones_like(m))))

    o, s, m, grads = _compile(run, x)(x)
    for a in (o, s, m, *grads):
        assert np.all(np.isfinite(np.asarray(a, np.float32)))
    assert float(jnp.max(jnp.abs(o.astype(jnp.float32)))) > 0


def _bad(**over):
    x, _ = _make(8, packed=False, b=1, h=1, dk=4, dv=4)
    x.update(over)
    return x


@pytest.mark.parametrize("over, arg", [
    (dict(q=jnp.zeros((1, 8, 4))), "q"),
    (dict(k=jnp.zeros((1, 8, 1, 5))), "k"),
    (dict(p=jnp.zeros((1, 8, 2, 4))), "p"),
    (dict(v=jnp.zeros((1, 7, 1, 4))), "v"),
    (dict(beta=jnp.zeros((1, 8))), "beta"),
    (dict(log_mu=jnp.zeros((1, 8, 1, 4))), "log_mu"),
    (dict(eta=jnp.zeros((1, 9, 1))), "eta"),
    (dict(initial_state=jnp.zeros((1, 1, 4, 4))), "initial_state"),
    (dict(initial_state=(jnp.zeros((1, 1, 4, 4)), jnp.zeros((1, 1, 4, 5)))), r"initial_state\[1\]"),
    (dict(segment_ids=jnp.zeros((1, 9), jnp.int32)), "segment_ids"),
    (dict(segment_ids=jnp.zeros((1, 8), jnp.float32)), "segment_ids"),
    (dict(p=jnp.zeros((1, 8, 1, 4), jnp.bfloat16)), "p"),
    (dict(eta=jnp.zeros((1, 8, 1), jnp.int32)), "eta"),
    (dict(g=jnp.full((1, 8, 1), 0.1)), "g"),
    (dict(log_mu=jnp.full((1, 8, 1), 0.1)), "log_mu"),
    (dict(log_mu=jnp.full((1, 8, 1), -jnp.inf)), "log_mu"),
    (dict(g=jnp.full((1, 8, 1), jnp.nan)), "g"),
    (dict(beta=jnp.full((1, 8, 1), 2.5)), "beta"),
    (dict(eta=jnp.full((1, 8, 1), -0.1)), "eta"),
    (dict(v=jnp.full((1, 8, 1, 4), jnp.nan)), None),
])
def test_bad_inputs_raise(over, arg):
    if arg is None:  # non-finite activations are not checked (costly); they must propagate, not crash
        o, _ = momentum_delta_rule(**_bad(**over))
        assert np.all(np.isnan(np.asarray(o)))
        return
    with pytest.raises(ValueError, match=f"`{arg}"):
        momentum_delta_rule(**_bad(**over))


def test_bad_chunk_size_and_implementation():
    with pytest.raises(ValueError, match="chunk_size"):
        momentum_delta_rule(**_bad(), chunk_size=48)
    with pytest.raises(ValueError, match="unknown implementation"):
        momentum_delta_rule(**_bad(), implementation="triton")


def test_dispatch_never_falls_back_silently(monkeypatch):
    fn, _ = api._IMPLEMENTATIONS["xla"]
    monkeypatch.setitem(api._IMPLEMENTATIONS, "xla", (fn, ("tpu",)))
    with pytest.raises(RuntimeError, match="cannot run"):
        momentum_delta_rule(**_bad(), implementation="xla")
    # A sequence is tried in order: the first one that can run is used.
    assert api._select(("xla", "reference")) is api._IMPLEMENTATIONS["reference"][0]
    monkeypatch.undo()
    assert api._select(None) is api._IMPLEMENTATIONS["xla"][0]
