"""Gated delta rule (DeltaNet, Gated DeltaNet, KDA) on the shared parity harness: every fast path against the
float32 recurrence (forward and every gradient), which is itself checked against a float64 numpy recurrence;
packed rows against a per-segment loop; decode; per-channel rates over five decades; state passing; bf16;
long T; input errors."""

from __future__ import annotations

import functools

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import tolerance

from icml26zoo.kernels.delta_rule import api, gated_delta_rule, gated_delta_rule_step

B, H, K, V = 2, 2, 16, 16
IMPLS = ("xla", "pallas")
VARIANTS = ("deltanet", "gdn", "kda")
TOL = tolerance("delta_rule")
TOL_BF16 = tolerance("delta_rule", jnp.bfloat16)



def _make(variant: str, rng: np.random.Generator, batch: int, length: int, h: int = H, dk: int = K,
          dv: int = V) -> dict[str, jax.Array]:
    """Inputs as the layer feeds them: L2-normalized q, k [B, T, H, K], v [B, T, H, V], beta ~ U(0, 2)
    [B, T, H], initial_state [B, H, K, V] and, except for DeltaNet, strong decays g ~ U(-5, 0) ([B, T, H] for
    GDN, [B, T, H, K] for KDA: a chunk of 64 sums to ~-160, far past exp overflow if masking came after exp)."""
    nrm = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    f = lambda x: jnp.asarray(x, jnp.float32)
    x = dict(q=f(nrm(rng.standard_normal((batch, length, h, dk)))),
             k=f(nrm(rng.standard_normal((batch, length, h, dk)))),
             v=f(rng.standard_normal((batch, length, h, dv))), beta=f(rng.uniform(0, 2, (batch, length, h))),
             initial_state=f(rng.standard_normal((batch, h, dk, dv))))
    if variant != "deltanet":
        x["g"] = f(rng.uniform(-5, 0, (batch, length, h) + ((dk,) if variant == "kda" else ())))
    return x


def _case(variant: str) -> harness.OpCase:
    steps = ("q", "k", "v", "beta") + (() if variant == "deltanet" else ("g",))
    return harness.OpCase(name="delta_rule", make_inputs=functools.partial(_make, variant), reference=_REFERENCE,
                          fast=_FAST, differentiable=steps + ("initial_state",), time_inputs=steps,
                          step=gated_delta_rule_step)


# One function object per path: the harness compiles each (path, shapes) once for the whole module.
_REFERENCE = functools.partial(gated_delta_rule, implementation="reference")
_FAST = {impl: functools.partial(gated_delta_rule, implementation=impl) for impl in IMPLS}
CASES = {variant: _case(variant) for variant in VARIANTS}


def _run(x: dict[str, jax.Array], **kw: object) -> tuple[jax.Array, jax.Array]:
    """gated_delta_rule(**x, **kw), jitted with the fast-compile options."""
    return harness.jit(lambda x: gated_delta_rule(**x, **kw))(x)


def _inputs(variant: str, length: int, *, seed: int, packed: bool, batch: int = B, **dims: int) -> dict:
    rng = np.random.default_rng(seed)
    x = _make(variant, rng, batch, length, **dims)
    x["segment_ids"] = harness.random_segment_ids(rng, batch, length) if packed else None
    return x


# Compile once, check many: each parity case compiles one VJP per path (reference, xla, pallas), and the checks
# further down run on these programs (same shapes, B = 2) instead of compiling their own.
# Every variant meets T = 1, T = 100 (plain rows; chunk 16: 6 chunks + 4, chunk 64: 1 + 36) and T = 129 (packed
# rows; chunk 16: 8 + 1, chunk 64: 2 + 1), at both chunk sizes: each variant and each fast path runs several
# chunks at 16 and at 64, remainder 1 and another remainder, packed rows at both sizes across the variants.
# KDA also runs T = 129 plain at chunk 64, the batch of segments alone of the packed-rows check below.
PARITY_CASES = [("deltanet", 1, 16, False), ("deltanet", 100, 16, False), ("deltanet", 129, 64, True),
                ("gdn", 1, 64, False), ("gdn", 100, 64, False), ("gdn", 129, 16, True),
                ("kda", 1, 16, False), ("kda", 100, 16, False), ("kda", 129, 64, True), ("kda", 129, 64, False)]
