"""The membership objective (zoo.losses.membership): the class read at <cls>, two-way cross-entropy, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.losses.membership import last_token_logits, membership_objective
from icml26zoo.registry import OBJECTIVES


class FixedLogits:
    """A stand-in model returning fixed logits [B, T, V] whatever the tokens."""

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = jnp.asarray(logits, jnp.float32)

    def __call__(self, inputs, *, segment_ids, positions):
        del inputs, segment_ids, positions
        return self.logits


def _batch(segment_ids: np.ndarray, labels: list[int]) -> dict[str, jax.Array]:
    shape = segment_ids.shape
    return {"inputs": jnp.zeros(shape, jnp.int32), "targets": jnp.zeros(shape, jnp.int32),
            "segment_ids": jnp.asarray(segment_ids, jnp.int32), "positions": jnp.zeros(shape, jnp.int32),
            "weights": jnp.asarray(segment_ids > 0, jnp.float32), "labels": jnp.asarray(labels, jnp.int32)}


def test_reads_the_last_real_token_and_two_way_cross_entropy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 6))
    segment_ids = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    labels = [1, 0, 1]
    loss, metrics = membership_objective(FixedLogits(logits), _batch(segment_ids, labels), jax.random.key(0))

    cls_logits = logits[[0, 1], [2, 4], :2]  # The padding row (all segment 0) carries no weight.
    margin = cls_logits[:, 1] - cls_logits[:, 0]
    signs = np.array([1.0, -1.0])  # Label 1: member margin; label 0: non-member margin.
    expected = np.log1p(np.exp(-signs * margin))
    np.testing.assert_allclose(metrics["loss_sum"], expected.sum(), rtol=1e-5)
    np.testing.assert_allclose(loss, expected.mean(), rtol=1e-5)
    assert float(metrics["weight"]) == 2.0
    assert float(metrics["correct"]) == float(np.sum(signs * margin > 0))
    assert OBJECTIVES.get("membership") is membership_objective


def test_last_token_logits_ignore_later_columns_and_positions():
    logits = jnp.arange(2 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 3)
    picked, weight = last_token_logits(logits, jnp.asarray([[1, 1, 0, 0], [2, 2, 2, 2]], jnp.int32))
    np.testing.assert_array_equal(picked, np.asarray(logits)[[0, 1], [1, 3]])
    np.testing.assert_array_equal(weight, [1.0, 1.0])


def test_missing_labels_raise():
    batch = _batch(np.ones((1, 3), np.int64), [1])
    del batch["labels"]
    with pytest.raises(ValueError, match=r"objective 'membership' needs batch fields .*missing \['labels'\]"):
        membership_objective(FixedLogits(np.zeros((1, 3, 4))), batch, jax.random.key(0))
