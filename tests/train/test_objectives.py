"""Objectives and datasets by name: the registries, the classification objective and the `topics` dataset,
and a short classification run through the command line."""

from __future__ import annotations

import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.losses import classification_objective, lm_objective, pooled_logits, weighted_cross_entropy
from icml26zoo.registry import OBJECTIVES, OPTIMIZERS
from icml26zoo.train import data as data_lib
from icml26zoo.train.__main__ import main
from icml26zoo.train.config import DataConfig, TrainConfig
from icml26zoo.train.data import topics
from icml26zoo.train.step import summarize_eval

ROOT = pathlib.Path(__file__).resolve().parents[2]
# XLA's cheap pipeline (tests/conftest.py): the command-line run compiles far longer than it trains, and nothing here
# compares a compiled program with separately compiled code (the hand computations are NumPy against single ops).
pytestmark = pytest.mark.usefixtures("fast_compile")


def test_objectives_and_datasets_are_registered_and_unknown_names_list_them():
    assert {"lm", "classification"} <= set(OBJECTIVES.names())
    with pytest.raises(ValueError, match=r"objective must be one of \[.*'classification'.*'lm'.*got 'mlm'"):
        TrainConfig(objective="mlm")
    with pytest.raises(ValueError, match=r"data.name must be one of .*'tfds:<name>', .*'topics'.*got 'imagenet'"):
        DataConfig(name="imagenet")
    for bad in ("tfds:", "mqar:x"):
        with pytest.raises(ValueError, match="data.name must be one of"):
            DataConfig(name=bad)
    assert DataConfig(name="tfds:lm1b").name == "tfds:lm1b"


def test_two_gradient_update_is_declared_at_registration():
    assert OPTIMIZERS.update("sam_polyak") is not None and OPTIMIZERS.update("adamw") is None
    assert not hasattr(OPTIMIZERS.get("sam_polyak"), "make_update")
    with pytest.raises(ValueError, match="unknown optimizer 'nope'"):
        OPTIMIZERS.update("nope")


def test_weighted_cross_entropy_sums_match_a_hand_computation():
    logits = jnp.asarray([[[2.0, 0.0, -1.0], [0.0, 1.0, 0.0]]], jnp.float32)
    targets, weights = jnp.asarray([[0, 2]], jnp.int32), jnp.asarray([[1.0, 0.5]], jnp.float32)
    sums = weighted_cross_entropy(logits, targets, weights)
    log_softmax = np.asarray(logits) - np.log(np.exp(np.asarray(logits)).sum(-1, keepdims=True))
    expected = -(1.0 * log_softmax[0, 0, 0] + 0.5 * log_softmax[0, 1, 2])
    np.testing.assert_allclose(float(sums.loss_sum), expected, rtol=1e-6)
    assert float(sums.weight) == 1.5 and float(sums.correct) == 1.0


class _FixedLogits:
    """A stand-in model returning the same logits [B, T, V] whatever its inputs."""

    def __init__(self, logits):
        self.logits = logits

    def __call__(self, inputs, *, segment_ids, positions):
        return self.logits


def test_classification_pools_real_tokens_and_skips_padding_rows():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4, 5)), jnp.float32)
    segment_ids = jnp.asarray([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], jnp.int32)
    pooled, row_weight = pooled_logits(logits, segment_ids)
    np.testing.assert_allclose(pooled[0], np.asarray(logits[0, :3]).mean(0), rtol=1e-6)
    np.testing.assert_array_equal(row_weight, [1.0, 1.0, 0.0])
    zeros = jnp.zeros((3, 4), jnp.int32)
    batch = {"inputs": zeros, "positions": zeros, "segment_ids": segment_ids, "labels": jnp.asarray([2, 0, 4]),
             "targets": zeros, "weights": (segment_ids > 0).astype(jnp.float32)}
    loss, metrics = classification_objective(_FixedLogits(logits), batch, None)
    assert float(metrics["weight"]) == 2.0
    np.testing.assert_allclose(float(loss), float(metrics["loss_sum"]) / 2.0, rtol=1e-6)
    _, lm_metrics = lm_objective(_FixedLogits(logits), batch, None)
    assert float(lm_metrics["weight"]) == 7.0
    del batch["labels"]
    with pytest.raises(ValueError, match=r"needs batch fields .*missing \['labels'\]"):
        classification_objective(_FixedLogits(logits), batch, None)


def test_topics_generator_is_deterministic_and_its_batches_carry_labels(tmp_path):
    tokens, labels = topics.generate(4, 32, 65, 0.2, 400, seed=3)
    assert tokens.shape == (400, 65) and labels.shape == (400,)
    assert tokens.min() >= 4 and tokens.max() < 36 and set(labels.tolist()) == {0, 1, 2, 3}
    np.testing.assert_array_equal(tokens, topics.generate(4, 32, 65, 0.2, 400, seed=3)[0])
    # Counting each class's topic tokens recovers the label far above chance (1/4).
    counts = np.stack([((tokens - 4) // 8 == c).sum(1) for c in range(4)], axis=1)
    assert (counts.argmax(1) == labels).mean() > 0.8
    config = DataConfig(name="topics", data_dir=str(tmp_path), topics_train_examples=64, topics_eval_examples=10)
    assert data_lib.vocab_size(config) == 36 and data_lib.bytes_per_token(config) is None
    batch = next(data_lib.make_train_iterator(config, batch_size=4, seq_len=64, seed=0, process_count=1))
    assert batch["labels"].shape == (4,) and batch["labels"].dtype == np.int32
    assert (batch["segment_ids"] == 1).all() and batch["inputs"].min() >= 4
    last = list(data_lib.make_eval_iterator(config, batch_size=4, seq_len=64, process_count=1))[-1]
    np.testing.assert_array_equal(last["labels"][2:], 0)  # 10 rows: the last batch ends in 2 padding rows
    assert last["weights"][2:].sum() == 0
    with pytest.raises(ValueError, match="seq_len must be >= data.topics_length - 1"):
        data_lib.make_train_iterator(config, batch_size=4, seq_len=32, seed=0, process_count=1)


def test_classification_run_from_the_command_line(tmp_path):
    workdir = tmp_path / "cls"
    code = main([
        "--config", str(ROOT / "configs/classify_tiny.py"), "--workdir", str(workdir),
        f"data.data_dir={tmp_path / 'tfds'}", "data.topics_train_examples=512", "data.topics_eval_examples=32",
        "num_steps=16", "log_every=4", "eval_every=0", "eval_batches=0", "checkpoint_every=0",
        "tensorboard=false", "progress_bar=false",
    ])
    assert code == 0
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["train/loss"] for r in records if "train/loss" in r}
    assert sorted(losses) == [4, 8, 12, 16]
    assert losses[16] < 0.6 * losses[4], losses
    summary = json.loads((workdir / "summary.json").read_text())
    assert 0.0 <= summary["eval/accuracy"] <= 1.0 and np.isfinite(summary["eval/loss"])
    assert "eval/bits_per_byte" not in summary and (workdir / "loss_curve.png").stat().st_size > 0


def test_summarize_eval_reports_every_summed_metric_over_its_weight():
    sums = {"loss_sum": 6.0, "weight": 3.0, "correct": 1.5, "kl_sum": 2.0, "kl_weight": 4.0, "gap_sum": 0.6}
    summary = summarize_eval(sums, bytes_per_token=None)
    assert summary == pytest.approx({"eval/loss": 2.0, "eval/accuracy": 0.5, "eval/kl": 0.5, "eval/gap": 0.2})