# The plain-row parity case of each variant that its decode check reads its forward from.
DECODE = {"deltanet": (100, 16), "gdn": (100, 64), "kda": (100, 16)}


@pytest.mark.parametrize("variant, t, chunk, packed", PARITY_CASES)
def test_parity_forward_and_all_gradients(variant: str, t: int, chunk: int, packed: bool) -> None:
    harness.check_forward_and_grads(CASES[variant], t, chunk_size=chunk, packed=packed)


def _numpy_f64(x: dict) -> tuple[np.ndarray, np.ndarray]:
    """Float64 recurrence in plain numpy, written independently of the JAX reference."""
    q, k, v, beta = (np.asarray(x[n], np.float64) for n in ("q", "k", "v", "beta"))
    b, t, h, dk = q.shape
    g = np.zeros((b, t, h, 1)) if x.get("g") is None else np.asarray(x["g"], np.float64)
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
def test_reference_matches_float64_numpy(variant: str) -> None:
    """The float32 reference on the packed parity inputs (T = 129, its compiled program) against float64 numpy."""
    x = _inputs(variant, 129, seed=0, packed=True)
    o, s = harness.outputs(CASES[variant], "reference", x)
    o64, s64 = _numpy_f64(x)
    harness.assert_close(o, o64, TOL, what="o")
    harness.assert_close(s, s64, TOL, what="final state")


@pytest.mark.parametrize("chunk", (64, 128))
def test_kda_wide_per_channel_rates_match_float64(chunk: int) -> None:
    """KDA with per-channel decay rates from 1e-4 to 20 per step (five decades in one head): inside one
    chunk some channels barely decay while others underflow after a step or two, so any factor above 1
    (exp(G_t) * exp(-G_s)) would overflow and any differenced cumsum would lose the slow channels. The
    chunked tree path must match a float64 recurrence in the forward pass and the fp32 reference in every
    gradient. On the packed KDA parity shapes (T = 129: chunk 64 reuses its programs; chunk 128 is one full
    chunk and a remainder of 1)."""
    t, case = 129, CASES["kda"]
    x = _inputs("kda", t, seed=17, packed=True)
    rng = np.random.default_rng(17)
    rates = np.logspace(-4, np.log10(20.0), K)
    x["g"] = jnp.asarray(-rates * rng.uniform(0.5, 1.0, (B, t, H, K)), jnp.float32)
    cotangents = harness.random_cotangents(rng, jax.eval_shape(lambda i: _REFERENCE(**i), x))
    (o, s), grads = harness.forward_and_grads(case, "xla", x, cotangents, chunk)
    o64, s64 = _numpy_f64(x)
    harness.assert_close(o, o64, TOL, what="o")
    harness.assert_close(s, s64, TOL, what="final state")
    _, want = harness.forward_and_grads(case, "reference", x, cotangents)
    for name in case.differentiable:
        harness.assert_close(grads[name], want[name], TOL, kind="grad", what=f"d{name}")


# Two rows of T = 129 in eight segments (single tokens included, edges inside and on chunk edges of 64).
PACKED_BOUNDS = [[0, 11, 12, 40, 64, 71, 129], [0, 1, 65, 129]]


@pytest.mark.parametrize("impl", ("reference",) + IMPLS)
def test_packed_equals_per_segment_loop(impl: str) -> None:
    """KDA at chunk 64: packed rows against each segment alone (zero-padded: beta = 0, g = 0 is the identity
    step), outputs, final states and every gradient, on the programs of the T = 129 parity cases."""
    harness.check_packed_equals_segments_alone(CASES["kda"], PACKED_BOUNDS, impl=impl, chunk_size=64)


@pytest.mark.parametrize("variant", VARIANTS)
def test_decode_steps_chained_equal_full_forward(variant: str) -> None:
    t, chunk = DECODE[variant]
    harness.check_decode_equals_forward(CASES[variant], t, impl="xla", chunk_size=chunk, seed=7, via_vjp=True)


