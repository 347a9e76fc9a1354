"""The set_transformer baseline: padding never matters, point order does not, rotations do; bad input; one
trainer run through the geo_shapes_baseline preset."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.geometric import random_rotation, rotate_points
from icml26zoo.models import ModelConfig, build_model, language_model_names
from icml26zoo.train.config import apply_overrides
from icml26zoo.train.loop import train

pytestmark = pytest.mark.usefixtures("fast_compile")

OPTIONS = (("num_outputs", 3), ("readout", "point"), ("feature_dim", 2))


def _config(**options):
    pairs = tuple({**dict(OPTIONS), **options}.items())
    return ModelConfig(name="set_transformer", d_model=16, num_layers=1, num_heads=2, mlp_dim=32, model_options=pairs)


@pytest.fixture(scope="module")
def models():
    # Built and run under jit: eager initialization compiles every op on its own.
    return {readout: nnx.jit(lambda readout=readout: build_model(_config(readout=readout), rngs=nnx.Rngs(0)))()
            for readout in ("point", "pool")}


@nnx.jit
def _forward(model, points, features, weights):
    return model(points, features, weights)


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(2, 6, 3)).astype(np.float32)
    features = rng.normal(size=(2, 6, 2)).astype(np.float32)
    weights = np.array([[1, 1, 1, 1, 0, 0], [0.5, 2, 1, 1, 1, 0]], np.float32)
    return points, features, weights


def test_padding_changes_nothing_and_point_order_only_permutes(models, inputs):
    points, features, weights = inputs
    junk_points, junk_features = points.copy(), features.copy()
    junk_points[weights == 0] = 50.0
    junk_features[weights == 0] = -30.0
    real = weights > 0
    for readout, model in models.items():
        clean = np.asarray(_forward(model, points, features, weights))
        junk = np.asarray(_forward(model, junk_points, junk_features, weights))
        if readout == "point":
            assert clean.shape == (2, 6, 3)
            np.testing.assert_allclose(junk[real], clean[real], atol=1e-6)
        else:
            assert clean.shape == (2, 3)
            np.testing.assert_allclose(junk, clean, atol=1e-6)
        order = np.array([3, 0, 5, 1, 4, 2])
        shuffled = np.asarray(_forward(model, points[:, order], features[:, order], weights[:, order]))
        if readout == "point":
            moved = weights[:, order] > 0
            np.testing.assert_allclose(shuffled[moved], clean[:, order][moved], atol=1e-5)
        else:
            np.testing.assert_allclose(shuffled, clean, atol=1e-5)


def test_set_transformer_is_not_rotation_invariant(models, inputs):
    points, features, weights = inputs
    model = models["pool"]
    rotation = random_rotation(jax.random.key(1))
    before = np.asarray(_forward(model, points, features, weights))
    after = np.asarray(_forward(model, rotate_points(jnp.asarray(points), rotation), features, weights))
    # The measure the notebook's equivariance table uses: max abs output change under the transformation.
    assert np.max(np.abs(after - before)) > 1e-2 * np.max(np.abs(before))


def test_set_transformer_rejects_bad_input(models, inputs):
    points, features, weights = (jnp.asarray(a) for a in inputs)
    model = models["pool"]
    with pytest.raises(ValueError, match=r"points must be finite coordinates, got nan at index \[1, 2, 0\]"):
        model(points.at[1, 2, 0].set(jnp.nan), features, weights)
    with pytest.raises(ValueError, match=r"weights must mark at least one real point.*examples \[0\]"):
        model(points, features, weights.at[0].set(0.0))
    wrong_rank = r"points must be a float array of shape \[B, N, d\] = \(\*, \*, \*\), got float32 \(6, 3\)"
    with pytest.raises(ValueError, match=wrong_rank):
        model(points[0], features, weights)
    with pytest.raises(ValueError, match=r"points must have shape \[B, N, 3\]"):
        model(points[..., :2], features, weights)
    with pytest.raises(ValueError, match=r"features must have shape \[B, N, 2\].*feature_dim"):
        model(points, features[..., :1], weights)
    with pytest.raises(ValueError, match=r"weights must have shape \[B, N\] = \[2, 6\]"):
        model(points, features, weights[:, :5])
    with pytest.raises(ValueError, match="model.model_options.*readout"):
        build_model(_config(readout="mean"), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="model.model_options.*num_outputs"):
        build_model(_config(num_outputs=0), rngs=nnx.Rngs(0))
    assert type(model).LANGUAGE_MODEL is False and "set_transformer" not in language_model_names()


def test_geo_shapes_baseline_preset_trains_end_to_end(tmp_path):
    config = apply_overrides(load_preset("geo_shapes_baseline"), [
        f"data.data_dir={tmp_path / 'data'}", "data.task_options=(('num_points', 16), ('train_examples', 32), "
        "('eval_examples', 8))", "seq_len=16", "batch_size=8", "num_steps=3", "eval_every=0", "log_every=1",
        "model.d_model=16", "model.num_layers=1", "model.mlp_dim=16", "progress_bar=false"])
    summary = train(config, tmp_path / "run", devices=jax.devices()[:1])
    assert int(summary["state"].step) == 3
    assert np.isfinite(summary["eval/loss"]) and 0.0 <= summary["eval/accuracy"] <= 1.0
    assert "sample" not in summary and "eval/bits_per_byte" not in summary
