"""The objective-metrics contract of train.step: names with a "/" are train diagnostics (the train step returns
them beside its own metrics, the eval step leaves them out), the rest summable statistics; reserved prefixes and
non-scalar diagnostics are refused; `plotted_metrics` is read through bound options; the loss plot draws the
names it is given on a last panel. The loop's window averaging: tests/train/test_moe_multimodal_train.py."""

from __future__ import annotations

import dataclasses
import functools
import struct

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from icml26zoo.train.metrics import JsonlWriter
from icml26zoo.train.plotting import plot_loss_curves
from icml26zoo.train.step import (
    TrainState,
    make_eval_step,
    make_train_step,
    plotted_metrics,
    split_metrics,
)

pytestmark = pytest.mark.usefixtures("fast_compile")


def _objective(model, batch, rng, *, extra=None):
    del rng
    error = model(batch["x"]) - batch["y"]
    loss = jnp.mean(error**2)
    metrics = {"loss_sum": jnp.sum(error**2), "weight": jnp.asarray(error.size, jnp.float32),
               "test/x_mean": jnp.mean(batch["x"]), "test/error_max": jnp.max(jnp.abs(error))}
    return loss, {**metrics, **(extra or {})}


_objective.plotted_metrics = ("test/x_mean",)


@dataclasses.dataclass(frozen=True)
class _Options:
    scale: float = 1.0


def _setup():
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(params)
    optimizer = optax.sgd(0.1)
    state = TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params),
                       jax.random.key_data(jax.random.key(0)))
    batch = {"x": jnp.arange(12.0).reshape(4, 3) / 10, "y": jnp.ones((4, 2)), "weights": jnp.ones((4,))}
    return graphdef, optimizer, state, batch


def test_train_step_returns_the_diagnostics_and_the_eval_step_only_the_sums():
    graphdef, optimizer, state, batch = _setup()
    train_step = jax.jit(make_train_step(graphdef, _objective, optimizer, optax.constant_schedule(0.1), 1))
    _, metrics = train_step(state, batch)
    assert set(metrics) == {"train/loss", "train/tokens", "train/grad_norm", "train/learning_rate", "test/x_mean",
                            "test/error_max"}
    np.testing.assert_allclose(metrics["test/x_mean"], 0.55, rtol=1e-6)
    sums = jax.jit(make_eval_step(graphdef, _objective))(state.params, {}, batch)
    assert set(sums) == {"loss_sum", "weight"}
    # The gradient is the loss's alone: the same update as an objective without diagnostics.
    plain = lambda model, batch, rng: (_objective(model, batch, rng)[0], {})  # noqa: E731
    plain_state, _ = jax.jit(make_train_step(graphdef, plain, optimizer, optax.constant_schedule(0.1), 1))(
        state, batch)
    with_diagnostics, _ = train_step(state, batch)
    jax.tree.map(np.testing.assert_array_equal, with_diagnostics.params, plain_state.params)


def test_an_optimizer_with_its_own_update_gets_the_diagnostics_too():
    graphdef, optimizer, state, batch = _setup()

    def update(loss_fn, params, batch, opt_state, optimizer):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return loss, grads, updates, opt_state

    step = jax.jit(make_train_step(graphdef, _objective, optimizer, optax.constant_schedule(0.1), 1, update))
    _, metrics = step(state, batch)
    np.testing.assert_allclose(metrics["test/x_mean"], 0.55, rtol=1e-6)


@pytest.mark.parametrize(("extra", "match"), [
    ({"train/extra": jnp.zeros(())}, "'train/extra': a train diagnostic may not start with one of"),
    ({"perf/x": jnp.zeros(())}, "may not start with"),
    ({"test/vector": jnp.zeros(3)}, r"'test/vector': a train diagnostic must be a scalar, got shape \(3,\)"),
])
def test_bad_diagnostics_name_themselves(extra, match):
    graphdef, optimizer, state, batch = _setup()
    objective = functools.partial(_objective, extra=extra)
    with pytest.raises(ValueError, match=match):
        jax.jit(make_train_step(graphdef, objective, optimizer, optax.constant_schedule(0.1), 1))(state, batch)
    sums, diagnostics = split_metrics({"loss_sum": 1.0, "a/b": jnp.ones(())})
    assert list(sums) == ["loss_sum"] and list(diagnostics) == ["a/b"]


def test_plotted_metrics_are_read_through_bound_options():
    assert plotted_metrics(_objective) == ("test/x_mean",)
    assert plotted_metrics(functools.partial(_objective, options=_Options())) == ("test/x_mean",)
    assert plotted_metrics(lambda model, batch, rng: None) == ()
    def bad(model, batch, rng):
        return _objective(model, batch, rng)

    bad.plotted_metrics = ("loss_sum",)
    with pytest.raises(ValueError, match="plotted_metrics must name train diagnostics"):
        plotted_metrics(bad)


def _png_height(path) -> int:
    with open(path, "rb") as f:
        header = f.read(24)
    return struct.unpack(">I", header[20:24])[0]


def test_the_loss_plot_draws_the_named_diagnostics_on_a_last_panel(tmp_path):
    writer = JsonlWriter(tmp_path / "metrics.jsonl")
    for step in range(1, 6):
        writer.write(step, {"train/loss": 1.0 / step, "test/x_mean": 0.1 * step, "test/other": 1.0})
    writer.close()
    plain = plot_loss_curves(tmp_path / "metrics.jsonl", tmp_path / "plain.png")
    drawn = plot_loss_curves(tmp_path / "metrics.jsonl", tmp_path / "drawn.png", diagnostics=("test/x_mean",))
    absent = plot_loss_curves(tmp_path / "metrics.jsonl", tmp_path / "absent.png", diagnostics=("test/missing",))
    assert _png_height(drawn) > _png_height(plain) == _png_height(absent)
    with pytest.raises(ValueError, match="diagnostics must be a sequence of metric names"):
        plot_loss_curves(tmp_path / "metrics.jsonl", tmp_path / "bad.png", diagnostics="test/x_mean")
