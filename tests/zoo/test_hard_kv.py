"""HARD-KV (zoo/longctx/hard_kv*.py, arXiv 2606.28831): the full-budget reduction to full attention, the
per-head top-p selection against a NumPy reference on a planted-retrieval cache, calibration properties,
memory accounting and bad input."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.longctx.hard_kv import HardKVConfig, attend, compress_layer, init_layer_cache
from icml26zoo.longctx.hard_kv_calibrate import HeadScores, calibrate_head_scores, solve_temperature
from icml26zoo.longctx.hard_kv_model import HardKVLM, cache_bytes, hard_kv_decode, memory_per_token
from icml26zoo.models.config import ModelConfig
from icml26zoo.models.lm import DecoderLM

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = ModelConfig(vocab_size=64, d_model=16, num_layers=1, num_heads=4, num_kv_heads=2, max_seq_len=32)
# Planted-retrieval layer cache: 2 KV heads (group 2), 20 of 24 rows filled, a 4-query window.
ROWS, FILLED, DIM, WINDOW, PLANTED = 24, 20, 8, 4, 5
SELECT = HardKVConfig(budget=0.5, top_p=0.9, window=WINDOW, recent=3, sink=1, interval=8, pool_kernel=3)


@pytest.fixture(scope="module")
def model() -> DecoderLM:
    return DecoderLM(CFG, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def scores(model: DecoderLM) -> HeadScores:
    tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, CFG.vocab_size)
    return calibrate_head_scores(model, tokens, top_p=0.9)


def test_full_budget_decodes_exactly_like_full_attention(model: DecoderLM, scores: HeadScores) -> None:
    """budget = 1: the compressed cache holds max_len rows and never compresses, so a chunked prefill plus a
    decode step equal the model's full forward (the whole path: RoPE at true positions, GQA, append, masks)."""
    lm = HardKVLM(model, scores, HardKVConfig(budget=1.0, top_p=0.5, window=4, recent=2, interval=5))
    tokens = jax.random.randint(jax.random.key(2), (2, 11), 0, CFG.vocab_size)
    cache = lm.init_cache(2, 12)
    prefill, cache = hard_kv_decode(lm, tokens[:, :10], cache)
    step, cache = hard_kv_decode(lm, tokens[:, 10:], cache)
    full = model(tokens)
    np.testing.assert_allclose(np.asarray(prefill), np.asarray(full[:, :10]), atol=2e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(step[:, 0]), np.asarray(full[:, 10]), atol=2e-5, rtol=0)
    assert int(cache.index) == 11 and cache.layers[0]["valid"].sum() == 2 * 2 * 11


def planted_cache() -> tuple[dict, np.ndarray]:
    """KV head 0: its window queries point at the key of row PLANTED (a peaked head); KV head 1: near-zero
    queries (a flat head). Returns the layer cache and the planted direction [DIM]."""
    rng = np.random.default_rng(0)
    direction = rng.normal(size=DIM)
    direction /= np.linalg.norm(direction)
    keys = 0.5 * rng.normal(size=(1, 2, ROWS, DIM))
    keys[0, 0, PLANTED] = 4.0 * direction
    queries = 0.01 * rng.normal(size=(1, 4, WINDOW, DIM))
    queries[0, :2] = 8.0 * direction + 0.1 * rng.normal(size=(2, WINDOW, DIM))
    cache = init_layer_cache(1, 4, 2, DIM, ROWS, WINDOW, jnp.array([0.7, 1.3]), jnp.float32)
    filled = np.arange(ROWS) < FILLED
    return {
        **cache,
        "k": jnp.asarray(np.where(filled[:, None], keys, 0.0), jnp.float32),
        "v": jnp.asarray(rng.normal(size=(1, 2, ROWS, DIM)) * filled[:, None], jnp.float32),
        "valid": jnp.asarray(np.broadcast_to(filled, (1, 2, ROWS))),
        "pos": jnp.asarray(np.broadcast_to(np.where(filled, np.arange(ROWS), -1), (1, 2, ROWS)), jnp.int32),
        "n_rows": jnp.array([FILLED], jnp.int32),
        "qwin": jnp.asarray(queries, jnp.float32),
        "qpos": jnp.arange(FILLED - WINDOW, FILLED, dtype=jnp.int32)[None],
    }, direction


def reference_selection(cache: dict, config: HardKVConfig) -> list[set[int]]:
    """Per KV head, the kept positions computed in plain NumPy: window logits max-pooled
    over the group, SnapKV pooling, softmax(φ / T), nucleus per window query, union, forced rows, cap."""
    k, q = np.asarray(cache["k"][0], np.float64), np.asarray(cache["qwin"][0], np.float64)
    temperature, half = np.asarray(cache["temperature"]), config.pool_kernel // 2
    kept = []
    for head in range(2):
        z = (q[2 * head:2 * head + 2] @ k[head].T / np.sqrt(DIM)).max(axis=0)[:, :FILLED]  # [W, FILLED]
        z = np.where(np.arange(FILLED)[None] <= np.arange(FILLED - WINDOW, FILLED)[:, None], z, -np.inf)
        chosen = {0, *range(FILLED - config.recent, FILLED)}
        for row in z:
            phi = np.array([row[max(0, r - half):r + half + 1].max() for r in range(FILLED)])
            phi = np.where(np.isfinite(row), phi, -np.inf) / temperature[head]
            probs = np.exp(phi - phi.max()) / np.exp(phi - phi.max()).sum()
            order = np.argsort(-probs, kind="stable")
            mass = np.cumsum(probs[order]) - probs[order]
            chosen |= {int(r) for r in order[(mass < config.top_p) & (probs[order] > 0)]}
        kept.append(chosen)
    return kept