def test_state_passing_equals_one_pass() -> None:
    """Running [x1; x2] equals running x1, then x2 from x1's final state (the chunked form's invariant); the
    cut at 50 is inside a chunk of the one pass (chunk 16, the KDA T = 100 parity case's program)."""
    x = _inputs("kda", 100, seed=9, packed=False)
    o, s = harness.outputs(CASES["kda"], "xla", x, 16)
    halves = [{n: (x[n][:, i * 50:(i + 1) * 50] if n not in ("initial_state", "segment_ids") else x[n])
               for n in x} for i in (0, 1)]
    run_half = harness.jit(lambda h: gated_delta_rule(**h, chunk_size=16, implementation="xla"))
    o1, s1 = run_half(halves[0])
    o2, s2 = run_half({**halves[1], "initial_state": s1})
    harness.assert_close(jnp.concatenate([o1, o2], axis=1), o, TOL, what="o")
    harness.assert_close(s2, s, TOL, what="final state")


def test_bf16_inputs_match_reference() -> None:
    x = _inputs("gdn", 100, seed=11, packed=True)
    xb = {n: (v.astype(jnp.bfloat16) if n in ("q", "k", "v") else v) for n, v in x.items()}
    o_ref, s_ref = _run(xb, implementation="reference")
    for impl in IMPLS:
        o, s = _run(xb, implementation=impl)
        assert o.dtype == jnp.bfloat16 and s.dtype == jnp.float32
        harness.assert_close(o, o_ref, TOL_BF16, what=f"{impl} o")
        # The state is float32 on both sides.
        harness.assert_close(s, s_ref, TOL, what=f"{impl} final state")


# Cheap on purpose (B1 H1 K=V=8): fp32 with per-channel decays, bf16 inputs with scalar decays.
@pytest.mark.parametrize("dtype, variant", [(jnp.float32, "kda"), (jnp.bfloat16, "gdn")])
def test_long_sequence_stays_finite(dtype: jnp.dtype, variant: str) -> None:
    x = _inputs(variant, 16384, seed=13, packed=False, batch=1, h=1, dk=8, dv=8)
    x = {n: (v.astype(dtype) if n in ("q", "k", "v") else v) for n, v in x.items()}
    do = jnp.asarray(np.random.default_rng(13).standard_normal(x["v"].shape), dtype)

    def run(x: dict) -> tuple:
        f = lambda q, g: gated_delta_rule(**{**x, "q": q, "g": g}, implementation="xla")
        (o, s), vjp = jax.vjp(f, x["q"], x["g"])
        return o, s, vjp((do, jnp.ones_like(s)))

    o, s, (dq, dg) = harness.jit(run)(x)
    for a in (o, s, dq, dg):
        assert np.all(np.isfinite(np.asarray(a, np.float32)))
    assert float(jnp.max(jnp.abs(o.astype(jnp.float32)))) > 0


def _bad(**over: jax.Array) -> dict:
    x = _inputs("gdn", 8, seed=0, packed=False, batch=1, h=1, dk=4, dv=4)
    x.update(over)
    return x


@pytest.mark.parametrize("over, arg", harness.DELTA_RULE_BAD_INPUTS + [
    (dict(g=jnp.zeros((1, 8, 1, 3))), "g"),
    (dict(initial_state=jnp.zeros((1, 1, 4, 5))), "initial_state"),
    (dict(v=jnp.zeros((1, 8, 1, 4), jnp.bfloat16)), "v"),
    (dict(beta=jnp.zeros((1, 8, 1), jnp.int32)), "beta"),
    (dict(beta=jnp.full((1, 8, 1), -0.1)), "beta"),
])
def test_bad_inputs_raise(over: dict, arg: str) -> None:
    with pytest.raises(ValueError, match=f"`{arg}`"):
        gated_delta_rule(**_bad(**over))


def test_bad_chunk_size_and_implementation() -> None:
    harness.check_bad_chunk_size_and_implementation(gated_delta_rule, _bad())


def test_dispatch_never_falls_back_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    harness.check_dispatch_never_falls_back(monkeypatch, api, gated_delta_rule, _bad(), blocked="pallas",
                                            fallback="reference")
