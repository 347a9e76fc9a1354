"""Tests of the Pallas FiX kernels (kernels.value_forget_attention.pallas, interpret mode on CPU).

Every case compares the Pallas path with the package's materialized reference (outputs and the gradients of
q, k, v, log_vgate and log_fgate under a random cotangent), plus a float64 numpy oracle for strong gates.
Error measure: max|actual − expected| / max(1, max|expected|) (max-normalized, as the spec's numerics notes).
Tolerances (float32), tighter than PERFORMANCE.md C0 (1e-4 max-abs):
- forward 1e-5: the kernels only reorder float32 sums (online softmax, block order, the decay split into
  λ_i, gap and ρ_j factors); observed ≤ 2e-7 at T = 257 (packed, scalar gate) for gates U(−3, 0),
  U(−20, 0) and U(−0.05, 0).
- gradients 1e-5: dk, dv and the gate gradients accumulate up to T block contributions and the gate
  gradients are reverse cumsums over T of them; observed ≤ 1.3e-6 in the same runs.
- bfloat16 forward 2e-2: inputs rounded to bf16 (2⁻⁸ relative), P and V' cast to bf16 for the P·V' matmul.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kernels._dispatch
from kernels.value_forget_attention import pallas, reference, value_forget_attention

TOL = {"fwd": 1e-5, "grad": 1e-5, "bf16_fwd": 2e-2}
BLOCK = 16  # small blocks so that T = 63, 100, 257 span several blocks plus a padded tail
GRAD_NAMES = ["dq", "dk", "dv", "dlog_vgate", "dlog_fgate"]


def _inputs(t, *, b=2, h=4, hkv=2, d=16, dv=8, gate=(-3.0, 0.0), seed=0, dtype=jnp.float32):
    """q, k, v, log_vgate [B,T,H,Dv], log_fgate [B,T,H] and a random cotangent [B,T,H,Dv]."""
    rng = np.random.default_rng(seed + t)
    q = jnp.asarray(rng.normal(size=(b, t, h, d)), dtype)
    k = jnp.asarray(rng.normal(size=(b, t, hkv, d)), dtype)
    v = jnp.asarray(rng.normal(size=(b, t, hkv, dv)), dtype)
    log_vgate = jnp.asarray(rng.uniform(*gate, size=(b, t, h, dv)), jnp.float32)
    log_fgate = jnp.asarray(rng.uniform(*gate, size=(b, t, h)), jnp.float32)
    ct = jnp.asarray(rng.normal(size=(b, t, h, dv)), jnp.float32)  # random cotangent, not .sum()
    return q, k, v, log_vgate, log_fgate, ct


def _packed_ids(t, b=2, seed=0):
    """Sorted random segment ids [B, T] with a length-1 segment at the start of row 0."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.integers(1, 4, size=(b, t)), axis=1)
    ids[0, 0] = 0
    return jnp.asarray(ids, jnp.int32)


def _pallas(*args, **kwargs):
    return pallas.value_forget_attention(*args, block_size=BLOCK, **kwargs)


@functools.cache
def _jitted_vjp(fn, with_fgate):
    """One jitted (q, k, v, log_vgate, log_fgate, ct, seg) -> (u, grads) per function and gate flag."""

    def run(q, k, v, log_vgate, log_fgate, ct, segment_ids):
        def call(q, k, v, log_vgate, log_fgate):
            u = fn(q, k, v, log_vgate, log_fgate=log_fgate if with_fgate else None, segment_ids=segment_ids)
            return u.astype(jnp.float32)

        u, vjp = jax.vjp(call, q, k, v, log_vgate, log_fgate)
        return u, vjp(ct)

    return jax.jit(run)


def _value_and_grads(fn, inputs, segment_ids=None, with_fgate=True):
    """(u, (dq, dk, dv, d log_vgate, d log_fgate)) through the VJP with the inputs' random cotangent."""
    return _jitted_vjp(fn, with_fgate)(*inputs, segment_ids)


def _err(actual, expected):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return np.max(np.abs(actual - expected)) / max(1.0, np.max(np.abs(expected)))


def _assert_close(actual, expected, tol, what):
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    assert np.all(np.isfinite(np.asarray(actual, np.float32))), f"{what}: non-finite values"
    err = _err(actual, expected)
    assert err <= tol, f"{what}: error {err:.2e} > {tol:.0e}"


def _assert_all_close(result, expected):
    (u, grads), (u_ref, grads_ref) = result, expected
    _assert_close(u, u_ref, TOL["fwd"], "u")
    for name, g, g_ref in zip(GRAD_NAMES, grads, grads_ref, strict=True):
        _assert_close(g, g_ref, TOL["grad"], name)


# Every T runs once without segments or scalar gate and once packed with the scalar gate (GQA in both):
# each case costs one interpret-mode compile of the three kernels, the file's main runtime.
@pytest.mark.parametrize(("packed", "with_fgate"), [(False, False), (True, True)], ids=["gqa-vgate", "packed-fgate"])
@pytest.mark.parametrize("t", [1, 63, 100, 257])
def test_parity_forward_and_all_gradients(t, packed, with_fgate):
    inputs = _inputs(t)
    seg = _packed_ids(t) if packed else None
    result = _value_and_grads(_pallas, inputs, seg, with_fgate)
    _assert_all_close(result, _value_and_grads(reference.value_forget_attention, inputs, seg, with_fgate))
    if not with_fgate:
        np.testing.assert_array_equal(np.asarray(result[1][4]), 0.0, err_msg="log_fgate=None got a gradient")


