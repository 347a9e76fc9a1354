"""Gated delta rule: every implementation against the float32 recurrence, which is itself checked against a
float64 numpy recurrence; packed segments against a per-segment loop; decode; long T; input errors."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.delta_rule import api, gated_delta_rule, gated_delta_rule_step

# Errors are max-normalized: max|got - want| / max|want| (specs/mixers-02 §2.3 measures the same way).
TOL = {
    # fp32 forward 1e-5: DESIGN invariant 1 (recurrent = chunked ~1e-5); the local-sum decays measure
    # <= 2.4e-7 (GDN/KDA) and 1.3e-6 (DeltaNet) at T=2048, so 1e-5 leaves margin without hiding a bug.
    # fp32 gradients 3e-5: spec numbers are <= 9e-7 (GDN/KDA) and 2.5e-6 (DeltaNet, beta up to 2, whose
    # unnormalized state magnitudes are larger); autodiff through the UT solve adds a few ulps per chunk.
    jnp.float32: {"fwd": 1e-5, "grad": 3e-5},
    # bf16 inputs, fp32 maths on both sides: only the final cast of o to bf16 differs, <= 1 ulp (2^-8)
    # of each side's rounding, so 2 ulps.
    jnp.bfloat16: {"fwd": 2.0**-7},
}

B, H, K, V = 2, 2, 16, 16
IMPLS = ("xla", "pallas")
VARIANTS = ("deltanet", "gdn", "kda")


def _err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def _make(variant: str, t: int, packed: bool, seed: int = 0, b: int = B, h: int = H, dk: int = K,
          dv: int = V):
    """Random inputs: L2-normalized q/k (as the layer feeds them), beta ~ U(0, 2), strong decays
    g ~ U(-5, 0) (a chunk of 64 sums to ~-160, far past exp overflow if masking came after exp)."""
    rng = np.random.default_rng(seed)
    nrm = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    f = lambda x: jnp.asarray(x, jnp.float32)
    x = dict(q=f(nrm(rng.standard_normal((b, t, h, dk)))), k=f(nrm(rng.standard_normal((b, t, h, dk)))),
             v=f(rng.standard_normal((b, t, h, dv))), beta=f(rng.uniform(0, 2, (b, t, h))),
             initial_state=f(rng.standard_normal((b, h, dk, dv))))
    x["g"] = {"deltanet": None, "gdn": f(rng.uniform(-5, 0, (b, t, h))),
              "kda": f(rng.uniform(-5, 0, (b, t, h, dk)))}[variant]
    # Packed rows: segment starts at random positions (a different layout per row).
    x["segment_ids"] = (jnp.asarray(np.cumsum(rng.random((b, t)) < 0.04, axis=1), jnp.int32)
                        if packed else None)
    cts = (f(rng.standard_normal((b, t, h, dv))), f(rng.standard_normal((b, h, dk, dv))))
    return x, cts


_DIFF = ("q", "k", "v", "beta", "g", "initial_state")


# Compile-bound suite: LLVM's optimization level is lowered for the parity harness (same HLO, same IEEE
# float semantics: XLA:CPU fast-math is off), which halves its compile time on the shared 2-core machine.
_FAST_COMPILE = {"xla_backend_optimization_level": 0}


def _fwd_vjp_fn(x, cts, impl, chunk_size):
    """(o, S) and the cotangents of every differentiable input for random cotangents on o AND S."""
    diff = {n: x[n] for n in _DIFF}
    f = lambda d: gated_delta_rule(**d, segment_ids=x["segment_ids"], chunk_size=chunk_size,
                                   implementation=impl)
    out, vjp = jax.vjp(f, diff)
    return out, vjp(cts)[0]


def _compile(fn, *args):
    """jit + compile `fn` for these argument shapes (fast-compile options); returns the callable."""
    return jax.jit(fn).lower(*args).compile(compiler_options=_FAST_COMPILE)


def _gdr(x, **kw):
    """gated_delta_rule(**x, **kw) through `_compile`."""
    return _compile(lambda x: gated_delta_rule(**x, **kw), x)(x)


def _fwd_vjp(x, cts, impl, chunk_size):
    return _compile(functools.partial(_fwd_vjp_fn, impl=impl, chunk_size=chunk_size), x, cts)(x, cts)


_REF_CACHE: dict = {}


def _reference(variant, t, packed):
    key = (variant, t, packed)
    if key not in _REF_CACHE:
        x, cts = _make(variant, t, packed)
        _REF_CACHE[key] = (x, cts, _fwd_vjp(x, cts, "reference", 64))
    return _REF_CACHE[key]


# Each implementation runs every variant at every T; the chunk size alternates so that every variant and
# every T meets both 16 and 64 (the full cross product would double the compile-bound runtime).
PARITY_CASES = [(variant, t, chunk)
                for variant, chunks in (("deltanet", (16, 64, 16, 64)), ("gdn", (64, 16, 64, 16)),
                                        ("kda", (16, 64, 64, 16)))
                for t, chunk in zip((1, 63, 100, 257), chunks, strict=True)]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("variant, t, chunk", PARITY_CASES)
def test_parity_forward_and_all_gradients(impl, variant, t, chunk):
    packed = t >= 100  # T in {1, 63}: plain rows; T in {100, 257}: packed rows.
    x, cts, ((o_ref, s_ref), g_ref) = _reference(variant, t, packed)
    (o, s), grads = _fwd_vjp(x, cts, impl, chunk)
    tol = TOL[jnp.float32]
    assert _err(o, o_ref) < tol["fwd"], "o"
    assert _err(s, s_ref) < tol["fwd"], "final state"
    for name in _DIFF:
        if x[name] is not None:
            assert np.all(np.isfinite(grads[name])), name
            assert _err(grads[name], g_ref[name]) < tol["grad"], f"d{name}"


def _numpy_f64(x):
    """Float64 recurrence in plain numpy, written independently of the JAX reference."""
    q, k, v, beta = (np.asarray(x[n], np.float64) for n in ("q", "k", "v", "beta"))
    b, t, h, dk = q.shape
    g = np.zeros((b, t, h, 1)) if x["g"] is None else np.asarray(x["g"], np.float64)
    g = g[..., None] if g.ndim == 3 else g
    seg = np.zeros((b, t), int) if x["segment_ids"] is None else np.asarray(x["segment_ids"])
    s_all = np.array(x["initial_state"], np.float64)
    o = np.zeros(v.shape)
    for bi in range(b):
        for hi in range(h):
            s = s_all[bi, hi]
            for ti in range(t):
                if ti > 0 and seg[bi, ti] != seg[bi, ti - 1]:
                    s = np.zeros_like(s)
                s = np.exp(g[bi, ti, hi])[:, None] * s
                kt = k[bi, ti, hi]
                s = s + beta[bi, ti, hi] * np.outer(kt, v[bi, ti, hi] - s.T @ kt)
                o[bi, ti, hi] = s.T @ (q[bi, ti, hi] * dk**-0.5)
            s_all[bi, hi] = s
    return o, s_all


@pytest.mark.parametrize("variant", VARIANTS)
def test_reference_matches_float64_numpy(variant):
    x, _ = _make(variant, 40, packed=True, seed=3, dk=8, dv=4)
    o64, s64 = _numpy_f64(x)
    o, s = _gdr(x, implementation="reference")
    assert _err(o, o64) < TOL[jnp.float32]["fwd"]
    assert _err(s, s64) < TOL[jnp.float32]["fwd"]


@pytest.mark.parametrize("chunk", (64, 128))
def test_kda_wide_per_channel_rates_match_float64(chunk):
    """KDA with per-channel decay rates from 1e-4 to 20 per step (the spec §2.3 numerics sweep): inside one
    chunk some channels barely decay while others underflow after a step or two, so any factor above 1
    (exp(G_t) * exp(-G_s)) would overflow and any differenced cumsum would lose the slow channels. The
    chunked tree path must match a float64 recurrence in the forward pass and the fp32 reference in every
    gradient."""
    t, dk = 200, 16
    x, cts = _make("kda", t, packed=True, seed=17, b=1, dk=dk, dv=8)
    rng = np.random.default_rng(17)
    rates = np.logspace(-4, np.log10(20.0), dk)
    x["g"] = jnp.asarray(-rates * rng.uniform(0.5, 1.0, (1, t, H, dk)), jnp.float32)
    o64, s64 = _numpy_f64(x)
    (o, s), grads = _fwd_vjp(x, cts, "xla", chunk)
    assert _err(o, o64) < TOL[jnp.float32]["fwd"]
    assert _err(s, s64) < TOL[jnp.float32]["fwd"]
    _, g_ref = _fwd_vjp(x, cts, "reference", chunk)
    for name in _DIFF:
        assert np.all(np.isfinite(grads[name])), name
        assert _err(grads[name], g_ref[name]) < TOL[jnp.float32]["grad"], f"d{name}"


def _pad_identity(piece: dict, length: int) -> dict:
    """Right-pads a segment's inputs to `length` with identity steps (beta = 0, g = 0: S <- S + 0), so
    every segment reuses one compiled shape; the padded outputs are dropped and the state is unchanged."""
    pad = lambda x: jnp.pad(x, [(0, 0), (0, length - x.shape[1])] + [(0, 0)] * (x.ndim - 2))
    return {n: (pad(x) if x is not None else None) for n, x in piece.items()}


@pytest.mark.parametrize("impl", ("reference",) + IMPLS)
def test_packed_equals_per_segment_loop(impl):
    t = 90
    x, _ = _make("kda", t, packed=True, seed=5, b=1)
    o, s = _gdr(x, chunk_size=16, implementation=impl)
    seg = np.asarray(x["segment_ids"][0])
    starts = [0] + [i for i in range(1, t) if seg[i] != seg[i - 1]] + [t]
    assert len(starts) > 3, "the sample must hold several segments"
    state = x["initial_state"]
    run_one = None  # every padded segment has one shape: compile once
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        piece = _pad_identity({n: x[n][:, a:b] for n in ("q", "k", "v", "beta", "g")}, t)
        piece["initial_state"] = state
        if run_one is None:
            run_one = _compile(lambda p: gated_delta_rule(**p, chunk_size=16, implementation=impl), piece)
        o_seg, s_seg = run_one(piece)
        assert _err(o[:, a:b], o_seg[:, : b - a]) < TOL[jnp.float32]["fwd"], (a, b)
        state = jnp.zeros_like(state)  # later segments start from zero
    assert _err(s, s_seg) < TOL[jnp.float32]["fwd"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_decode_steps_chained_equal_full_forward(variant):
    x, _ = _make(variant, 21, packed=False, seed=7)
    o_full, s_full = _gdr(x, chunk_size=16)

    def decode(x):
        def step(state, xt):
            o_t, state = gated_delta_rule_step(xt["q"], xt["k"], xt["v"], beta=xt["beta"], g=xt["g"],
                                               state=state)
            return state, o_t

        seq = {n: (jnp.moveaxis(x[n], 1, 0) if x[n] is not None else None)
               for n in ("q", "k", "v", "beta", "g")}
        return jax.lax.scan(step, x["initial_state"], seq)

    s_dec, o_dec = _compile(decode, x)(x)
    assert _err(jnp.moveaxis(o_dec, 0, 1), o_full) < TOL[jnp.float32]["fwd"]
    assert _err(s_dec, s_full) < TOL[jnp.float32]["fwd"]


def test_state_passing_equals_one_pass():
    """Running [x1; x2] equals running x1, then x2 from x1's final state (spec invariant 3)."""
    x, _ = _make("kda", 128, packed=False, seed=9)
    o, s = _gdr(x, chunk_size=32)
    halves = [{n: (x[n][:, i * 64:(i + 1) * 64] if n not in ("initial_state", "segment_ids") else x[n])
               for n in x} for i in (0, 1)]
    run_half = _compile(lambda h: gated_delta_rule(**h, chunk_size=32), halves[0])
    o1, s1 = run_half(halves[0])
    o2, s2 = run_half({**halves[1], "initial_state": s1})
    assert _err(jnp.concatenate([o1, o2], axis=1), o) < TOL[jnp.float32]["fwd"]
    assert _err(s2, s) < TOL[jnp.float32]["fwd"]


