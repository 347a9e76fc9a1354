"""Momentum delta rule, Pallas path (interpret mode): forward and every gradient (q, k, v, p, g, log_mu, beta,
eta, S0, M0; random cotangents on o and on both final states) against the float32 recurrence, at odd
lengths, chunk 16 and 64, packed rows, log_mu over (-5, 0] without clamping; packed against a per-segment
loop; bf16 inputs; dispatch."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.momentum_delta_rule import api, momentum_delta_rule

# Two bounds per comparison: the max-normalized error max|got - want| / max|want| (as the sibling suite) and
# the max-abs error. Measured over these cases: forward <= 2.6e-7 normalized / 1.5e-7 abs, gradients
# <= 7.3e-7 / 7.6e-6 (spec §2.4 gives ~1e-6 / ~4e-6 for the factored Gam at chunk 64), so these bounds keep
# a ~7-10x margin, tighter than the sibling suite's 1e-5 / 3e-5 and the 1e-4 max-abs goal.
TOL = {"fwd": 2e-6, "grad": 1e-5, "abs_fwd": 1e-5, "abs_grad": 5e-5}

B, H, K, V = 2, 2, 16, 16
_DIFF = ("q", "k", "v", "p", "g", "log_mu", "beta", "eta", "initial_state")
_SEQ = ("q", "k", "v", "p", "g", "log_mu", "beta", "eta")
_FAST_COMPILE = {"xla_backend_optimization_level": 0}


def _err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def _abs_err(got, want) -> float:
    return float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))


def _make(t: int, packed: bool, seed: int = 0, b: int = B, g_range=(-5.0, 0.0), mu_range=(-5.0, 0.0),
          mu_ones: float = 0.0):
    """Inputs as the MDN layer feeds them (spec §1.1): L2-normalized q/k, p = alpha * (unit vector near k),
    beta <= 1 - alpha, eta ~ U(0, 2), non-zero (S0, M0). A fraction `mu_ones` of log_mu is exactly 0."""
    rng = np.random.default_rng(seed)
    nrm = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    f = lambda x: jnp.asarray(x, jnp.float32)
    k = nrm(rng.standard_normal((b, t, H, K)))
    g = rng.uniform(*g_range, (b, t, H))
    alpha = np.exp(g)
    log_mu = np.where(rng.random((b, t, H)) < mu_ones, 0.0, rng.uniform(*mu_range, (b, t, H)))
    x = dict(q=f(nrm(rng.standard_normal((b, t, H, K)))), k=f(k), v=f(rng.standard_normal((b, t, H, V))),
             p=f(alpha[..., None] * nrm(k + 0.5 * rng.standard_normal(k.shape))), g=f(g), log_mu=f(log_mu),
             beta=f(rng.uniform(0, 1, (b, t, H)) * (1 - alpha)), eta=f(rng.uniform(0, 2, (b, t, H))),
             initial_state=(f(rng.standard_normal((b, H, K, V))), f(0.3 * rng.standard_normal((b, H, K, V)))))
    x["segment_ids"] = (jnp.asarray(np.cumsum(rng.random((b, t)) < 0.04, axis=1), jnp.int32)
                        if packed else None)
    cts = (f(rng.standard_normal((b, t, H, V))),
           (f(rng.standard_normal((b, H, K, V))), f(rng.standard_normal((b, H, K, V)))))
    return x, cts


def _compile(fn, *args):
    return jax.jit(fn).lower(*args).compile(compiler_options=_FAST_COMPILE)


def _fwd_vjp_fn(x, cts, impl, chunk_size):
    """(o, (S, M)) and the cotangents of every differentiable input for random cotangents on o, S and M."""
    f = lambda d: momentum_delta_rule(**d, segment_ids=x["segment_ids"], chunk_size=chunk_size,
                                      implementation=impl)
    out, vjp = jax.vjp(f, {n: x[n] for n in _DIFF})
    return out, vjp(cts)[0]


def _fwd_vjp(x, cts, impl, chunk_size):
    return _compile(functools.partial(_fwd_vjp_fn, impl=impl, chunk_size=chunk_size), x, cts)(x, cts)


def _assert_close(got, want, kind: str, what: str):
    """kind: "fwd" or "grad" (selects both bounds)."""
    assert np.all(np.isfinite(np.asarray(got))), what
    assert _err(got, want) < TOL[kind], f"{what}: normalized error {_err(got, want):.2e}"
    assert _abs_err(got, want) < TOL[f"abs_{kind}"], f"{what}: max-abs error {_abs_err(got, want):.2e}"


def _check_all(got, want):
    (o, (s, m)), grads = got
    (o_ref, (s_ref, m_ref)), g_ref = want
    for name, a, b in (("o", o, o_ref), ("final S", s, s_ref), ("final M", m, m_ref)):
        _assert_close(a, b, "fwd", name)
    for name in _DIFF:
        for i, (a, b) in enumerate(zip(jax.tree.leaves(grads[name]), jax.tree.leaves(g_ref[name]), strict=True)):
            _assert_close(a, b, "grad", f"d{name}[{i}]")


STRONG = (-5.0, 0.0)  # g, log_mu: a chunk of 64 sums to ~-160, overflow if a mask came after exp
# Weak decays keep S, M (and their cotangents) alive across many chunks, so the carried state pass and its
# reverse walk matter; under strong decays the chunks barely talk to each other.
WEAK = (-0.2, 0.0)

# (T, chunk, packed, gate range): every T once, both chunk sizes, plain and packed rows, both regimes.
PARITY_CASES = [(1, 16, False, STRONG), (63, 64, False, WEAK), (100, 64, True, STRONG), (257, 16, True, WEAK)]


@pytest.mark.parametrize("t, chunk, packed, gates", PARITY_CASES)
def test_pallas_forward_and_all_gradients(t, chunk, packed, gates):
    x, cts = _make(t, packed=packed, seed=t, g_range=gates, mu_range=gates)
    _check_all(_fwd_vjp(x, cts, "pallas", chunk), _fwd_vjp(x, cts, "reference", chunk))


@pytest.mark.parametrize("mu_range, mu_ones", [((-5.0, 0.0), 0.25), ((-2.0, 0.0), 0.0)])
def test_pallas_log_mu_full_range_at_chunk_64(mu_range, mu_ones):
    """Spec §2.4 numerics: log_mu anywhere in (-5, 0] (a quarter exactly 0: mu = 1), weak decay (Gam up to
    ~t - j + 1), chunk 64, no clamp; (-2, 0) is where a difference-of-cumulants Gam is off by O(1)."""
    x, cts = _make(192, packed=True, seed=1, b=1, g_range=(-0.3, 0.0), mu_range=mu_range, mu_ones=mu_ones)
    _check_all(_fwd_vjp(x, cts, "pallas", 64), _fwd_vjp(x, cts, "reference", 64))


def test_pallas_final_state_only_gradients():
    """Cotangents on the final (S, M) only (o's cotangent zero): the gradient paths through the carried
    states alone, chunk 16 over 5 chunks, weak decays, including dS0 and dM0."""
    x, (do, dfinal) = _make(70, packed=False, seed=4, g_range=WEAK, mu_range=WEAK)
    cts = (jnp.zeros_like(do), dfinal)
    _check_all(_fwd_vjp(x, cts, "pallas", 16), _fwd_vjp(x, cts, "reference", 16))


def _pad_identity(piece: dict, length: int) -> dict:
    """Right-pads a segment's inputs with identity steps (beta = eta = 0, gates 0), one shape for all."""
    pad = lambda x: jnp.pad(x, [(0, 0), (0, length - x.shape[1])] + [(0, 0)] * (x.ndim - 2))
    return {n: pad(x) for n, x in piece.items()}


def test_pallas_packed_equals_per_segment_loop():
    t = 90
    x, _ = _make(t, packed=True, seed=5, b=1)
    run = lambda d: momentum_delta_rule(**d, chunk_size=16, implementation="pallas")
    o, (s, m) = _compile(run, x)(x)
    seg = np.asarray(x["segment_ids"][0])
    starts = [0] + [i for i in range(1, t) if seg[i] != seg[i - 1]] + [t]
    assert len(starts) > 3, "the sample must hold several segments"
    state, run_one = x["initial_state"], None
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        piece = _pad_identity({n: x[n][:, a:b] for n in _SEQ}, t)
        piece["initial_state"] = state
        run_one = run_one or _compile(run, piece)
        o_seg, (s_seg, m_seg) = run_one(piece)
        assert _err(o[:, a:b], o_seg[:, : b - a]) < TOL["fwd"], (a, b)
        state = tuple(jnp.zeros_like(z) for z in state)
    assert _err(s, s_seg) < TOL["fwd"]
    assert _err(m, m_seg) < TOL["fwd"]


def test_pallas_bf16_inputs_match_reference():
    x, _ = _make(40, packed=True, seed=11)
    xb = {n: (v.astype(jnp.bfloat16) if n in ("q", "k", "v", "p") else v) for n, v in x.items()}
    run = lambda impl: _compile(lambda d: momentum_delta_rule(**d, chunk_size=16, implementation=impl), xb)(xb)
    o_ref, (s_ref, m_ref) = run("reference")
    o, (s, m) = run("pallas")
    assert o.dtype == jnp.bfloat16 and s.dtype == m.dtype == jnp.float32
    # Only the final cast of o to bf16 differs (fp32 maths on both sides): 2 ulps.
    assert _err(o, o_ref) < 2.0**-7
    assert _err(s, s_ref) < TOL["fwd"]
    assert _err(m, m_ref) < TOL["fwd"]


def test_pallas_is_cpu_only_and_never_falls_back(monkeypatch):
    x, _ = _make(8, packed=False, b=1)
    fn, backends = api._IMPLEMENTATIONS["pallas"]
    assert backends == ("cpu",)
    monkeypatch.setitem(api._IMPLEMENTATIONS, "pallas", (fn, ("tpu",)))
    with pytest.raises(RuntimeError, match="cannot run"):
        momentum_delta_rule(**x, implementation="pallas")
    assert api._select(("pallas", "xla")) is api._IMPLEMENTATIONS["xla"][0]
