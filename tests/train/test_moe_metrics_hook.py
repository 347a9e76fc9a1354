"""train.metrics.report_train_metrics: an objective's extra scalars reach the run's writer from the backward
pass only (never from evaluation), averaged over the steps between two train records; plotted at the end."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.train.metrics import create_writer, plotted_reported_names, read_metrics, report_train_metrics
from icml26zoo.train.plotting import plot_loss_curves


def _loss(w: jax.Array, x: jax.Array) -> jax.Array:
    loss = jnp.sum((w * x) ** 2)
    return report_train_metrics(loss, {"test/x_mean": jnp.mean(x), "test/w": w[0]}, plot=("test/x_mean",))


def test_reports_reach_the_next_train_record_as_means_and_eval_adds_none(tmp_path):
    grad = jax.jit(jax.value_and_grad(_loss))
    forward = jax.jit(_loss)
    writer = create_writer(tmp_path, tensorboard=False, process_index=0)
    w = jnp.array([2.0, 1.0])
    value, g = grad(w, jnp.array([1.0, 3.0]))
    # The wrapper changes neither the value nor the gradient.
    np.testing.assert_allclose(value, 4.0 + 9.0)
    np.testing.assert_allclose(g, [2 * 2.0 * 1.0, 2 * 1.0 * 9.0])
    jax.block_until_ready(grad(w, jnp.array([3.0, 5.0])))
    writer.write(2, {"train/loss": 1.0})
    # Evaluation (no gradient) reports nothing; an eval record never takes reports.
    jax.block_until_ready(forward(w, jnp.array([100.0, 100.0])))
    writer.write(2, {"eval/loss": 2.0})
    jax.block_until_ready(grad(w, jnp.array([0.0, 1.0])))
    writer.write(3, {"train/loss": 0.5})
    writer.write(4, {"train/loss": 0.25})
    writer.close()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert records == [
        {"step": 2, "train/loss": 1.0, "test/w": 2.0, "test/x_mean": 3.0},
        {"step": 2, "eval/loss": 2.0},
        {"step": 3, "train/loss": 0.5, "test/w": 2.0, "test/x_mean": 0.5},
        {"step": 4, "train/loss": 0.25},
    ]
    assert "test/x_mean" in plotted_reported_names() and "test/w" not in plotted_reported_names()
    png = plot_loss_curves(tmp_path / "metrics.jsonl", tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 0 and png.endswith("curve.png")


def test_bad_reports_name_the_problem():
    with pytest.raises(ValueError, match="scalar metrics"):
        report_train_metrics(jnp.zeros(()), {"a": jnp.zeros(3)})
    with pytest.raises(ValueError, match="plot names"):
        report_train_metrics(jnp.zeros(()), {"a": jnp.zeros(())}, plot=("b",))
