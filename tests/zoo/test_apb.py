"""APB (icml26zoo.rl.apb): APB invariants 1-3, on tiny shapes.

1. backbone gradients are exactly zero and the backbone is bit-identical after masked training (while the full
   baseline does move it);
2. the per-task parameter count matches (d_o + 1)·d_in + (d_out + 1)·k·d_a for both heads;
3. with d_in = d_o, W_in = I and a pre-trained torso as backbone, APB reproduces that policy.
No official code exists for APB (a reconstruction), so nothing is compared against one.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.rl import apb
from icml26zoo.rl.acda import mlp_init
from icml26zoo.rl.apb_train import PGConfig, episode_return, start_states, train_tasks
from icml26zoo.rl.control_envs import PointMassTask, rotation

pytestmark = pytest.mark.usefixtures("fast_compile")

CONFIG = apb.APBConfig(obs_dim=4, action_dim=2, d_in=6, width=8, depth=2)
PG = PGConfig(steps=2, batch_size=2, episode_length=3)


def _tasks() -> PointMassTask:
    return PointMassTask(goal=jnp.array([[1.0, 0.0], [0.0, -2.0]]), rotation=jnp.stack([rotation(0.3), jnp.eye(2)]))


def test_backbone_gradients_are_zero_and_training_leaves_it_bit_identical():
    params = apb.init(jax.random.key(0), CONFIG)
    task = PointMassTask(goal=jnp.array([1.0, 0.0]), rotation=jnp.eye(2))
    starts = start_states(jax.random.key(1), 2, 0.5)

    def loss(p, mode):
        return -episode_return(lambda s: apb.action(p, s, CONFIG, mode=mode), task, starts, 3)

    grads = jax.grad(loss)(params, "apb")
    assert all(np.all(np.asarray(g) == 0) for g in jax.tree.leaves(grads["backbone"]))
    assert any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(grads["task"]))
    full = jax.grad(loss)(params, "full")
    assert any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(full["backbone"]))

    heads = jax.vmap(lambda k: apb.init_task(k, CONFIG))(jax.random.split(jax.random.key(2), 2))
    keys = jax.random.split(jax.random.key(3), 2)
    for mode, moves in (("apb", False), ("full", True)):
        trained, losses = train_tasks(heads, params["backbone"], _tasks(), keys, config=CONFIG, pg=PG, mode=mode)
        assert losses.shape == (2, PG.steps) and np.all(np.isfinite(losses))
        same = [np.array_equal(a, np.broadcast_to(b, a.shape))
                for a, b in zip(jax.tree.leaves(trained["backbone"]), jax.tree.leaves(params["backbone"]), strict=True)]
        assert all(same) != moves, mode
        assert not np.array_equal(trained["task"]["w_in"], heads["w_in"])
    # The mask also keeps the optimiser from holding Adam moments for the frozen backbone.
    state = apb.optimizer(optax.adam(1e-3)).init(params)
    assert apb.param_count(state) == 2 * apb.param_count(params["task"]) + 1  # μ, ν of the task layers, count


@pytest.mark.parametrize("head, k", [("deterministic", 1), ("gaussian", 2)])
def test_task_parameter_count_matches_the_formula(head, k):
    config = CONFIG._replace(head=head)
    expected = (4 + 1) * 6 + (8 + 1) * k * 2
    assert apb.task_param_count(config) == expected
    assert apb.param_count(apb.init_task(jax.random.key(0), config)) == expected
    assert apb.apply(apb.init(jax.random.key(0), config), jnp.ones((3, 4))).shape == (3, k * 2)


def test_identity_adapter_reproduces_a_pretrained_policy():
    torso_and_head = mlp_init(jax.random.key(4), (4, 8, 8, 2))
    torso, head = torso_and_head[:2], torso_and_head[2]
    config = apb.APBConfig(obs_dim=4, action_dim=2, d_in=4, width=8, depth=2)
    params = {"task": {"w_in": jnp.eye(4), "b_in": jnp.zeros(4), "w_out": head["w"], "b_out": head["b"]},
              "backbone": torso}
    obs = jax.random.normal(jax.random.key(5), (5, 4))
    hidden = obs
    for layer in torso:
        hidden = np.tanh(hidden @ np.asarray(layer["w"]) + np.asarray(layer["b"]))
    policy = np.tanh(hidden @ np.asarray(head["w"]) + np.asarray(head["b"]))
    np.testing.assert_allclose(apb.action(params, obs, config), policy, rtol=1e-5, atol=1e-6)


def test_small_initial_actions_and_bad_sizes():
    params = apb.init(jax.random.key(0), CONFIG)
    assert float(jnp.max(jnp.abs(apb.action(params, jnp.ones((2, 4)), CONFIG)))) < 0.1
    for field in ("obs_dim", "action_dim", "d_in", "width"):
        with pytest.raises(ValueError, match=field):
            CONFIG._replace(**{field: 0}).check()
    with pytest.raises(ValueError, match="mode"):
        apb.optimizer(optax.sgd(0.1), mode="frozen")