def test_budget_below_one_keeps_the_expected_entries_and_retrieves_the_planted_key() -> None:
    cache, direction = planted_cache()
    new = jax.jit(functools.partial(compress_layer, config=SELECT))(cache)
    cap = ROWS - SELECT.interval
    for head, selected in enumerate(reference_selection(cache, SELECT)):
        count = int(new["valid"][0, head].sum())
        assert count == min(len(selected), cap), (head, count, sorted(selected))
        kept = {int(p) for p in new["pos"][0, head, :count]}
        forced = {0, *range(FILLED - SELECT.recent, FILLED)}
        assert forced <= kept <= selected
        assert not bool(new["valid"][0, head, count:].any())
        original = np.asarray(new["pos"][0, head, :count])
        assert np.all(np.diff(original) > 0), original
        np.testing.assert_array_equal(np.asarray(new["k"][0, head, :count]), np.asarray(cache["k"][0, head, original]))
        np.testing.assert_array_equal(np.asarray(new["v"][0, head, :count]), np.asarray(cache["v"][0, head, original]))
    peaked, flat = (int(new["valid"][0, h].sum()) for h in range(2))
    assert PLANTED in {int(p) for p in new["pos"][0, 0, :peaked]}
    assert peaked < flat == cap and int(new["n_rows"][0]) == cap
    query = jnp.broadcast_to(jnp.asarray(8.0 * direction, jnp.float32), (1, 1, 4, DIM))
    position = jnp.array([[FILLED - 1]], jnp.int32)
    exact, compressed = attend(cache, query, position), attend(new, query, position)
    assert float(jnp.abs(exact[0, 0, :2] - compressed[0, 0, :2]).max()) < 5e-3
    # The no-op limit: p = 1 with room for every row keeps every row, in place, and changes no output.
    keep_all = HardKVConfig(budget=0.5, top_p=1.0, window=WINDOW, recent=3, interval=ROWS - FILLED, pool_kernel=3)
    same = jax.jit(functools.partial(compress_layer, config=keep_all))(cache)
    for name in ("k", "v", "valid", "pos"):
        np.testing.assert_array_equal(np.asarray(same[name]), np.asarray(cache[name]))


def test_calibration_solves_the_mass_target_and_is_scale_equivariant(scores: HeadScores) -> None:
    """Calibration: with φ = the raw logits, T* >= 1 (top-n* mass at T = 1 is already >= p), and cφ gives cT*."""
    assert scores.temperature.shape == (1, 2) and np.all(scores.temperature > 0)
    assert np.all((scores.oracle_fraction > 0) & (scores.oracle_fraction <= 1))
    rng = np.random.default_rng(3)
    z = jnp.asarray(rng.normal(size=(2, 6, 12)) * np.array([[[3.0]], [[0.5]]]), jnp.float32)
    visible = jnp.ones(z.shape, jnp.bool_)
    probs = np.asarray(jax.nn.softmax(z, axis=-1))
    n_star = jnp.asarray([[int(np.searchsorted(np.cumsum(np.sort(r)[::-1]), 0.8)) + 1 for r in h] for h in probs])
    identity = np.asarray(solve_temperature(z, visible, n_star, jnp.float32(0.8)))
    scaled = np.asarray(solve_temperature(2.5 * z, visible, n_star, jnp.float32(0.8)))
    assert np.all(identity >= 1 - 1e-4) and np.all(identity < 3), identity
    np.testing.assert_allclose(scaled, 2.5 * identity, rtol=1e-4)


def test_memory_per_token_counts_every_cache_array(model: DecoderLM, scores: HeadScores) -> None:
    lm = HardKVLM(model, scores, HardKVConfig(budget=0.25, top_p=0.9, window=4, recent=2, interval=4))
    batch, max_len, dim = 2, 32, CFG.resolved_head_dim
    rows = 8
    expected = batch * (2 * 2 * rows * dim * 4 + 2 * rows * (1 + 4) + 4 + 4 * 4 * dim * 4 + 4 * 4) + 2 * 4 + 4
    assert cache_bytes(jax.eval_shape(lambda: lm.init_cache(batch, max_len))) == expected
    full = batch * 2 * max_len * 2 * dim * 4 + 4 + 4
    report = memory_per_token(model, lm, batch, max_len)
    assert report["full_bytes_per_token"] == full / (batch * max_len)
    assert report["compressed_bytes_per_token"] == expected / (batch * max_len)
    assert report["ratio"] == pytest.approx(expected / full)


def test_bad_input_raises_value_errors(model: DecoderLM, scores: HeadScores) -> None:
    for budget in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="budget"):
            HardKVConfig(budget=budget)
    with pytest.raises(ValueError, match="top_p"):
        HardKVConfig(top_p=0.0)
    with pytest.raises(ValueError, match="budget = 0.1"):
        HardKVLM(model, scores, HardKVConfig(budget=0.1)).init_cache(1, 32)
    for bad in (np.ones((2, 2)), -np.ones((1, 2)), np.full((1, 2), np.nan)):
        with pytest.raises(ValueError, match="temperature"):
            HardKVLM(model, HeadScores(bad, scores.oracle_fraction), HardKVConfig())
    lm = HardKVLM(model, scores, HardKVConfig(budget=0.5, window=4, recent=2, interval=4))
    cache = lm.init_cache(1, 16)
    wrong = cache.replace(layers=({**cache.layers[0], "k": cache.layers[0]["k"][:, :, :-1]},))
    with pytest.raises(ValueError, match="shape"):
        hard_kv_decode(lm, jnp.zeros((1, 2), jnp.int32), wrong)
    with pytest.raises(ValueError, match="HardKVCache"):
        lm.decode(jnp.zeros((1, 2), jnp.int32), model.init_cache(1, 16))
