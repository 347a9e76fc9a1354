"""optim.param_groups: a parameter group really gets its own learning rate and weight decay."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.train.config import OptimConfig, TrainConfig, apply_overrides
from icml26zoo.train.optim import build_optimizer, param_group_labels, parameter_path

MIXER = {"filter_out": {"kernel": jnp.full((3, 2), 2.0)},
         "in_proj": {"kernel": jnp.full((2, 3), 2.0), "bias": jnp.full((3,), 2.0)}}
PARAMS = {"layers": {"mixer": MIXER}}


def second_step(cfg: OptimConfig, grads: dict) -> dict:
    """The updates of the second step (the first is the warmup's zero learning rate) at PARAMS."""
    optimizer = build_optimizer(cfg, num_steps=10)
    with jax.numpy_dtype_promotion("standard"):  # optax's schedules mix Python floats and int32 counts
        _, state = optimizer.update(grads, optimizer.init(PARAMS), PARAMS)
        updates, _ = optimizer.update(grads, state, PARAMS)
    return updates


def test_group_gets_its_own_learning_rate_and_weight_decay():
    # SGD without momentum or clipping: update = -lr * (grad + wd * param) on matrices, -lr * grad elsewhere.
    base = dict(name="sgd", learning_rate=0.1, warmup_steps=1, end_lr_fraction=1.0, b1=0.0, grad_clip_norm=0.0,
                weight_decay=0.5)
    grads = jax.tree.map(jnp.ones_like, PARAMS)
    grouped = second_step(OptimConfig(**base, param_groups=(("mixer/filter_", 0.25, 0.0),)), grads)
    plain = second_step(OptimConfig(**base), grads)
    mixer, plain_mixer = grouped["layers"]["mixer"], plain["layers"]["mixer"]
    np.testing.assert_allclose(mixer["filter_out"]["kernel"], -0.1 * 0.25 * 1.0, rtol=1e-6)
    np.testing.assert_allclose(plain_mixer["filter_out"]["kernel"], -0.1 * (1.0 + 0.5 * 2.0), rtol=1e-6)
    # Parameters outside the group are untouched by it: the same update as without groups.
    for name in ("kernel", "bias"):
        np.testing.assert_allclose(mixer["in_proj"][name], plain_mixer["in_proj"][name], rtol=1e-6)
    np.testing.assert_allclose(mixer["in_proj"]["kernel"], -0.1 * 2.0, rtol=1e-6)
    np.testing.assert_allclose(mixer["in_proj"]["bias"], -0.1, rtol=1e-6)


def test_adamw_group_scales_the_step_and_keeps_weight_decay_per_group():
    grads = jax.tree.map(lambda p: jnp.full_like(p, 0.3), PARAMS)
    base = dict(learning_rate=1e-2, warmup_steps=1, end_lr_fraction=1.0, grad_clip_norm=0.0, weight_decay=0.1)
    grouped = second_step(OptimConfig(**base, param_groups=(("filter_out/kernel$", 0.5, 0.2),)), grads)
    # Adam's step on a constant gradient is 1: the group moves by 0.5 * lr * (1 + 0.2 * 2), the rest by
    # lr * (1 + 0.1 * 2).
    np.testing.assert_allclose(grouped["layers"]["mixer"]["filter_out"]["kernel"], -0.5e-2 * 1.4, rtol=1e-5)
    np.testing.assert_allclose(grouped["layers"]["mixer"]["in_proj"]["kernel"], -1e-2 * 1.2, rtol=1e-5)


def test_labels_first_match_wins_and_unmatched_patterns_are_errors():
    labels = param_group_labels((("in_proj", 1.0, 0.0), ("mixer", 2.0, 0.0)), PARAMS)
    assert labels["layers"]["mixer"]["in_proj"]["bias"] == "group0"
    assert labels["layers"]["mixer"]["filter_out"]["kernel"] == "group1"
    assert parameter_path(jax.tree_util.tree_flatten_with_path(PARAMS)[0][0][0]) == "layers/mixer/filter_out/kernel"
    with pytest.raises(ValueError, match=r"optim.param_groups\[1\]: pattern 'filtr' matches no parameter"):
        param_group_labels((("mixer", 1.0, 0.0), ("filtr", 1.0, 0.0)), PARAMS)
    optimizer = build_optimizer(OptimConfig(param_groups=(("nowhere", 1.0, 0.0),)), num_steps=10)
    with pytest.raises(ValueError, match="matches no parameter"):
        optimizer.init(PARAMS)


@pytest.mark.parametrize("groups, message", [
    ((("", 1.0, 0.0),), "non-empty pattern"),
    ((("a", 1.0),), r"\(pattern, lr_scale, weight_decay\) triple"),
    ((("(", 1.0, 0.0),), "is not a regular expression"),
    ((("a", -1.0, 0.0),), "lr_scale must be a non-negative number, got -1.0"),
    ((("a", 1.0, True),), "weight_decay must be a non-negative number, got True"),
    ((("a", float("nan"), 0.0),), "optim.param_groups must be finite"),
    ("a", "must be a tuple of"),
])
def test_bad_param_groups_are_refused_naming_the_field(groups, message):
    with pytest.raises(ValueError, match=message):
        OptimConfig(param_groups=groups)


def test_param_groups_round_trip_and_override_and_refuse_two_gradient_optimizers():
    config = apply_overrides(TrainConfig(), ["optim.param_groups=(('filter_', 0.5, 0.0),)"])
    assert config.optim.param_groups == (("filter_", 0.5, 0.0),)
    assert TrainConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="optim.param_groups needs a single-gradient optimizer"):
        build_optimizer(OptimConfig(name="sam_polyak", param_groups=(("a", 1.0, 0.0),)), num_steps=10)
    # Without groups the optimizer state is the registered core's own (no multi_transform wrapper).
    state = build_optimizer(OptimConfig(grad_clip_norm=0.0), num_steps=10).init(PARAMS)
    assert not isinstance(state, optax.MultiTransformState)
