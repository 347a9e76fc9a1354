"""Expert parallelism (zoo.moe.expert_parallel): an MoE LM's loss and gradients with the experts sharded over
an 8-device "expert" mesh axis (tokens dispatched by all-to-all) equal the single-device ones; capacity
dropping (decided on the global routing) carries over unchanged; bad shapes name the problem."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tolerances import tolerance

from icml26zoo.losses.moe import lm_moe_objective
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.moe import MoEConfig
from icml26zoo.moe.expert_parallel import expert_shardings

pytestmark = pytest.mark.usefixtures("fast_compile")

DEVICES = 8
CFG = ModelConfig(mixer="attention", vocab_size=32, d_model=16, num_layers=2, num_heads=2, num_kv_heads=2,
                  mlp_dim=32, max_seq_len=16, moe=MoEConfig(num_experts=16, top_k=2, capacity_factor=1.0))


def _batch(rows: int = 4, length: int = 8) -> dict[str, jax.Array]:
    tokens = jax.random.randint(jax.random.key(1), (rows, length + 1), 0, CFG.vocab_size, dtype=jnp.int32)
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
            "segment_ids": jnp.ones((rows, length), jnp.int32),
            "positions": jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (rows, length)),
            "weights": jnp.ones((rows, length), jnp.float32)}


@functools.partial(jax.jit, static_argnums=0)
def _loss_and_grads(graphdef, params, batch):
    def loss(params):
        return lm_moe_objective(nnx.merge(graphdef, params), batch, jax.random.key(0))[0]

    return jax.value_and_grad(loss)(params)


@pytest.fixture(scope="module")
def model_parts():
    graphdef, params = nnx.split(build_model(CFG, rngs=nnx.Rngs(0)), nnx.Param)
    return graphdef, nnx.to_pure_dict(params)


def test_loss_and_grads_on_8_expert_shards_equal_one_device(model_parts):
    assert jax.device_count() >= DEVICES, "tests/conftest.py provides 8 CPU devices"
    graphdef, params = model_parts
    batch = _batch()
    loss, grads = _loss_and_grads(graphdef, params, batch)
    mesh = jax.make_mesh((DEVICES,), ("expert",), devices=jax.devices()[:DEVICES],
                         axis_types=(jax.sharding.AxisType.Auto,))
    shardings = expert_shardings(mesh, params)
    sharded = jax.device_put(params, shardings)
    with jax.set_mesh(mesh):
        traced = _loss_and_grads.trace(graphdef, sharded, batch)
        ep_loss, ep_grads = traced.lower().compile()(sharded, batch)
    assert "all_to_all" in str(traced.jaxpr)  # the expert-parallel dispatch ran, not the single-device path
    tol = tolerance("default")
    np.testing.assert_allclose(ep_loss, loss, rtol=tol.fwd, atol=tol.fwd)
    flat, flat_ep = jax.tree.leaves(grads), jax.tree.leaves(jax.device_get(ep_grads))
    for want, got in zip(flat, flat_ep, strict=True):
        scale = max(float(np.max(np.abs(want))), tol.floor)
        assert float(np.max(np.abs(np.asarray(got) - np.asarray(want)))) / scale <= tol.grad


def test_expert_weights_are_stored_split_over_the_axis(model_parts):
    _, params = model_parts
    mesh = jax.make_mesh((DEVICES,), ("expert",), devices=jax.devices()[:DEVICES])
    sharded = jax.device_put(params, expert_shardings(mesh, params))
    paths = {jax.tree_util.keystr(path): leaf for path, leaf in jax.tree_util.tree_leaves_with_path(sharded)}
    experts = [leaf for path, leaf in paths.items() if "w_up" in path or "w_down" in path or "w_gate" in path]
    assert experts
    for leaf in experts:
        shard = leaf.addressable_shards[0].data
        assert shard.shape[-3] == CFG.moe.num_experts // DEVICES and leaf.shape[-3] == CFG.moe.num_experts
    others = [leaf for path, leaf in paths.items() if "w_" not in path]
    assert all(leaf.sharding.is_fully_replicated for leaf in others)
    with pytest.raises(ValueError, match="'expert' axis"):
        expert_shardings(jax.make_mesh((DEVICES,), ("data",), devices=jax.devices()[:DEVICES]), params)


def test_token_count_not_divisible_by_the_axis_names_it(model_parts):
    graphdef, params = model_parts
    mesh = jax.make_mesh((DEVICES,), ("expert",), devices=jax.devices()[:DEVICES])
    with jax.set_mesh(mesh), pytest.raises(ValueError, match="token count"):
        jax.eval_shape(functools.partial(_loss_and_grads.__wrapped__, graphdef), params, _batch(rows=1, length=4))
