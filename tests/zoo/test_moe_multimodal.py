"""ConfSMoE's multimodal classifier: two-stage imputation invariants (ConfSMoE, ICML 2026), stage-1 pool, bad
masks, the synthetic task's missingness settings, the feature-batch layout, and the registered model "confsmoe".
The short training run at 50% missingness (through the shared trainer): tests/train/test_moe_multimodal_train.py."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.models import ModelConfig, build_model
from icml26zoo.moe.layer import MoEConfig
from icml26zoo.moe.multimodal import (
    ConfSMoEClassifier,
    ConfSMoEConfig,
    expert_imputation,
    fill_from_batch,
    moe_with_slot_outputs,
    unpack_points,
    zero_missing,
)
from icml26zoo.moe.multimodal_data import (
    MultimodalData,
    MultimodalSplit,
    MultimodalTaskConfig,
    fill_missing,
    fill_split,
    make_multimodal_data,
    pack_points,
    random_missing_mask,
    training_pool,
)

# Compile time dominates these tiny models; the cheap pipeline also runs no fusion, so the plain and the
# imputing program do the same float operations on complete samples and compare exactly.
pytestmark = pytest.mark.usefixtures("fast_compile")

FEATURES = (3, 5, 4)
CONFIG = ConfSMoEConfig(feature_dims=FEATURES, tokens=8, dim=16, num_classes=3, num_layers=2, num_heads=2,
                        moe=MoEConfig(num_experts=4, top_k=2, router="confidence", load_balance_weight=0.0,
                                      z_loss_weight=0.0, implementation="reference"))
# Rows: complete; modality 0 missing; modalities 0 and 1 missing; modality 2 missing.
PRESENT = jnp.array([[1, 1, 1], [0, 1, 1], [0, 0, 1], [1, 1, 0]], bool)


@pytest.fixture(scope="module")
def model():
    return ConfSMoEClassifier(CONFIG, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def inputs():
    keys = jax.random.split(jax.random.key(1), len(FEATURES))
    return tuple(jax.random.normal(k, (PRESENT.shape[0], 8, f)) for k, f in zip(keys, FEATURES, strict=True))


@pytest.fixture(scope="module")
def outputs(model, inputs):
    run = nnx.jit(lambda m, x, p, impute: m(x, p, impute=impute), static_argnums=3)
    return {(name, impute): run(model, inputs, present, impute)
            for name, present in (("all", jnp.ones_like(PRESENT)), ("mixed", PRESENT)) for impute in (True, False)}


def test_all_modalities_present_imputation_changes_nothing(outputs):
    imputed, _ = outputs[("all", True)]
    plain, _ = outputs[("all", False)]
    # Two compiled programs: XLA may fuse the (selected-away) imputation branch differently, so the outputs agree
    # to float32 rounding (CI's CPU differed by 1 ulp), not bit for bit.
    np.testing.assert_allclose(np.asarray(imputed), np.asarray(plain), rtol=1e-6, atol=1e-6)
    # In a mixed batch the complete sample (row 0) is untouched; the others are imputed.
    mixed, _ = outputs[("mixed", True)]
    mixed_plain, _ = outputs[("mixed", False)]
    np.testing.assert_allclose(np.asarray(mixed[0]), np.asarray(mixed_plain[0]), rtol=1e-6, atol=1e-6)
    assert np.all(np.abs(np.asarray(mixed[1:] - mixed_plain[1:])).max(axis=-1) > 1e-6)


def test_imputation_keeps_k_prime_weights_and_none_on_missing_modalities(outputs):
    weights = np.asarray(outputs[("mixed", True)][1][0]["imputation_weights"])  # [B, M, S, (M-1)S, k]
    kept = (len(FEATURES) - 1) * 8 // 4
    for b, m in zip(*np.nonzero(~np.asarray(PRESENT)), strict=True):
        others = [i for i in range(len(FEATURES)) if i != m]
        w = weights[b, m].reshape(8, len(others), 8, -1)  # [S, other modality, S, k]
        assert np.all(np.count_nonzero(w.reshape(8, -1, w.shape[-1]), axis=1) == kept)
        for position, other in enumerate(others):
            if not PRESENT[b, other]:
                assert np.all(w[:, position] == 0.0), (b, m, other)
        assert np.all((w > 0).sum(axis=(1, 2)) == kept) and np.all(w <= 1.0)


def reference_imputation(q, k, v, present, kept):
    """Readable numpy loop: for each missing (b, m), token s, slot j: softmax over present other tokens."""
    batch, modalities, tokens, slots, width = v.shape
    out = np.zeros(q.shape)
    for b in range(batch):
        for m in range(modalities):
            others = [i for i in range(modalities) if i != m and present[b, i]]
            if not others:
                continue
            keys = np.concatenate([k[b, i] for i in others])  # [T, k, d]
            values = np.concatenate([v[b, i] for i in others])
            for s in range(tokens):
                for j in range(slots):
                    logits = keys[:, j] @ q[b, m, s] / math.sqrt(width)
                    p = np.exp(logits - logits.max())
                    p /= p.sum()
                    p[np.argsort(-p)[kept:]] = 0.0
                    out[b, m, s] += p @ values[:, j]
    return out


def test_expert_imputation_matches_reference():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(4, 3, 8, 6))
    k, v = rng.normal(size=(2, 4, 3, 8, 2, 6))
    imputed, _ = expert_imputation(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), PRESENT, 4)
    np.testing.assert_allclose(np.asarray(imputed), reference_imputation(q, k, v, np.asarray(PRESENT), 4),
                               rtol=1e-5, atol=1e-5)


def test_slot_outputs_path_matches_the_layer(model):
    moe = model.layers[0].moe
    x = jax.random.normal(jax.random.key(3), (12, CONFIG.dim))
    mask = jnp.arange(12) % 5 != 0
    y, slots, aux = nnx.jit(lambda layer, x, mask: moe_with_slot_outputs(layer, x, mask, None))(moe, x, mask)
    expected, expected_aux = nnx.jit(lambda layer, x, mask: layer(x, mask=mask))(moe, x, mask)
    np.testing.assert_allclose(np.asarray(y), np.asarray(expected), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(aux["confidence"]), np.asarray(expected_aux["confidence"]), rtol=1e-6)
    assert slots.shape == (12, 2, CONFIG.dim) and np.all(np.asarray(slots)[~np.asarray(mask)] == 0.0)


def test_bad_mask_shapes_raise(model, inputs):
    for present in (PRESENT[:, :2], PRESENT[:3], PRESENT[None]):
        with pytest.raises(ValueError, match="present .*shape \\[B, M\\]"):
            model(inputs, present)
    with pytest.raises(ValueError, match="inputs must hold 3"):
        model(inputs[:2], PRESENT)


def _split(inputs, present):
    return MultimodalSplit(tuple(np.asarray(x, np.float32) for x in inputs), np.asarray(present, bool),
                           np.zeros(len(present), np.int32))


def test_stage_one_pool_uses_only_present_training_examples():
    train_present = np.array([[1, 1], [0, 1], [1, 0], [1, 1]], bool)
    # Present training rows are 1, absent training rows -50, every test row 100: a fill of exactly 1
    # proves the pool draws only present training inputs.
    train = [np.where(train_present[:, m, None, None], 1.0, -50.0) * np.ones((4, 8, f)) for m, f in
             enumerate((3, 2))]
    test = [100.0 * np.ones((5, 8, f)) for f in (3, 2)]
    test_present = np.array([[0, 1], [1, 0], [0, 1], [1, 1], [1, 0]], bool)
    data = MultimodalData(_split(train, train_present), _split(test, test_present), MultimodalTaskConfig())
    pool = training_pool(data)
    assert [r.shape[0] for r in pool.rows] == [3, 3] and all(np.all(np.asarray(r) == 1.0) for r in pool.rows)
    filled = fill_missing(tuple(test), test_present, pool, np.random.default_rng(0), 10)
    for m, x in enumerate(filled):
        expected = np.where(test_present[:, m, None, None], 100.0, 1.0)
        np.testing.assert_array_equal(np.asarray(x), np.broadcast_to(expected, x.shape))
    with pytest.raises(ValueError, match="present .*shape \\[B, M\\] = \\(5, 2\\), got \\(5, 3\\)"):
        fill_missing(tuple(test), np.ones((5, 3), bool), pool, np.random.default_rng(0), 10)


# The three experiment settings at small scale (spec "Typical small-scale settings"): I modality-specific
# availability, II random 50% missingness in training and test, III random 50% in training, modality 0 absent
# at test; 3 modalities.
SETTINGS = {
    "setting_I": MultimodalTaskConfig(feature_dims=(6, 10, 4), signal=(1.0,) * 3, setting="I",
                                      modality_missing_rates=(0.2, 0.4, 0.6)),
    "setting_II": MultimodalTaskConfig(feature_dims=(6, 10, 4), signal=(1.0,) * 3, setting="II", missing_ratio=0.5,
                                       modality_missing_rates=(0.3,) * 3),
    "setting_III": MultimodalTaskConfig(feature_dims=(6, 10, 4), signal=(1.0,) * 3, setting="III",
                                        missing_ratio=0.5, modality_missing_rates=(0.3,) * 3, dropped_modality=0),
}


def test_missingness_settings():
    mask = random_missing_mask(200, 3, 0.5, np.random.default_rng(0))
    assert mask.any(axis=1).all() and (~mask).sum() == 300
    for name, task in SETTINGS.items():
        data = make_multimodal_data(dataclasses.replace(task, train_size=64, test_size=32))
        assert data.train.present.any(axis=1).all() and data.test.present.any(axis=1).all(), name
        assert all(np.all(x[~data.test.present[:, m]] == 0.0) for m, x in enumerate(data.test.inputs))
    test_present = make_multimodal_data(dataclasses.replace(SETTINGS["setting_III"], test_size=32)).test.present
    assert not test_present[:, 0].any() and test_present[:, 1:].all()
    with pytest.raises(ValueError, match="missing_ratio"):
        MultimodalTaskConfig(missing_ratio=1.5)
    with pytest.raises(ValueError, match="dropped_modality"):
        MultimodalTaskConfig(setting="III", dropped_modality=2)


def test_stage_one_during_training_draws_from_the_batchs_rows_with_the_modality():
    present = jnp.array([[1, 1], [0, 1], [1, 0], [1, 1], [0, 0]], bool)
    # Rows with the modality hold 1, rows without it -50: a fill of exactly 1 proves it drew only the former.
    inputs = tuple(jnp.where(present[:, m, None, None], 1.0, -50.0) * jnp.ones((5, 4, f)) for m, f in enumerate((3, 2)))
    to_fill = jnp.array([[0, 0], [1, 0], [0, 1], [0, 0], [1, 0]], bool)
    filled = fill_from_batch(inputs, present, to_fill, jax.random.key(0), 10)
    for m, x in enumerate(filled):
        expected = jnp.where(to_fill[:, m, None, None], 1.0, inputs[m])
        np.testing.assert_array_equal(np.asarray(x), np.broadcast_to(np.asarray(expected), x.shape))
    # Fresh keys draw other fills; a modality no row has is left as it is.
    values = jnp.arange(5.0)[:, None, None] * jnp.ones((5, 4, 3))
    draws = [fill_from_batch((values,), jnp.array([[1], [1], [1], [1], [0]], bool), jnp.array([[0], [0], [0], [0], [1]],
                                                                                             bool), key, 2)[0][4, 0, 0]
             for key in jax.random.split(jax.random.key(1), 8)]
    assert len(set(np.asarray(draws).tolist())) > 1 and all(0.0 <= d <= 3.0 for d in draws)
    nobody = fill_from_batch((values,), jnp.zeros((5, 1), bool), jnp.ones((5, 1), bool), jax.random.key(0), 3)[0]
    np.testing.assert_array_equal(np.asarray(nobody), np.asarray(values))


def test_feature_layout_round_trips_and_the_registered_model_equals_the_classifier(model, inputs):
    data = make_multimodal_data(MultimodalTaskConfig(feature_dims=FEATURES, signal=(1.0,) * 3, tokens=8,
                                                     modality_missing_rates=(0.3,) * 3, train_size=16, test_size=4))
    filled = fill_split(data, "test", pool_size=3)
    # Stage 1 changes only the missing entries; the present ones are the generator's.
    for m, (x, raw) in enumerate(zip(filled.inputs, data.test.inputs, strict=True)):
        np.testing.assert_array_equal(x[data.test.present[:, m]], raw[data.test.present[:, m]])
        assert np.all(np.abs(x[~data.test.present[:, m]]).sum(axis=(1, 2)) > 0)
    points, features, weights = pack_points(filled)
    assert points.shape == (4, 3 * 8, max(FEATURES)) and weights.shape == (4, 3 * 8)
    assert features.shape == (4, 3 * 8, 1) and not features.any()
    padded = [np.pad(a, ((0, 0), (0, 5)) + ((0, 0),) * (a.ndim - 2)) for a in (points, features, weights)]
    unpacked, present, to_fill = unpack_points(*map(jnp.asarray, padded), FEATURES, 8)
    for got, want in zip(unpacked, filled.inputs, strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(present), data.test.present)
    assert not np.asarray(to_fill).any()
    raw = pack_points(data.train, to_fill=True)
    _, present, to_fill = unpack_points(*map(jnp.asarray, raw), FEATURES, 8)
    np.testing.assert_array_equal(np.asarray(to_fill), ~data.train.present)

    cfg = ModelConfig(name="confsmoe", d_model=CONFIG.dim, num_layers=CONFIG.num_layers, num_heads=CONFIG.num_heads,
                      num_kv_heads=CONFIG.num_heads, moe=CONFIG.moe,
                      model_options=(("feature_dims", FEATURES), ("tokens", 8), ("num_classes", 3)))
    registered = build_model(cfg, rngs=nnx.Rngs(0))
    assert registered.classifier.config == CONFIG
    nnx.update(registered.classifier, nnx.state(model))
    points, features, weights = pack_points(MultimodalSplit(tuple(np.asarray(x) for x in inputs), np.asarray(PRESENT),
                                                            np.zeros(4, np.int32)))
    logits = registered(jnp.asarray(points), jnp.asarray(features), jnp.asarray(weights))
    np.testing.assert_allclose(np.asarray(logits), np.asarray(model(inputs, PRESENT)[0]), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="model.model_options: confsmoe option 'feature_dims' must name at least 2"):
        build_model(dataclasses.replace(cfg, model_options=(("feature_dims", (3,)),)), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="model.moe must be a MoEConfig for model 'confsmoe'"):
        build_model(dataclasses.replace(cfg, moe=None), rngs=nnx.Rngs(0))


def test_zero_missing_zeroes_exactly_the_missing_modalities(inputs):
    zeroed = zero_missing(inputs, PRESENT)
    for m, (before, after) in enumerate(zip(inputs, zeroed, strict=True)):
        for row, present in enumerate(np.asarray(PRESENT[:, m])):
            np.testing.assert_array_equal(after[row], before[row] if present else np.zeros_like(before[row]))
