"""Parity, skipping and validation tests of kernels.block_sparse_attention.

Every path against the materialized reference, forward and all gradients (q, k, v) with random cotangents,
at density 1 (every causal block: also equal to an independent dense causal attention), density 0.5, random
shuffled lists with -1 slots, packed segment ids, GQA (H = 4 on Hkv = 2) and an odd length (T = 63 on
blocks of 8: a padded tail). Bound: the "default" float32 entry of tests/tolerances.py (1e-5 max-normalized:
the paths only reorder float32 sums). One jitted function per path is shared by the cases (same shapes).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from harness import assert_close, jit
from tolerances import tolerance

from icml26zoo.kernels.block_sparse_attention import api, lists, pallas, reference, xla

TOL = tolerance("default")
B, T, H, HKV, D, C = 2, 63, 4, 2, 16, 8
N = lists.num_blocks(T, C)


def _inputs(seed: int, length: int = T, batch: int = B, heads: int = H, kv_heads: int = HKV):
    rng = np.random.default_rng(seed)
    normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
    q, k, v = normal(batch, length, heads, D), normal(batch, length, kv_heads, D), normal(batch, length, kv_heads, D)
    return q, k, v, normal(batch, length, heads, D)


def _value_and_grads(fn, q, k, v, idx, seg, cotangent):
    out, pullback = jax.vjp(lambda q, k, v: fn(q, k, v, idx, segment_ids=seg), q, k, v)
    return (out, *pullback(cotangent))


@functools.cache
def _jitted(name: str):
    fn = {"reference": reference.block_sparse_attention, "xla": xla.block_sparse_attention}[name]
    return jit(functools.partial(_value_and_grads, functools.partial(fn, block_size=C)))


def _shuffled_with_padding(idx: jax.Array, seed: int) -> jax.Array:
    """The same lists with their slots shuffled (the -1 slots anywhere): the order must not matter."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.permuted(np.asarray(idx), axis=-1))


def _segments() -> jax.Array:
    """Two rows packed as 20 + 43 and 5 + 30 + 28 tokens; boundaries inside blocks."""
    rows = [np.repeat([0, 1], [20, 43]), np.repeat([3, 4, 5], [5, 30, 28])]
    return jnp.asarray(np.stack(rows), jnp.int32)


def _dense_causal(q, k, v):
    """Plain causal softmax attention, written independently of the op (GQA by repeating heads)."""
    kf, vf = (jnp.repeat(x, H // HKV, axis=2) for x in (k, v))
    s = jnp.einsum("bthd,bshd->bhts", q, kf, precision="highest") * D**-0.5
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, axis=-1), vf, precision="highest")