def test_bf16_inputs_match_reference():
    x, _ = _make("gdn", 100, packed=True, seed=11)
    xb = {n: (v.astype(jnp.bfloat16) if n in ("q", "k", "v") else v) for n, v in x.items()}
    o_ref, s_ref = _gdr(xb, implementation="reference")
    for impl in IMPLS:
        o, s = _gdr(xb, implementation=impl)
        assert o.dtype == jnp.bfloat16 and s.dtype == jnp.float32
        assert _err(o, o_ref) < TOL[jnp.bfloat16]["fwd"]
        assert _err(s, s_ref) < TOL[jnp.float32]["fwd"]  # the state is fp32 on both sides


# Cheap on purpose (B1 H1 K=V=8): fp32 with per-channel decays, bf16 inputs with scalar decays.
@pytest.mark.parametrize("dtype, variant", [(jnp.float32, "kda"), (jnp.bfloat16, "gdn")])
def test_long_sequence_stays_finite(dtype, variant):
    x, (do, _) = _make(variant, 16384, packed=False, seed=13, b=1, h=1, dk=8, dv=8)
    x = {n: (v.astype(dtype) if n in ("q", "k", "v") else v) for n, v in x.items()}

    def run(x):
        f = lambda q, g: gated_delta_rule(**{**x, "q": q, "g": g}, implementation="xla")
        (o, s), vjp = jax.vjp(f, x["q"], x["g"])
        return o, s, vjp((do.astype(dtype), jnp.ones_like(s)))

    o, s, (dq, dg) = _compile(run, x)(x)
    for a in (o, s, dq, dg):
        assert np.all(np.isfinite(np.asarray(a, np.float32)))
    assert float(jnp.max(jnp.abs(o.astype(jnp.float32)))) > 0


