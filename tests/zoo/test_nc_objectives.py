"""The registered nc_* objectives: the features they read, the losses they reduce, the prototypes they use."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.losses import nc_objectives as nco
from icml26zoo.losses import neural_collapse as nc
from icml26zoo.losses.objectives import pooled_logits
from icml26zoo.models import build_model
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import OBJECTIVES

pytestmark = pytest.mark.usefixtures("fast_compile")

K, B, T = 4, 6, 8


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(name="llama", mixer="attention", vocab_size=16, d_model=16, num_layers=1, num_heads=2,
                      num_kv_heads=1, max_seq_len=T, tie_embeddings=False)
    return build_model(cfg, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    segment_ids = np.ones((B, T), np.int32)
    segment_ids[-1] = 0  # A padding row.
    segment_ids[0, 5:] = 0  # A shorter row.
    return {"inputs": jnp.asarray(rng.integers(K, 16, (B, T)), jnp.int32), "segment_ids": jnp.asarray(segment_ids),
            "positions": jnp.asarray(np.broadcast_to(np.arange(T), (B, T)), jnp.int32),
            "labels": jnp.asarray([0, 1, 2, 3, 1, 2], jnp.int32)}


@pytest.fixture(scope="module")
def outputs(model, batch):
    graphdef, params = nnx.split(model, nnx.Param)

    @jax.jit
    def run(params):
        merged = nnx.merge(graphdef, params)
        features, valid = nco.pooled_features(merged, batch)
        logits = merged(batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"])
        pooled, _ = pooled_logits(logits, batch["segment_ids"])
        results = {"features": features, "valid": valid, "pooled": pooled}
        for name in ("nc_ntce_k4", "nc_nonl_etf_k4"):
            def loss(p, name=name):
                return OBJECTIVES.get(name)(nnx.merge(graphdef, p), batch, jax.random.key(0))
            (value, metrics), grads = jax.value_and_grad(loss, has_aux=True)(params)
            results[name] = (value, metrics, grads["head"][...])
        results["nc_scl_k4"] = OBJECTIVES.get("nc_scl_k4")(merged, batch, jax.random.key(0))
        # The references, computed from the same features in the same program.
        prototypes = merged.head[...][:, :K].T
        results["ntce_reference"] = nc.ntce_losses(features, prototypes, batch["labels"], nco.TEMPERATURE, valid)
        results["scl_reference"] = nc.supcon_losses(features[:, None], batch["labels"], nco.SUPCON_TEMPERATURE,
                                                    valid)
        return results

    return run(params)


def test_every_loss_and_prototype_kind_is_registered():
    for count in nco.BUILTIN_CLASS_COUNTS:
        for name in ("normface", "ntce", "nonl"):
            assert f"nc_{name}_k{count}" in OBJECTIVES and f"nc_{name}_etf_k{count}" in OBJECTIVES
        assert f"nc_scl_k{count}" in OBJECTIVES
    assert nco.register_nc_objectives(4) == nco.register_nc_objectives(4)


def test_features_are_what_the_classification_head_reads(model, outputs):
    # The head is linear, so head(mean of final hidden states) = mean of logits on real rows.
    want = np.asarray(outputs["pooled"])[:-1]
    got = np.asarray(outputs["features"] @ model.head[...])[:-1]
    np.testing.assert_allclose(got, want, atol=1e-4)
    np.testing.assert_array_equal(outputs["valid"], [1, 1, 1, 1, 1, 0])


def test_ntce_objective_is_the_valid_mean_with_head_prototypes(model, outputs, batch):
    value, metrics, _ = outputs["nc_ntce_k4"]
    prototypes = np.asarray(model.head[...][:, :K].T)
    losses, valid = outputs["ntce_reference"]
    assert float(metrics["weight"]) == 5.0
    assert float(metrics["loss_sum"]) == pytest.approx(float(jnp.sum(losses * valid)), rel=1e-4)
    assert float(value) == pytest.approx(float(jnp.sum(losses * valid)) / 5.0, rel=1e-4)
    scores = np.asarray(outputs["features"]) @ (prototypes / np.linalg.norm(prototypes, axis=1, keepdims=True)).T
    correct = (np.argmax(scores, 1) == np.asarray(batch["labels"]))[:-1].sum()
    assert float(metrics["correct"]) == correct


def test_fixed_etf_prototypes_receive_no_gradient(outputs):
    _, metrics, head_grad = outputs["nc_nonl_etf_k4"]
    assert float(metrics["weight"]) == 5.0
    np.testing.assert_array_equal(head_grad, 0.0)
    assert np.abs(np.asarray(outputs["nc_ntce_k4"][2])).max() > 0


def test_scl_objective_uses_leave_one_out_class_means(outputs, batch):
    value, metrics = outputs["nc_scl_k4"]
    features, labels = np.asarray(outputs["features"], np.float64)[:5], np.asarray(batch["labels"])
    unit = features / np.linalg.norm(features, axis=1, keepdims=True)
    correct = 0
    for i in range(5):
        scores = []
        for c in range(K):
            others = [unit[j] for j in range(5) if j != i and labels[j] == c]
            mean = np.sum(others, axis=0)
            scores.append(-np.inf if not others else mean @ unit[i] / np.linalg.norm(mean))
        correct += int(np.argmax(scores) == labels[i])
    assert float(metrics["correct"]) == correct
    losses, valid = outputs["scl_reference"]
    assert float(value) == pytest.approx(float(nc.reduce_losses(losses, valid)), rel=1e-4)


def test_bad_input(model, batch):
    no_labels = {k: v for k, v in batch.items() if k != "labels"}
    with pytest.raises(ValueError, match=r"objective 'nc_ntce_k4' needs batch fields .*missing \['labels'\]"):
        OBJECTIVES.get("nc_ntce_k4")(model, no_labels, jax.random.key(0))
    with pytest.raises(ValueError, match="labels must lie in"):
        OBJECTIVES.get("nc_normface_k4")(model, {**batch, "labels": batch["labels"] + 1}, jax.random.key(0))
    with pytest.raises(ValueError, match="loss"):
        nco.make_nc_objective("arcface", 4)
    with pytest.raises(ValueError, match="num_classes"):
        nco.make_nc_objective("ntce", 1)