CASES = {
    "density1": lambda: (lists.causal_lists(B, H, T, C), None),
    "density0.5": lambda: (lists.random_lists(jax.random.key(1), B, H, T, C, 0.5), None),
    "random_shuffled": lambda: (_shuffled_with_padding(lists.random_lists(jax.random.key(2), B, H, T, C, 0.3), 3),
                                None),
    "packed": lambda: (lists.random_lists(jax.random.key(4), B, H, T, C, 0.6), _segments()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_xla_matches_reference_forward_and_gradients(case):
    idx, seg = CASES[case]()
    q, k, v, ct = _inputs(0)
    want = _jitted("reference")(q, k, v, idx, seg, ct)
    got = _jitted("xla")(q, k, v, idx, seg, ct)
    for name, g, w in zip(["o", "dq", "dk", "dv"], got, want, strict=True):
        assert_close(g, w, TOL, kind="fwd" if name == "o" else "grad", what=f"{case} {name}")
    if case == "density1":
        assert float(lists.density(idx)) == 1.0
        assert_close(want[0], _dense_causal(q, k, v), TOL, what="reference at density 1 vs dense causal")
        assert_close(api.block_sparse_attention(q, k, v, idx, block_size=C), want[0], TOL, what="api default")


def test_unlisted_blocks_are_never_read():
    """Keys and values of blocks no list holds can be anything (even NaN) without changing the output."""
    q, k, v, ct = _inputs(5)
    skip = jnp.arange(N) == 2  # key block 2 is listed only by its own query block
    idx = lists.from_mask(jnp.broadcast_to(~skip, (B, H, N, N)))
    unread = (jnp.arange(T) // C == 2)[None, :, None, None]
    clean = (jnp.arange(T) // C != 2)[None, :, None, None]
    # Query block 2 (rows 16..23) reads its own block; compare the other rows only.
    bad_k, bad_v = (jnp.where(unread, jnp.nan, x) for x in (k, v))
    got = _jitted("xla")(q, bad_k, bad_v, idx, None, ct)[0]
    want = _jitted("reference")(q, k, v, idx, None, ct)[0]
    assert_close(jnp.where(clean, got, 0.0), jnp.where(clean, want, 0.0), TOL, what="NaN in an unread block")


def test_permuted_keys_with_positions_equal_dense():
    """Keys/values shuffled along time with `key_positions` (every block listed) are dense causal attention."""
    q, k, v, _ = _inputs(7)
    perm = jnp.asarray(np.random.default_rng(8).permutation(T), jnp.int32)
    pos = jnp.broadcast_to(perm, (B, HKV, T))
    every = jnp.broadcast_to(jnp.arange(N, dtype=jnp.int32), (B, H, N, N))
    for impl in ("xla", "reference"):
        run = jit(functools.partial(api.block_sparse_attention, block_size=C, implementation=impl))
        out = run(q, k[:, perm], v[:, perm], every, key_positions=pos)
        assert_close(out, _dense_causal(q, k, v), TOL, what=f"{impl} permuted")


def test_a_bad_permuted_key_taints_from_its_position_not_its_slot():
    """Reversed keys (slot s holds position T − 1 − s): a NaN value in slot 9 (position 3) makes every output from
    position 3 on NaN and leaves positions 0..2 as in the clean run. T = 13 on blocks of 8, every block listed."""
    length, block = 13, 8
    q, k, v, _ = _inputs(12, length=length, batch=1, heads=2, kv_heads=1)
    perm = jnp.arange(length, dtype=jnp.int32)[::-1]
    pos = perm[None, None]
    n = lists.num_blocks(length, block)
    every = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (1, 2, n, n))
    bad_v = v[:, perm].at[:, 9].set(jnp.nan)
    for impl in ("xla", "reference"):
        run = jit(functools.partial(api.block_sparse_attention, block_size=block, implementation=impl))
        both = run(jnp.concatenate([q] * 2), jnp.concatenate([k[:, perm]] * 2), jnp.concatenate([v[:, perm], bad_v]),
                   jnp.concatenate([every] * 2), key_positions=jnp.concatenate([pos] * 2))
        nan = np.isnan(np.asarray(both[1])).any(axis=(1, 2))
        assert nan.tolist() == [False] * 3 + [True] * (length - 3), impl
        np.testing.assert_array_equal(both[1, :3], both[0, :3], err_msg=impl)


def test_separable_biases_and_narrow_values_match_reference():
    """query_bias a_t and key_bias b_s (logit scale·q·k + a_t + b_s), values narrower than keys (Dv = 5) and
    permuted keys with positions, on a density-0.5 list: XLA equals the reference in the output and in the
    gradients of q, k, v and both biases; and the biases change the output (they are not ignored)."""
    q, k, _, _ = _inputs(13)
    rng = np.random.default_rng(14)
    v, ct = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in ((B, T, HKV, 5), (B, T, H, 5)))
    qb, kb = (jnp.asarray(3.0 * rng.standard_normal((B, T, H)), jnp.float32) for _ in range(2))
    perm = jnp.asarray(rng.permutation(T), jnp.int32)
    pos = jnp.broadcast_to(perm, (B, HKV, T))
    # Permuted keys may list any slot block; every list holds its diagonal and the block of the slot holding
    # position 0, so that every query sees a key.
    blocks = jnp.arange(N)
    keep = (jax.random.bernoulli(jax.random.key(15), 0.5, (B, H, N, N)) | (blocks[:, None] == blocks)
            | (blocks == int(jnp.argmax(perm == 0)) // C))
    idx = lists.normalize(jnp.where(keep, blocks, -1))[0]

    def value_and_grads(fn):
        def run(q, k, v, qb, kb):
            return fn(q, k, v, idx, block_size=C, key_positions=pos, query_bias=qb, key_bias=kb)

        out, pullback = jax.vjp(run, q, k, v, qb, kb)
        return (out, *pullback(ct))

    got = jit(lambda: value_and_grads(xla.block_sparse_attention))()
    want = jit(lambda: value_and_grads(reference.block_sparse_attention))()
    for name, g, w in zip(["o", "dq", "dk", "dv", "dquery_bias", "dkey_bias"], got, want, strict=True):
        assert_close(g, w, TOL, kind="fwd" if name == "o" else "grad", what=f"xla {name}")
    unbiased = reference.block_sparse_attention(q, k, v, idx, block_size=C, key_positions=pos)
    assert float(jnp.max(jnp.abs(unbiased - want[0]))) > 1e-2
    # The query term is constant along each softmax row: it cancels, so its gradient is zero.
    assert float(jnp.max(jnp.abs(want[4]))) < 1e-4


def test_pallas_interpret_matches_reference():
    """The Pallas kernels (GPU-shaped, generic interpreter; the TPU-shaped kernels are checked by the lowering
    rows): T = 45 on blocks of 16 (padded tail), GQA, packed segments, a shuffled list; fwd and gradients."""
    length, block = 45, 16
    q, k, v, ct = _inputs(9, length=length, batch=1, heads=2, kv_heads=1)
    idx = _shuffled_with_padding(lists.random_lists(jax.random.key(10), 1, 2, length, block, 0.5), 11)
    seg = jnp.asarray(np.repeat([[0, 1, 2]], [10, 20, 15], axis=1), jnp.int32)

    def run(fn):
        return jit(functools.partial(_value_and_grads, functools.partial(fn, block_size=block)))

    want = run(reference.block_sparse_attention)(q, k, v, idx, seg, ct)
    got = run(pallas.block_sparse_attention)(q, k, v, idx, seg, ct)
    for name, g, w in zip(["o", "dq", "dk", "dv"], got, want, strict=True):
        assert_close(g, w, TOL, kind="fwd" if name == "o" else "grad", what=f"pallas {name}")


def _call(q, k, v, idx, **kw):
    return api.block_sparse_attention(q, k, v, idx, **{"block_size": C, **kw})


def test_bad_inputs_raise_naming_the_argument():
    q, k, v, _ = _inputs(12, batch=1)
    good = lists.causal_lists(1, H, T, C)
    late = good.at[0, 0, 2, 1].set(5)  # query block 2 listing key block 5: not causal
    no_diag = jnp.where(good == 3, -1, good).at[0, 0, 3].set(jnp.array([0, 1, 2, -1, -1, -1, -1, -1]))
    dup = good.at[0, 1, 4, 1].set(good[0, 1, 4, 0])
    cases = [
        (dict(idx=late), "not causal"),
        (dict(idx=no_diag), "lacks its diagonal"),
        (dict(idx=dup), "twice"),
        (dict(idx=good, block_size=16), "block_indices"),  # lists of blocks of 8 do not tile with 16
        (dict(idx=good[..., :0]), "block_indices"),
        (dict(idx=good.astype(jnp.float32)), "block_indices"),
        (dict(idx=good, block_size=0), "block_size"),
        (dict(idx=good, block_size=8.0), "block_size"),
        (dict(idx=good, k=k[:, :-1]), "`k`"),
        (dict(idx=good, v=v[:, :-1]), "`v`"),
        (dict(idx=good, v=v[..., :8], implementation="pallas"), "`v`"),  # Dv ≠ D: XLA and reference only
        (dict(idx=good, query_bias=jnp.zeros((1, T, HKV))), "query_bias"),
        (dict(idx=good, key_bias=jnp.zeros((1, T, H), jnp.int32)), "key_bias"),
        (dict(idx=good, key_bias=jnp.zeros((1, T, H)), implementation="pallas"), "key_bias"),
        (dict(idx=good, segment_ids=jnp.zeros((1, T - 1), jnp.int32)), "segment_ids"),
        (dict(idx=good, implementation="pallas"), "power of two"),
        (dict(idx=good, key_positions=jnp.zeros((1, HKV, T), jnp.int32),
              segment_ids=jnp.zeros((1, T), jnp.int32)), "key_positions"),
        (dict(idx=good, key_positions=jnp.zeros((1, H, T), jnp.int32)), "key_positions"),
    ]
    for kwargs, needle in cases:
        args = {"q": q, "k": k, "v": v, **kwargs}
        with pytest.raises(ValueError, match=needle):
            _call(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("idx"), **args)
