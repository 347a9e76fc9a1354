"""set_classification and point_regression against hand computations, with padding rows and bad batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.losses.geometric import PointRegressionOptions, point_regression, set_classification
from icml26zoo.registry import OBJECTIVES
from icml26zoo.train.config import objective_options


class FixedOutputs:
    """A stand-in model returning fixed outputs and recording what it was called with."""

    def __init__(self, outputs):
        self.outputs = jnp.asarray(outputs, jnp.float32)
        self.calls = []

    def __call__(self, points, features, weights):
        self.calls.append((points.shape, features.shape, weights.shape))
        return self.outputs


def _batch(weights, **fields):
    weights = np.asarray(weights, np.float32)
    batch = {"points": np.zeros(weights.shape + (3,), np.float32),
             "features": np.zeros(weights.shape + (0,), np.float32), "weights": weights}
    return {name: jnp.asarray(value) for name, value in {**batch, **fields}.items()}


class KeyedOutputs(FixedOutputs):
    """A stand-in for a randomized model: declares TAKES_KEY and records the key it gets."""

    TAKES_KEY = True

    def __call__(self, points, features, weights, *, key):
        self.calls.append(key)
        return self.outputs


def test_a_model_declaring_takes_key_gets_the_objectives_key():
    batch = _batch([[1, 1, 0]], labels=np.array([0], np.int32))
    model, key = KeyedOutputs(np.zeros((1, 3), np.float32)), jax.random.key(7)
    set_classification(model, batch, key)
    assert len(model.calls) == 1 and bool(jnp.all(jax.random.key_data(model.calls[0]) == jax.random.key_data(key)))
    plain = FixedOutputs(np.zeros((1, 3), np.float32))
    set_classification(plain, batch, key)
    assert plain.calls == [((1, 3, 3), (1, 3, 0), (1, 3))]


def test_set_classification_is_cross_entropy_over_real_rows():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0], [5.0, 5.0, 5.0]], np.float32)
    labels = np.array([0, 2, 1], np.int32)
    # Row 2 is padding (all weights 0): it must not count.
    batch = _batch([[1, 1, 0], [1, 0, 0], [0, 0, 0]], labels=labels)
    model = FixedOutputs(logits)
    loss, metrics = set_classification(model, batch, jax.random.key(0))
    log_probs = logits[:2] - np.log(np.exp(logits[:2]).sum(axis=1, keepdims=True))
    want = -(log_probs[0, 0] + log_probs[1, 2]) / 2
    np.testing.assert_allclose(float(loss), want, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["loss_sum"]), 2 * want, rtol=1e-6)
    assert float(metrics["weight"]) == 2.0 and float(metrics["correct"]) == 1.0
    assert model.calls == [((3, 3, 3), (3, 3, 0), (3, 3))]
    assert OBJECTIVES.get("set_classification") is set_classification


def test_point_regression_is_quadrature_weighted_relative_l2():
    rng = np.random.default_rng(0)
    targets = rng.normal(size=(3, 4, 2)).astype(np.float32)
    predictions = (targets + 0.3 * rng.normal(size=targets.shape)).astype(np.float32)
    predictions[1] = targets[1] * 1.05  # Relative error exactly 0.05 whatever the weights.
    weights = np.array([[0.5, 1.5, 2.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    batch = _batch(weights, targets=targets)
    loss, metrics = point_regression(FixedOutputs(predictions), batch, jax.random.key(0))
    want_rel, want_mse = [], []
    for row in range(2):
        w = weights[row]
        error = sum(w[i] * np.sum((predictions[row, i] - targets[row, i]) ** 2) for i in range(4))
        norm = sum(w[i] * np.sum(targets[row, i] ** 2) for i in range(4))
        want_rel.append(np.sqrt(error / norm))
        want_mse.append(error / w.sum())
    np.testing.assert_allclose(want_rel[1], 0.05, rtol=1e-5)
    np.testing.assert_allclose(float(loss), np.mean(want_rel), rtol=1e-5)
    np.testing.assert_allclose(float(metrics["loss_sum"]), np.sum(want_rel), rtol=1e-5)
    np.testing.assert_allclose(float(metrics["mse_sum"]), np.sum(want_mse), rtol=1e-5)
    assert float(metrics["weight"]) == 2.0
    assert float(metrics["correct"]) == float(want_rel[0] < 0.1) + 1.0
    _, loose = point_regression(FixedOutputs(predictions), batch, jax.random.key(0),
                                options=PointRegressionOptions(tolerance=0.01))
    assert float(loose["correct"]) == float(want_rel[0] < 0.01)


def test_point_regression_gradient_is_finite_at_an_exact_fit():
    targets = jnp.ones((1, 3, 1), jnp.float32)
    batch = _batch([[1.0, 1.0, 0.0]], targets=targets)

    def loss_of(outputs):
        return point_regression(FixedOutputs(outputs), batch, jax.random.key(0))[0]

    grad = jax.grad(loss_of)(targets)
    assert np.all(np.isfinite(np.asarray(grad)))


def test_objectives_reject_bad_batches_and_options():
    with pytest.raises(ValueError, match=r"needs batch fields.*missing \['labels'\]"):
        set_classification(FixedOutputs(np.zeros((1, 2))), _batch([[1.0]]), jax.random.key(0))
    with pytest.raises(ValueError, match=r"pooled logits \[B, C\].*readout='pool'"):
        set_classification(FixedOutputs(np.zeros((1, 1, 2))), _batch([[1.0]], labels=np.zeros(1, np.int32)),
                           jax.random.key(0))
    with pytest.raises(ValueError, match=r"missing \['targets'\]"):
        point_regression(FixedOutputs(np.zeros((1, 1, 1))), _batch([[1.0]]), jax.random.key(0))
    with pytest.raises(ValueError, match=r"per-point outputs.*\[1, 1, 1\].*readout='point'"):
        point_regression(FixedOutputs(np.zeros((1, 1))), _batch([[1.0]], targets=np.zeros((1, 1, 1), np.float32)),
                         jax.random.key(0))
    with pytest.raises(ValueError, match="objective_options.*tolerance"):
        objective_options("point_regression", (("tolerance", 0.0),))
    assert objective_options("point_regression", (("tolerance", 0.2),)) == PointRegressionOptions(0.2)
