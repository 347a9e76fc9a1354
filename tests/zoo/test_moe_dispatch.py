"""Expert dispatch of zoo.moe: capacity dropping counts and priority against a Python queue, and the MoE
layer's reference (one-hot) and xla (ragged_dot) grouped-matmul paths giving the same outputs and gradients.
The grouped matmul itself against a per-row loop (outputs and gradients): tests/kernels/test_grouped_matmul.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.moe import MoEConfig, MoEFeedForward, capacity_keep, expert_capacity

pytestmark = pytest.mark.usefixtures("fast_compile")

K_IN, GROUPS = 6, 4
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}


def _queue_keep(indices: np.ndarray, mask: np.ndarray, experts: int, capacity: int) -> np.ndarray:
    """Reference: visit slot 0 of every token in order, then slot 1, ...; an expert admits `capacity`."""
    keep = np.zeros(indices.shape, bool)
    taken = np.zeros(experts, int)
    for slot in range(indices.shape[1]):
        for token in range(indices.shape[0]):
            expert = indices[token, slot]
            if mask[token] and taken[expert] < capacity:
                keep[token, slot] = True
                taken[expert] += 1
    return keep


def test_capacity_drops_exactly_the_overflow_in_priority_order():
    rng = np.random.default_rng(1)
    tokens, experts, top_k = 40, 4, 2
    # Skewed routing: expert 0 is everyone's first choice half of the time.
    first = np.where(rng.random(tokens) < 0.5, 0, rng.integers(1, experts, tokens))
    second = (first + rng.integers(1, experts, tokens)) % experts
    indices = np.stack([first, second], axis=1)
    mask = np.ones(tokens, bool)
    mask[-3:] = False
    capacity = expert_capacity(tokens, top_k, experts, 0.75)
    assert capacity == 15  # ceil(0.75 · 40 · 2 / 4)
    keep = np.asarray(capacity_keep(jnp.asarray(indices, jnp.int32), jnp.asarray(mask), experts, capacity))
    np.testing.assert_array_equal(keep, _queue_keep(indices, mask, experts, capacity))
    counts = np.bincount(indices[mask].ravel(), minlength=experts)
    assert (~keep[mask]).sum() == np.maximum(counts - capacity, 0).sum() > 0
    assert not keep[~mask].any()
    dropless = capacity_keep(jnp.asarray(indices, jnp.int32), jnp.asarray(mask), experts, None)
    np.testing.assert_array_equal(dropless, np.broadcast_to(mask[:, None], indices.shape))


def test_expert_capacity_rejects_a_non_positive_factor():
    assert expert_capacity(10, 2, 4, None) is None
    with pytest.raises(ValueError, match="capacity_factor must be a positive number, got 0"):
        expert_capacity(10, 2, 4, 0)


def _layer_pair(capacity_factor, activation):
    layers = []
    for implementation in ("reference", "xla"):
        config = MoEConfig(num_experts=GROUPS, top_k=2, implementation=implementation,
                           capacity_factor=capacity_factor)
        layers.append(MoEFeedForward(K_IN, 12, config, activation=activation, rngs=nnx.Rngs(3)))
    return layers


@pytest.mark.parametrize(("capacity_factor", "activation"), [(None, "swiglu"), (0.5, "gelu")])
def test_layer_reference_and_xla_paths_give_the_same_outputs_and_gradients(capacity_factor, activation):
    dense, ragged = _layer_pair(capacity_factor, activation)
    x = jax.random.normal(jax.random.key(4), (2, 7, K_IN))
    mask = jnp.ones((2, 7), jnp.bool_).at[1, 5:].set(False)
    readout = jax.random.normal(jax.random.key(5), (2, 7, K_IN))

    @nnx.jit
    def loss_and_grads(layer, x):
        def loss(layer, x):
            y, aux = layer(x, mask=mask)
            return jnp.sum(y * readout) + aux["loss"], (y, aux)

        return nnx.value_and_grad(loss, argnums=(0, 1), has_aux=True)(layer, x)

    (loss_d, (y_d, aux_d)), grads_d = loss_and_grads(dense, x)
    (loss_r, (y_r, aux_r)), grads_r = loss_and_grads(ragged, x)
    np.testing.assert_allclose(y_r, y_d, **TOLERANCE)
    np.testing.assert_allclose(loss_r, loss_d, **TOLERANCE)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, **TOLERANCE), grads_r, grads_d)
    assert float(jnp.abs(grads_d[0]["router"]["kernel"][...]).max()) > 0
    assert not np.asarray(y_d)[1, 5:].any()  # padding gets no expert
    np.testing.assert_allclose(jnp.sum(aux_d["load"]), 1.0, atol=1e-6)
    if capacity_factor is None:
        assert float(aux_d["dropped"]) == 0
    else:
        assert float(aux_d["dropped"]) > 0
        np.testing.assert_allclose(aux_r["dropped"], aux_d["dropped"])


def test_layer_rejects_a_mask_of_the_wrong_shape():
    layer = _layer_pair(None, "swiglu")[0]
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 7\)"):
        layer(jnp.zeros((2, 7, K_IN)), mask=jnp.ones((2, 6), jnp.bool_))
