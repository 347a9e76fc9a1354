"""XR-1 stage 1 (icml26zoo.robotics): the sprite data, the causal action encoder, the KL alignment, the masking of
vision-only samples, and bad input. Tiny sizes; one model shared by the tests."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.models import ModelConfig, build_model
from icml26zoo.robotics import HUMAN, ROBOT, XR1, XR1Config, check_batch, kl_alignment, make_sprite_data
from icml26zoo.train.data.sprite_data import pack_scenes

pytestmark = pytest.mark.usefixtures("fast_compile")  # tests/conftest.py: tiny models, compile time dominates


CONFIG = XR1Config(width=16, heads=2, vit_layers=0, mformer_layers=1, decoder_layers=1, action_layers=1,
                   head_layers=1, num_queries=8, codebook_size=8, code_dim=8, chunk=16, downsample=2)


@functools.cache
def _model():
    return XR1(CONFIG, rngs=nnx.Rngs(0))


@functools.cache
def _data():
    return make_sprite_data(3, 6, human_fraction=0.5, embodiment2_fraction=0.0)


def _batch(data):
    return tuple(jnp.asarray(a) for a in (data.condition, data.target, data.actions, data.has_actions))


def test_sprite_data_is_seeded_shaped_and_moves_the_robot_by_its_actions():
    data = make_sprite_data(1, 40)
    again = make_sprite_data(1, 40)
    np.testing.assert_array_equal(data.target, again.target)
    assert data.condition.shape == data.target.shape == (40, 32, 32, 3)
    assert data.actions.shape == (40, 16, 4)
    assert 0 <= data.condition.min() and data.condition.max() <= 1
    human = data.kind == HUMAN
    assert np.all(data.actions[human] == 0) and np.all(data.has_actions == (~human))
    robot = data.kind == ROBOT
    red = (data.target[..., 0] > 0.9) & (data.target[..., 1] < 0.2)  # robot pixels
    for i in np.flatnonzero(robot)[:5]:
        ys, xs = np.nonzero(red[i])
        cond = (data.condition[i, ..., 0] > 0.9) & (data.condition[i, ..., 1] < 0.2)
        cy, cx = np.nonzero(cond)
        moved = np.array([ys.min() - cy.min(), xs.min() - cx.min()])
        np.testing.assert_allclose(moved, np.round(data.actions[i, :, :2].sum(0)), atol=1)
    with pytest.raises(ValueError, match="human_fraction"):
        make_sprite_data(0, 4, human_fraction=1.5)


def test_action_encoder_is_causal():
    graph, state = nnx.split(_model())
    actions = jax.random.normal(jax.random.key(0), (2, 16, 4))
    t0 = 6  # tokens j with (j + 1) * 2 - 1 < 6, i.e. j <= 2, see only steps < t0
    changed = actions.at[:, t0:].add(jax.random.normal(jax.random.key(1), (2, 10, 4)))
    encoded = jax.jit(lambda x: nnx.merge(graph, state).encode_actions(x))(jnp.concatenate([actions, changed]))
    before, after = encoded[:2], encoded[2:]
    np.testing.assert_allclose(before[:, :3], after[:, :3], atol=1e-6)
    assert float(jnp.max(jnp.abs(before[:, 3] - after[:, 3]))) > 1e-4


def test_kl_is_zero_for_identical_tokens_and_non_negative():
    a = jax.random.normal(jax.random.key(2), (3, 8, 8))
    b = jax.random.normal(jax.random.key(3), (3, 8, 8))
    ones = jnp.ones(3)
    assert abs(float(kl_alignment(a, a, ones))) < 1e-6
    assert float(kl_alignment(a, b, ones)) > 0
    assert float(kl_alignment(a, b, jnp.zeros(3))) == 0.0


ACTION_PARTS = ("action_in", "convs", "action_encoder", "action_norm", "action_out", "action_vq", "head_prefix",
                "head_action", "head_time", "head_position", "head", "head_norm", "head_out")


def test_vision_only_samples_give_no_action_loss_kl_or_gradient():
    model = _model()
    action_only = nnx.All(nnx.Param, nnx.Any(*(nnx.PathContains(name) for name in ACTION_PARTS)))
    graph, action_params, rest = nnx.split(model, action_only, ...)
    condition, target, actions, _ = _batch(_data())

    @jax.jit
    def grads_and_losses(p, has):
        def loss(p):
            out = nnx.merge(graph, p, rest)(condition, target, actions, has, jax.random.key(0))
            return out.losses["total"], out.losses
        return jax.grad(loss, has_aux=True)(p)

    grads, losses = grads_and_losses(action_params, jnp.zeros(condition.shape[0]))
    assert float(losses["action_flow"]) == float(losses["kl"]) == float(losses["vq_action"]) == 0.0
    assert float(losses["image_mse"]) > 0 and float(losses["vq_vision"]) > 0
    leaves = jax.tree.leaves(grads)
    assert len(leaves) > 20 and all(float(jnp.max(jnp.abs(g))) == 0.0 for g in leaves)
    # with actions present every term is live and finite, and the action branch gets a gradient
    grads, losses = grads_and_losses(action_params, jnp.ones(condition.shape[0]))
    assert all(np.isfinite(float(v)) for v in losses.values()) and float(losses["action_flow"]) > 0
    assert float(losses["kl"]) > 0 and float(jnp.max(jnp.abs(grads["action_in"]["kernel"]))) > 0


@pytest.mark.parametrize(("kwargs", "match"), [({"codebook_size": 1}, "codebook_size"),
                                               ({"image_size": 30}, "image_size"),
                                               ({"chunk": 15}, "chunk"),
                                               ({"kl_weight": float("nan")}, "kl_weight")])
def test_bad_config_raises_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        XR1Config(**kwargs)


def test_bad_frames_and_actions_raise_naming_the_argument():
    model = _model()
    condition, target, actions, has = _batch(_data())
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"target must be a float array of shape \[B, S, S, 3\]"):
        model(condition, target[:, :16], actions, has, key)
    with pytest.raises(ValueError, match="condition"):
        model(condition[..., :1], target, actions, has, key)
    with pytest.raises(ValueError, match="actions"):
        model(condition, target, actions[:, :8], has, key)
    bad = np.asarray(condition).copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="condition must be finite"):
        check_batch(CONFIG, bad, target, actions, has)
    with pytest.raises(ValueError, match="has_actions"):
        check_batch(CONFIG, condition, target, actions, has[:2])
    check_batch(CONFIG, condition, target, actions, has)


def test_registered_model_unpacks_the_stacked_scene_layout():
    scenes = make_sprite_data(3, 4, image_size=12, chunk=4)
    points, weights = pack_scenes(scenes)
    options = (("image_size", 12), ("chunk", 4), ("patch", 4), ("vit_layers", 0), ("mformer_layers", 1),
               ("decoder_layers", 1), ("action_layers", 1), ("head_layers", 1), ("num_queries", 2))
    cfg = ModelConfig(name="xr1", d_model=8, num_layers=1, num_heads=1, num_kv_heads=1, model_options=options)
    model = build_model(cfg, rngs=nnx.Rngs(0))
    assert (model.config.width, model.config.heads) == (8, 1)
    unpacked = model.unpack(jnp.asarray(points), jnp.asarray(weights))
    for got, want in zip(unpacked, (scenes.condition, scenes.target, scenes.actions, scenes.has_actions),
                         strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    with pytest.raises(ValueError, match=r"points must be \[B, N >= 292"):
        model.unpack(jnp.zeros((1, 10, 4)), jnp.ones((1, 10)))
    with pytest.raises(ValueError, match=r"model.model_options: unknown xr1 model option 'width'"):
        build_model(dataclasses.replace(cfg, model_options=(("width", 16),)), rngs=nnx.Rngs(0))
    # Built inside a trace (the trainer's jitted init), the host-drawn weights come from jax.random instead.
    traced = nnx.eval_shape(lambda: build_model(cfg, rngs=nnx.Rngs(0)))
    assert traced.xr1.queries.get_value().shape == model.xr1.queries[...].shape
