"""ISA (Shao et al., arXiv 2605.04569): reductions to dense attention, the Taylor sparse path against a float64
loop of the paper's formula, the paper's invariants, gradients of approximated blocks, and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.longctx.isa import isa_attention, isa_attention_and_plan, isa_gate, sparse_path
from icml26zoo.longctx.isa_plan import to_blocks

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

B, N, H, D, BLOCK, N_SRC = 1, 64, 2, 8, 8, 32
TOL = 2e-5


def _qkv(seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(scale * rng.normal(size=(B, N, H, D)), jnp.float32) for _ in range(3))


def _dense(q, k, v):
    return np.asarray(jax.nn.dot_product_attention(q, k, v))


def _dense_np(q, k, v):
    """[T, D] float64 softmax attention."""
    s = q @ k.T / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def test_dense_limit_and_preselection_alone():
    q, k, v = _qkv()
    dense = isa_attention(q, k, v, N_SRC, block=BLOCK, ctx_keep=1.0, full_frac=1.0)
    np.testing.assert_allclose(dense, _dense(q, k, v), atol=TOL)
    out, plan, sizes = isa_attention_and_plan(q, k, v, N_SRC, block=BLOCK, ctx_keep=0.5, full_frac=1.0)
    assert plan.kept_ctx.shape == (B, H, sizes.n_kept) and sizes.n_kept == 2
    for h in range(H):
        kept = np.concatenate([np.arange(N_SRC)] + [N_SRC + BLOCK * c + np.arange(BLOCK)
                                                     for c in np.asarray(plan.kept_ctx[0, h])])
        q64, k64, v64 = (np.asarray(x[0, :, h], np.float64) for x in (q, k, v))
        want = _dense_np(q64, k64[kept], v64[kept])
        np.testing.assert_allclose(out[0, :, h], want, atol=TOL)
        assert np.abs(np.asarray(out[0, :, h]) - _dense_np(q64, k64, v64)).max() > 1e-3


def test_sparse_path_matches_float64_formula():
    q, k, v = _qkv(1)
    qb, kb, vb = (to_blocks(x, BLOCK) for x in (q, k, v))
    exact_ids = jnp.asarray(np.tile([[[1, 6], [0, 3], [7, 2]]], (B, H, 1, 1)), jnp.int32)
    got = np.asarray(sparse_path(qb[:, :, :3], kb, vb, exact_ids))
    for h in range(H):
        for s in range(3):
            qs = np.asarray(qb[0, h, s], np.float64)
            kbh, vbh = np.asarray(kb[0, h], np.float64), np.asarray(vb[0, h], np.float64)
            num, den = 0.0, 0.0
            for j in range(kbh.shape[0]):
                if j in np.asarray(exact_ids[0, h, s]):
                    w = np.exp(qs @ kbh[j].T / np.sqrt(D))
                    num, den = num + w @ vbh[j], den + w.sum(-1, keepdims=True)
                else:
                    w = np.exp(qs @ kbh[j].mean(0) / np.sqrt(D))[:, None]
                    num, den = num + w * vbh[j].sum(0), den + BLOCK * w
            np.testing.assert_allclose(got[0, h, s], num / den, atol=TOL)


def test_exact_sparse_path_and_block_constant_keys_equal_full_path():
    q, k, v = _qkv(2)
    full = isa_attention(q, k, v, N_SRC, block=BLOCK, ctx_keep=0.5, full_frac=1.0)
    all_exact = isa_attention(q, k, v, N_SRC, block=BLOCK, ctx_keep=0.5, full_frac=0.0, exact_frac=1.0)
    np.testing.assert_allclose(all_exact, full, atol=TOL)
    k_const = jnp.repeat(to_blocks(k, BLOCK).mean(3), BLOCK, axis=2).transpose(0, 2, 1, 3)
    full_c = isa_attention(q, k_const, v, N_SRC, block=BLOCK, ctx_keep=0.5, full_frac=1.0)
    sparse_c = isa_attention(q, k_const, v, N_SRC, block=BLOCK, ctx_keep=0.5, full_frac=0.0)
    np.testing.assert_allclose(sparse_c, full_c, atol=TOL)
    sparse = isa_attention(q, k, v, N_SRC, block=BLOCK, ctx_keep=0.5, full_frac=0.0)
    assert np.abs(np.asarray(sparse - full)).max() > 1e-3


def test_convexity_constants_and_gate():
    q, k, v = _qkv(3, scale=2.0)
    out = np.asarray(isa_attention(q, k, v, N_SRC, block=BLOCK, ctx_keep=0.25, full_frac=0.5))
    v_np = np.asarray(v)
    assert (out <= v_np.max(1, keepdims=True) + 1e-5).all() and (out >= v_np.min(1, keepdims=True) - 1e-5).all()
    const = jnp.full_like(v, 0.7)
    gate = isa_gate(jnp.asarray(np.random.default_rng(4).normal(size=(B, N, 5)), jnp.float32), jnp.ones(5))
    assert float(jnp.abs(gate).max()) < 0.25
    plain = isa_attention(q, k, const, N_SRC, block=BLOCK, ctx_keep=0.25)
    gated = isa_attention(q, k, const, N_SRC, block=BLOCK, ctx_keep=0.25, gate=gate)
    np.testing.assert_allclose(plain, 0.7, atol=1e-6)
    want = np.broadcast_to(0.7 * (1 + np.asarray(gate))[:, :, None, None], gated.shape)
    np.testing.assert_allclose(gated, want, atol=1e-6)


def test_planted_context_and_sharp_blocks_and_routing_counts():
    q, k, v = _qkv(5, scale=0.3)
    direction = np.zeros(D, np.float32)
    direction[0] = 1.0
    q_np, k_np = np.array(q), np.array(k)
    q_np[:, :N_SRC] += 2.0 * direction
    # context block 1 aligns with every source query, context block 3 points away from them
    k_np[:, N_SRC + BLOCK: N_SRC + 2 * BLOCK] += 3.0 * direction
    k_np[:, N_SRC + 3 * BLOCK: N_SRC + 4 * BLOCK] -= 3.0 * direction
    # query block 6 (context part) is large and aligned with source key block 2
    k_np[:, 2 * BLOCK: 3 * BLOCK] += 3.0 * np.roll(direction, 1)
    q_np[:, 6 * BLOCK: 7 * BLOCK] = 8.0 * np.roll(direction, 1)
    _, plan, sizes = isa_attention_and_plan(jnp.asarray(q_np), jnp.asarray(k_np), v, N_SRC, block=BLOCK,
                                            ctx_keep=0.25, full_frac=0.25)
    assert sizes.n_kept == 1 and sizes.n_full == 2
    np.testing.assert_array_equal(plan.kept_ctx, 1)
    order, sharp = np.asarray(plan.order), np.asarray(plan.sharpness)
    for h in range(H):
        assert sorted(order[0, h]) == list(range(N // BLOCK))
        full, rest = order[0, h, : sizes.n_full], order[0, h, sizes.n_full:]
        assert sharp[0, h, full].min() >= sharp[0, h, rest].max()
        assert 6 in full


def test_approximated_block_gradients_are_block_means():
    q, k, v = _qkv(6)
    qb, kb, vb = (to_blocks(x, BLOCK) for x in (q, k, v))
    exact_ids = jnp.zeros((B, H, 1, 1), jnp.int32)
    cot = jnp.asarray(np.random.default_rng(7).normal(size=(B, H, 1, BLOCK, D)), jnp.float32)

    def loss(kb_, vb_):
        return jnp.sum(cot * sparse_path(qb[:, :, 5:6], kb_, vb_, exact_ids))

    dk, dv = jax.grad(loss, argnums=(0, 1))(kb, vb)
    dk, dv = np.asarray(dk), np.asarray(dv)
    # blocks 1.. are approximated: each key gets dk̂/b (all equal), each value dV̂ (all equal)
    np.testing.assert_allclose(dk[:, :, 1:], np.broadcast_to(dk[:, :, 1:, :1], dk[:, :, 1:].shape), atol=1e-6)
    np.testing.assert_allclose(dv[:, :, 1:], np.broadcast_to(dv[:, :, 1:, :1], dv[:, :, 1:].shape), atol=1e-6)
    assert np.abs(dk[:, :, 0] - dk[:, :, 0, :1]).max() > 1e-4
    step = 1e-2
    bump = jnp.zeros_like(kb).at[0, 0, 3, :, 2].set(step)
    finite = (loss(kb + bump, vb) - loss(kb - bump, vb)) / (2 * step)
    np.testing.assert_allclose(finite, dk[0, 0, 3, :, 2].sum(), rtol=2e-2, atol=1e-4)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"block": 7}, "block"), ({"n_src": 12}, "n_src"), ({"n_src": 0}, "n_src"), ({"ctx_keep": 1.5}, "ctx_keep"),
    ({"full_frac": -0.1}, "full_frac"), ({"exact_frac": 0.0}, "exact_frac"), ({"k_heads": 1}, "k"),
    ({"gate": jnp.zeros((B, N + 1))}, "gate"),
])
def test_bad_input_names_the_argument(kwargs, name):
    q, k, v = _qkv()
    if kwargs.pop("k_heads", None):
        k = k[:, :, :1]
    n_src = kwargs.pop("n_src", N_SRC)
    with pytest.raises(ValueError, match=f"`{name}`"):
        isa_attention(q, k, v, n_src, **{"block": BLOCK, **kwargs})
