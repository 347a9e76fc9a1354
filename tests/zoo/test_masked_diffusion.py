"""Masked diffusion (MDLM) and PUMA's progressive unmasking: the loss against a readable reference, the random
forward process, the PUMA pool's invariants (the spec's list), the stateless trainer objectives, the
bidirectionality requirement, the mask-id convention and the confidence-ordered sampler."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.losses import masked_diffusion as md
from icml26zoo.losses import masked_sampler
from icml26zoo.losses import progressive_unmasking as pu
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.registry import OBJECTIVES

pytestmark = pytest.mark.usefixtures("fast_compile")

MASK = 9  # the tiny model's vocabulary is 10: data tokens 0..8, [MASK] = 9
B, T = 3, 8
# One compiled program per pool operation and shape (eager dispatch would compile every primitive).
_init_pool = jax.jit(pu.init_pool, static_argnames=("num_phases", "mask_token"))
_update_pool = jax.jit(pu.update_pool, static_argnames=("num_phases", "mask_token", "mode", "threshold"))
_random_masking = jax.jit(md.random_masking, static_argnames="mask_token")
_loss_sums = jax.jit(md.masked_loss_sums, static_argnames="mask_token")


def _config(mixer: str = "circulation", options=(("causal", False),)) -> ModelConfig:
    return ModelConfig(name="llama", mixer=mixer, mixer_options=options, vocab_size=MASK + 1, d_model=16,
                       num_layers=1, num_heads=2, num_kv_heads=1, max_seq_len=T)


@pytest.fixture(scope="module")
def model():
    return nnx.jit(lambda: build_model(_config(), rngs=nnx.Rngs(0)))()


@nnx.jit(static_argnames="name")
def _loss_and_grads(model, batch, key, name):
    return nnx.value_and_grad(lambda m: OBJECTIVES.get(name)(m, batch, key), has_aux=True)(model)


def _batch(x0: np.ndarray) -> dict:
    return {"inputs": jnp.asarray(x0), "targets": jnp.asarray(x0), "segment_ids": jnp.ones(x0.shape, jnp.int32),
            "positions": jnp.broadcast_to(jnp.arange(x0.shape[1]), x0.shape), "weights": jnp.ones(x0.shape)}


def _data(seed: int = 0, shape=(B, T)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, MASK, shape).astype(np.int32)


def _reference_loss(logits: np.ndarray, x0: np.ndarray, xt: np.ndarray, maskable: np.ndarray) -> float:
    """(1/rows) Σ_b (1/n_b) Σ_{masked i} −log softmax(logits_bi)[x0_bi], written out with loops."""
    total, rows = 0.0, 0
    for b in range(x0.shape[0]):
        masked = [i for i in range(x0.shape[1]) if maskable[b, i] and xt[b, i] == MASK]
        rows += bool(maskable[b].any())
        for i in masked:
            z = logits[b, i].astype(np.float64)
            total += (math.log(np.exp(z - z.max()).sum()) + z.max() - z[x0[b, i]]) / len(masked)
    return total / max(rows, 1)


def test_masked_loss_matches_the_reference_with_1_over_n_weights():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(B, T, MASK + 1)).astype(np.float32)
    x0 = _data(2)
    maskable = np.ones((B, T), bool)
    maskable[1, :3] = False  # a prompt
    xt = x0.copy()
    xt[0, [1, 4]] = MASK
    xt[1, [3, 5, 6, 7]] = MASK
    xt[1, 0] = MASK  # a prompt position holding the mask id is not a target
    # Row 2: nothing masked -> contributes 0 but counts as a row.
    sums = _loss_sums(jnp.asarray(logits), jnp.asarray(x0), jnp.asarray(xt), jnp.asarray(maskable), MASK)
    loss, _ = md.result(sums, jnp.asarray(False))
    np.testing.assert_allclose(float(loss), _reference_loss(logits, x0, xt, maskable), rtol=2e-6)
    assert float(sums.weight) == 3.0


def test_random_masking_draws_n_uniform_on_1_to_l_eff_over_maskable_positions():
    x0 = jnp.asarray(_data(3, (4000, 6)))
    maskable = jnp.ones(x0.shape, jnp.bool_).at[:, 0].set(False)  # L_eff = 5
    xt = _random_masking(jax.random.key(0), x0, maskable, MASK)
    masked = np.asarray(xt == MASK)
    assert not masked[:, 0].any() and np.array_equal(np.asarray(xt)[~masked], np.asarray(x0)[~masked])
    counts = np.bincount(masked.sum(1), minlength=6)
    assert counts[0] == 0
    np.testing.assert_allclose(counts[1:] / 4000, 0.2, atol=0.03)  # 5 sigma of a binomial(4000, 0.2) share


@pytest.mark.parametrize("ratio", [-0.1, 1.5, np.array([0.2, 1.01]), math.nan])
def test_masking_ratios_outside_the_unit_interval_raise(ratio):
    x0 = jnp.asarray(_data(0, (2, T)))
    with pytest.raises(ValueError, match="ratio must lie in"):
        md.mask_fraction(jax.random.key(0), x0, jnp.ones(x0.shape, jnp.bool_), ratio, MASK)
    with pytest.raises(ValueError, match="ratio must lie in"):
        pu.target_from_ratio(jnp.broadcast_to(jnp.asarray(ratio, jnp.float32), (2,)), jnp.array([8, 8]))


def test_mask_fraction_masks_round_ratio_times_l_eff():
    x0 = jnp.asarray(_data(0, (2, T)))
    xt = md.mask_fraction(jax.random.key(0), x0, jnp.ones(x0.shape, jnp.bool_), jnp.array([0.25, 1.0]), MASK)
    assert np.asarray(xt == MASK).sum(1).tolist() == [2, 8]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_phases": 0}, "num_phases must be an integer >= 1"), ({"num_phases": 2.0}, "num_phases"),
    ({"num_phases": 2, "mode": "greedy"}, "mode must be one of"),
    ({"num_phases": 2, "threshold": 1.2}, "threshold must lie in"),
])
def test_bad_puma_settings_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pu.check_settings(**kwargs)


def test_a_causal_model_is_rejected():
    # Abstract parameters suffice: the check reads the config before any array is touched.
    causal = nnx.eval_shape(lambda: build_model(_config("attention", ()), rngs=nnx.Rngs(0)))
    batch = _batch(_data())
    for objective in ("mdlm", "puma"):
        with pytest.raises(ValueError, match="needs a bidirectional model.*'attention'"):
            OBJECTIVES.get(objective)(causal, batch, jax.random.key(0))
    with pytest.raises(ValueError, match="bidirectional"):
        masked_sampler.sample(causal, batch["inputs"], jnp.ones((B, T), jnp.bool_), num_steps=2,
                              rng=jax.random.key(0))


def test_the_denoiser_is_bidirectional_and_position_aware(model):
    # All [MASK] but the last token, 3 in row 0 and 5 in row 1.
    tokens = jnp.full((2, T), MASK, jnp.int32).at[:, T - 1].set(jnp.array([3, 5]))
    logits = nnx.jit(md.denoiser_logits)(model, tokens, None, None)
    # Position 0's prediction changes with the token at the last position: it sees the future.
    assert float(jnp.max(jnp.abs(logits[0, 0, :MASK] - logits[1, 0, :MASK]))) > 1e-4
    # Two [MASK]s at different positions get different predictions (the sinusoidal positions).
    assert float(jnp.max(jnp.abs(logits[0, 0, :MASK] - logits[0, 1, :MASK]))) > 1e-4
    assert bool(jnp.all(logits[..., MASK] == -jnp.inf))  # [MASK] is never predicted


def test_sinusoidal_positions_closed_form():
    table = md.sinusoidal_positions(jnp.array([[0, 3]]), 6)
    frequencies = 10_000.0 ** (-np.arange(3) / 3)
    np.testing.assert_allclose(np.asarray(table[0, 1]), np.concatenate([np.sin(3 * frequencies),
                                                                         np.cos(3 * frequencies)]), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(table[0, 0]), [0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("objective", ["mdlm", "puma"])
def test_objectives_have_finite_loss_and_gradients(model, objective):
    batch = _batch(_data())
    (loss, metrics), grads = _loss_and_grads(model, batch, jax.random.key(1), objective)
    assert np.isfinite(float(loss)) and float(metrics["weight"]) == B
    np.testing.assert_allclose(float(loss), float(metrics["loss_sum"]) / B, rtol=1e-6)
    leaves = jax.tree.leaves(nnx.state(grads))
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in leaves) and any(float(jnp.abs(g).max()) > 0 for g in leaves)


def test_a_data_token_equal_to_the_mask_id_makes_the_loss_nan(model):
    x0 = _data()
    x0[0, 2] = MASK
    (loss, _), _ = _loss_and_grads(model, _batch(x0), jax.random.key(0), "mdlm")
    assert math.isnan(float(loss))


def _pool(num_phases: int, rows: int = 8, length: int = 10, prompt: int = 2, seed: int = 0) -> pu.Pool:
    x0 = jnp.asarray(_data(seed, (rows, length)))
    maskable = jnp.ones(x0.shape, jnp.bool_).at[:, :prompt].set(False)
    return _init_pool(jax.random.key(seed), x0, maskable, num_phases=num_phases, mask_token=MASK)


def _unmasked(pool: pu.Pool) -> np.ndarray:
    return np.asarray(pool.maskable & (pool.xt != MASK))


def _oracle_log_probs(rows: int, length: int) -> jax.Array:
    """Confidence decreasing with the position: the confidence order is left to right."""
    confidence = -jnp.arange(length, dtype=jnp.float32)
    return jnp.broadcast_to(jnp.stack([confidence, confidence - 5.0], -1)[None], (rows, length, 2))


def test_init_pool_spreads_phases_and_reveals_random_targets():
    pool = _pool(num_phases=3, rows=8)
    counts = np.bincount(np.asarray(pool.phase), minlength=3)
    assert counts.max() - counts.min() <= 1
    unmasked, l_eff = _unmasked(pool).sum(1), 8
    phase = np.asarray(pool.phase)
    assert np.all(unmasked >= np.round(phase / 3 * l_eff)) and np.all(unmasked <= np.round((phase + 1) / 3 * l_eff))
    assert np.all(unmasked < l_eff)
    assert np.array_equal(np.asarray(pool.xt)[~np.asarray(pool.xt == MASK)], np.asarray(pool.x0)[
        ~np.asarray(pool.xt == MASK)])


def test_update_pool_follows_the_confidence_order_and_keeps_the_invariants():
    num_phases, rows, length = 4, 8, 10
    pool = _pool(num_phases, rows, length)
    fresh = jnp.asarray(_data(9, (rows, length)))
    fresh_maskable = jnp.ones(fresh.shape, jnp.bool_).at[:, :2].set(False)
    before = _unmasked(pool)
    new, replace, used = _update_pool(jax.random.key(3), pool, _oracle_log_probs(rows, length), fresh,
                                        fresh_maskable, num_phases=num_phases, mask_token=MASK)
    replace, after = np.asarray(replace), _unmasked(new)
    assert int(used) == replace.sum() == np.sum(np.asarray(pool.phase) == num_phases - 1)
    kept = ~replace
    # Prompt never masked; revealed values equal x0; the unmasked set only grows.
    assert not np.asarray(new.xt == MASK)[:, :2].any()
    assert np.array_equal(np.asarray(new.xt)[after], np.asarray(new.x0)[after])
    assert np.all(after[kept] >= before[kept])
    # Counts reach phase j+1's range and one token stays masked.
    phase, l_eff = np.asarray(new.phase)[kept], 8
    count = after[kept].sum(1)
    assert np.array_equal(phase, np.asarray(pool.phase)[kept] + 1)
    assert np.all(count >= np.round(phase / num_phases * l_eff)) and np.all(count < l_eff)
    # Oracle order: the newly revealed positions are the leftmost masked ones.
    for row in np.flatnonzero(kept):
        masked_before = np.flatnonzero(~before[row] & np.asarray(pool.maskable[row]))
        newly = np.flatnonzero(after[row] & ~before[row])
        assert np.array_equal(newly, masked_before[: len(newly)])
    # Replaced slots take the fresh rows in order, at phase 0.
    slots = np.flatnonzero(replace)
    assert np.array_equal(np.asarray(new.x0)[slots], np.asarray(fresh)[: len(slots)])
    assert np.all(np.asarray(new.phase)[slots] == 0)


def test_confidence_collapse_can_unmask_a_row_fully_and_its_loss_weight_is_zero():
    pool = _pool(num_phases=4, rows=8, length=10)
    pool = pool._replace(phase=jnp.zeros(8, jnp.int32))
    log_probs = jnp.zeros((8, 10, 2)).at[0].set(jnp.log(jnp.array([0.95, 0.05])))  # row 0 all confident
    log_probs = log_probs.at[1:].set(jnp.log(jnp.array([0.5, 0.5])))
    new, _, _ = _update_pool(jax.random.key(0), pool, log_probs, pool.x0, pool.maskable, num_phases=4,
                             mask_token=MASK, mode="confidence_collapse", threshold=0.9)
    assert not np.asarray(new.xt[0] == MASK).any() and int(new.phase[0]) == 3
    # The phase follows the actual unmasked ratio (l_eff = 8): bucketised by the interval bounds.
    ratio = _unmasked(new).sum(1) / 8
    assert np.array_equal(np.asarray(new.phase), np.minimum(np.floor(ratio * 4), 3))
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(8, 10, MASK + 1)), jnp.float32)
    sums = _loss_sums(logits, new.x0, new.xt, new.maskable, MASK)
    # Row 0 adds 0 to the loss but still counts as a row (the reference's clamp of n to 1).
    others = 7 * _reference_loss(np.asarray(logits)[1:], np.asarray(new.x0)[1:], np.asarray(new.xt)[1:],
                                 np.asarray(new.maskable)[1:])
    np.testing.assert_allclose(float(sums.loss_sum), others, rtol=1e-5)
    assert float(sums.weight) == 8.0


def test_one_phase_reduces_to_random_masking():
    rows, length = 4000, 6
    x0 = jnp.asarray(_data(3, (rows, length)))
    maskable = jnp.ones(x0.shape, jnp.bool_)
    pool = _init_pool(jax.random.key(5), x0, maskable, num_phases=1, mask_token=MASK)
    _, replace, _ = _update_pool(jax.random.key(6), pool, jnp.zeros((rows, length, 2)), x0, maskable,
                                   num_phases=1, mask_token=MASK)
    assert bool(jnp.all(replace))
    puma = np.bincount(np.asarray(pool.xt == MASK).sum(1), minlength=length + 1) / rows
    # Revealed u = min(round(6r), 5), r ~ U[0, 1): u = 0 w.p. 1/12, 1..4 w.p. 1/6, 5 w.p. 1/6 + 1/12; n = 6 - u.
    expected = np.array([0, 3, 2, 2, 2, 2, 1]) / 12
    np.testing.assert_allclose(puma, expected, atol=0.03)
    baseline = np.bincount(np.asarray(_random_masking(jax.random.key(7), x0, maskable, MASK) == MASK).sum(1),
                           minlength=length + 1) / rows
    np.testing.assert_allclose(baseline[2:6], puma[2:6], atol=0.04)  # equal away from the rounded ends


def test_sampler_fills_every_mask_and_keeps_the_prompt(model):
    x0 = jnp.asarray(_data(5))
    prompt_mask = jnp.asarray(np.random.default_rng(0).random((B, T)) < 0.4)
    for temperature in (0.0, 1.0):
        out = masked_sampler.sample(model, x0, prompt_mask, num_steps=2, rng=jax.random.key(0),
                                    temperature=temperature)
        assert not bool(jnp.any(out == MASK)) and bool(jnp.all(jnp.where(prompt_mask, out == x0, True)))
        assert bool(jnp.all((out >= 0) & (out < MASK)))


def test_unmask_schedule_reveals_everything_in_num_steps():
    masked, total = jnp.array([0, 1, 7, 8]), jnp.zeros(4, jnp.int32)
    remaining = masked
    for step in range(3):
        reveal = masked_sampler.unmask_schedule(remaining, jnp.asarray(step), 3)
        total, remaining = total + reveal, remaining - reveal
    assert total.tolist() == [0, 1, 7, 8]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_steps": 0}, "num_steps must be an integer >= 1"), ({"num_steps": T + 1}, "num_steps must be at most"),
    ({"num_steps": 2, "temperature": -1.0}, "temperature"),
    ({"num_steps": 2, "prompt": np.full((B, T), MASK)}, "prompt tokens must lie in"),
])
def test_sampler_bad_input_raises(model, kwargs, match):
    prompt = jnp.asarray(kwargs.pop("prompt", _data()))
    with pytest.raises(ValueError, match=match):
        masked_sampler.sample(model, prompt, jnp.ones((B, T), jnp.bool_), rng=jax.random.key(0), **kwargs)