def _float64_oracle(q, k, v, log_vgate, log_fgate):
    """Direct float64 numpy FiX: exponents from float64 prefix sums (exact enough to judge float32 paths)."""
    q, k, v, av, af = (np.asarray(x, np.float64) for x in (q, k, v, log_vgate, log_fgate))
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    lam_f, lam_v = np.cumsum(af, axis=1), np.cumsum(av, axis=1)  # [B,T,H], [B,T,H,Dv]
    s = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(q.shape[-1])
    s = s + np.transpose(lam_f, (0, 2, 1))[..., :, None] - np.transpose(lam_f, (0, 2, 1))[..., None, :]
    t = q.shape[1]
    causal = np.tril(np.ones((t, t), bool))
    s = np.where(causal, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    log_decay = lam_v[:, :, None] - lam_v[:, None, :]  # [B, i, j, H, Dv]
    decay = np.exp(np.where(causal[None, :, :, None, None], log_decay, -np.inf))
    return np.einsum("bhij,bijhc,bjhc->bihc", p, decay, v)


def test_strong_gates_match_float64():
    """Gates U(−20, 0) at T = 257: |Λ_T| ≈ 2.6e3, so any difference of global float32 cumsums shows up."""
    q, k, v, av, af, _ = _inputs(257, gate=(-20.0, 0.0))
    u = jax.jit(functools.partial(_pallas, log_fgate=af))(q, k, v, av)
    _assert_close(u, _float64_oracle(q, k, v, av, af), TOL["fwd"], "u")


@pytest.mark.parametrize("with_fgate", [False, True], ids=["vgate", "vgate+fgate"])
def test_very_strong_gates_are_finite(with_fgate, t=63):
    """log gates = −1e4: every off-diagonal decay underflows to 0; outputs and all gradients stay finite."""
    q, k, v, _, _, ct = _inputs(t)
    av = jnp.full(q.shape[:3] + (v.shape[3],), -1e4, jnp.float32)
    af = jnp.full(q.shape[:3], -1e4, jnp.float32)
    inputs = (q, k, v, av, af, ct)
    result = _value_and_grads(_pallas, inputs, with_fgate=with_fgate)
    for x in [result[0], *result[1]]:
        assert np.all(np.isfinite(np.asarray(x)))
    _assert_all_close(result, _value_and_grads(reference.value_forget_attention, inputs, with_fgate=with_fgate))
    if with_fgate:
        # Only the diagonal survives the scalar gate: P_ii = 1, so u_i = v_i of its kv head.
        _assert_close(result[0], jnp.repeat(v, 2, axis=2), TOL["fwd"], "u")


def test_zero_gates_are_causal_dot_product_attention():
    q, k, v, _, _, _ = _inputs(100, dv=16)
    zeros = jnp.zeros(q.shape, jnp.float32)
    expected = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    _assert_close(jax.jit(_pallas)(q, k, v, zeros), expected, TOL["fwd"], "zero gates")


def test_no_gradient_crosses_a_segment_boundary():
    """A loss on the second segment's outputs gives exactly zero gradient to every first-segment input."""
    q, k, v, av, af, _ = _inputs(40)
    seg = jnp.asarray(np.repeat([[1] * 17 + [2] * 23], 2, axis=0), jnp.int32)
    weights = jnp.asarray(np.random.default_rng(1).normal(size=av.shape), jnp.float32)
    weights = weights * (seg == 2).astype(jnp.float32)[..., None, None]

    def loss(q, k, v, av, af):
        return jnp.sum(_pallas(q, k, v, av, log_fgate=af, segment_ids=seg) * weights)

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))(q, k, v, av, af)
    for name, grad in zip(GRAD_NAMES, grads, strict=True):
        np.testing.assert_array_equal(np.asarray(grad[:, :17]), 0.0, err_msg=f"{name} leaked across segments")


def test_bfloat16_forward():
    q, k, v, av, af, _ = _inputs(63, dtype=jnp.bfloat16)
    u = jax.jit(functools.partial(_pallas, log_fgate=af))(q, k, v, av)
    assert u.dtype == jnp.bfloat16
    expected = reference.value_forget_attention(q, k, v, av, log_fgate=af)
    _assert_close(u, expected, TOL["bf16_fwd"], "u bf16")


def test_api_dispatch_runs_pallas_on_cpu_only(monkeypatch):
    """implementation="pallas" with the default block (64: two blocks and a tail at T = 100) matches the
    reference; on a GPU or TPU backend naming it raises, since the compiled lowering is unverified."""
    q, k, v, av, af, _ = _inputs(100)
    fn = jax.jit(lambda *x: value_forget_attention(*x[:4], log_fgate=x[4], implementation="pallas"))
    expected = reference.value_forget_attention(q, k, v, av, log_fgate=af)
    _assert_close(fn(q, k, v, av, af), expected, TOL["fwd"], "api pallas")
    for backend in ["gpu", "tpu"]:
        monkeypatch.setattr(kernels._dispatch.jax, "default_backend", lambda backend=backend: backend)
        with pytest.raises(RuntimeError, match="pallas"):
            value_forget_attention(q, k, v, av, log_fgate=af, implementation="pallas")