def _bad(**over):
    x, _ = _make("gdn", 8, packed=False, b=1, h=1, dk=4, dv=4)
    x.update(over)
    return x


@pytest.mark.parametrize("over, arg", [
    (dict(q=jnp.zeros((1, 8, 4))), "q"),
    (dict(k=jnp.zeros((1, 8, 1, 5))), "k"),
    (dict(v=jnp.zeros((1, 7, 1, 4))), "v"),
    (dict(beta=jnp.zeros((1, 8))), "beta"),
    (dict(g=jnp.zeros((1, 8, 1, 3))), "g"),
    (dict(initial_state=jnp.zeros((1, 1, 4, 5))), "initial_state"),
    (dict(segment_ids=jnp.zeros((1, 9), jnp.int32)), "segment_ids"),
    (dict(segment_ids=jnp.zeros((1, 8), jnp.float32)), "segment_ids"),
    (dict(v=jnp.zeros((1, 8, 1, 4), jnp.bfloat16)), "v"),
    (dict(beta=jnp.zeros((1, 8, 1), jnp.int32)), "beta"),
    (dict(g=jnp.full((1, 8, 1), 0.1)), "g"),
    (dict(beta=jnp.full((1, 8, 1), 2.5)), "beta"),
    (dict(beta=jnp.full((1, 8, 1), -0.1)), "beta"),
])
def test_bad_inputs_raise(over, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        gated_delta_rule(**_bad(**over))


def test_bad_chunk_size_and_implementation():
    with pytest.raises(ValueError, match="chunk_size"):
        gated_delta_rule(**_bad(), chunk_size=48)
    with pytest.raises(ValueError, match="unknown implementation"):
        gated_delta_rule(**_bad(), implementation="triton")


def test_dispatch_never_falls_back_silently(monkeypatch):
    fn, _ = api._IMPLEMENTATIONS["pallas"]
    monkeypatch.setitem(api._IMPLEMENTATIONS, "pallas", (fn, ("tpu",)))
    with pytest.raises(RuntimeError, match="cannot run"):
        gated_delta_rule(**_bad(), implementation="pallas")
    # A sequence is tried in order: the first one that can run is used.
    assert api._select(("pallas", "reference")) is api._IMPLEMENTATIONS["reference"][0]
    assert api._select(None) is api._IMPLEMENTATIONS["xla"][0]
