"""SpikeNet: LIF trace, spikes and surrogate, SVMT aggregation, FPS/k-NN, symmetries, bad input.

One small model (2 stages, widths 8-16, k = 8, T = 2, DSSR "gated") is compiled once for the module: the
symmetry checks, padding, the all-padding row and the firing rates all read the same compiled program
(`equivariance_errors` and `firing_rates` share it at the same batch shape).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.geometric import spikenet
from icml26zoo.geometric.spikenet_geometry import farthest_point_sampling, knn, sorted_centroid
from icml26zoo.geometric.spikenet_layers import SpikeContext, vector_mask_aggregate
from icml26zoo.geometric.spikenet_neurons import LIFParams, lif_step, lif_trace, spike
from icml26zoo.models import ModelConfig, build_model, language_model_names

pytestmark = pytest.mark.usefixtures("fast_compile")

# In-group bound: float32 rounding of the logits. The model sees relative coordinates only and its reductions
# are order-independent, so the measured errors are exactly 0; a translation could in principle flip a spike
# whose membrane sits within rounding of the threshold (see equivariance_errors).
IN_GROUP_BOUND = 1e-5
NUM_POINTS, NUM_REAL_SHORT = 32, 20


def small_config(**options) -> ModelConfig:
    pairs = {"num_outputs": 5, "num_neighbors": 8, **options}
    return ModelConfig(name="spikenet", d_model=8, num_layers=2, num_heads=2, model_options=tuple(pairs.items()))


@pytest.fixture(scope="module")
def model():
    return build_model(small_config(), rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def clouds():
    """Two point clouds of 32 points, the second with 12 padding rows: (points, features, weights)."""
    points = jax.random.normal(jax.random.key(1), (2, NUM_POINTS, 3), jnp.float32)
    weights = jnp.ones((2, NUM_POINTS), jnp.float32).at[1, NUM_REAL_SHORT:].set(0.0)
    return points, jnp.zeros((2, NUM_POINTS, 0), jnp.float32), weights


@pytest.fixture(scope="module")
def symmetry(model, clouds):
    return spikenet.equivariance_errors(model, *clouds, jax.random.key(2))


def test_lif_reproduces_the_hand_computed_trace():
    trace = jax.jit(lif_trace, static_argnums=1)
    inputs = np.full((5, 2), 0.6, np.float32)
    inputs[0, 1] = 1.0
    spikes, charged, potentials = trace(inputs, LIFParams(tau=2.0, v_threshold=0.5))
    np.testing.assert_array_equal(spikes[:, 0], [0.0, 0.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(charged[:4, 0], [0.3, 0.45, 0.525, 0.3], atol=1e-7)
    np.testing.assert_allclose(potentials[:3, 0], [0.3, 0.45, 0.0], atol=1e-7)
    # One step (T = 1) of X = 1 charges H = 0.5 = V_th exactly: SpikingJelly fires at equality.
    np.testing.assert_array_equal(spikes[0], [0.0, 1.0])


def test_spikes_are_binary_and_the_surrogate_is_the_sigmoid_derivative():
    excess = jax.random.normal(jax.random.key(0), (64,), jnp.float32)
    assert set(np.unique(np.asarray(spike(excess, 4.0))).tolist()) == {0.0, 1.0}
    for alpha in (4.0, 2.0):
        at_threshold = jax.grad(lambda x, a=alpha: spike(x, a))(0.0)
        np.testing.assert_allclose(at_threshold, alpha / 4, rtol=1e-6)
    sig = 1.0 / (1.0 + np.exp(-4.0))
    # float32 against float64: 1 - sigma(4) = 0.018 keeps ~2 fewer digits than sigma itself.
    np.testing.assert_allclose(jax.grad(lambda x: spike(x, 4.0))(1.0), 4.0 * sig * (1.0 - sig), rtol=1e-5)


def test_detach_reset_stops_the_gradient_through_the_reset():
    # X = 1 from V = 0 charges H = 0.5 = V_th: the neuron fires and resets.
    def reset_potential(inputs, detach):
        params = LIFParams(detach_reset=detach)
        return lif_step(inputs, jnp.asarray(0.0), params)[2]

    grad = jax.jit(jax.grad(reset_potential), static_argnums=1)
    assert float(grad(1.0, True)) == 0.0
    # Without detaching: dV/dX = (1 - S - H dS/dH) / tau = (0 - 0.5 * 1) / 2.
    np.testing.assert_allclose(grad(1.0, False), -0.25, rtol=1e-6)


def test_mask_of_ones_averages_the_valid_neighbours_and_a_binary_mask_is_a_select():
    rng = np.random.default_rng(3)
    values = rng.normal(size=(2, 1, 3, 4, 5)).astype(np.float32)
    valid = np.asarray([[[True, True, True, True], [True, True, False, False], [True, False, False, False]]])
    binary = rng.random(values.shape) < 0.5
    aggregate = jax.jit(vector_mask_aggregate)
    mean = aggregate(np.ones_like(values), values, valid)
    for point, count in enumerate((4, 2, 1)):
        np.testing.assert_allclose(mean[:, 0, point], values[:, 0, point, :count].mean(axis=1), rtol=1e-6)
    selected = np.where(binary & valid[None, ..., None], values, 0.0).sum(axis=3) / np.asarray([4.0, 2.0, 1.0])[
        None, None, :, None]
    np.testing.assert_allclose(aggregate(binary.astype(np.float32), values, valid), selected, rtol=1e-6)


def test_svmt_vector_mask_is_binary(model):
    relation = jax.random.randint(jax.random.key(4), (2, 1, 6, 8, 8), -1, 3).astype(jnp.float32)
    ctx = SpikeContext(model.options.lif)
    mask = nnx.jit(lambda block, rel: block.vector_mask(rel, jnp.ones((1, 6, 8), bool), ctx))(model.blocks[0], relation)
    assert set(np.unique(np.asarray(mask)).tolist()) <= {0.0, 1.0}


def test_knn_breaks_ties_by_index_and_skips_padding():
    points = jnp.asarray([[[0.0, 0, 0], [1, 0, 0], [-1, 0, 0], [0, 2, 0], [0.1, 0, 0]]], jnp.float32)
    mask = jnp.asarray([[True, True, True, True, False]])
    index, valid = knn(points[:, :1], points, mask, 5)
    np.testing.assert_array_equal(index[0, 0, :4], [0, 1, 2, 3])
    np.testing.assert_array_equal(valid[0, 0], [True, True, True, True, False])


def test_fps_starts_farthest_from_the_centroid_and_ignores_the_order():
    points = np.random.default_rng(5).normal(size=(1, 12, 3)).astype(np.float32)
    mask = np.arange(12)[None, :] < 10
    sample = jax.jit(farthest_point_sampling, static_argnums=2)
    index, valid = sample(points, mask, 4)
    real = points[0, :10]
    assert int(index[0, 0]) == int(np.argmax(np.sum((real - real.mean(0)) ** 2, axis=1)))
    order = np.random.default_rng(0).permutation(12)
    permuted_index, _ = sample(points[:, order], mask[:, order], 4)
    np.testing.assert_array_equal(points[0, np.asarray(index[0])], points[0, order][np.asarray(permuted_index[0])])
    centroid = jax.jit(sorted_centroid)
    np.testing.assert_array_equal(centroid(points, mask), centroid(points[:, order], mask[:, order]))
    np.testing.assert_array_equal(valid, [[True, True, True, True]])
    np.testing.assert_array_equal(sample(points, np.arange(12)[None, :] < 3, 4)[1], [[True, True, True, False]])


def test_invariant_to_permutations_and_translations_but_not_rotations(symmetry):
    assert symmetry["permutation"] <= IN_GROUP_BOUND, symmetry
    assert symmetry["translation"] <= IN_GROUP_BOUND, symmetry
    assert symmetry["in_group"] == max(symmetry["permutation"], symmetry["translation"])
    assert symmetry["out_of_group"] > 1e3 * IN_GROUP_BOUND, symmetry


def test_padding_is_ignored_rates_lie_in_the_unit_interval(model, clouds, symmetry):
    points, features, weights = clouds
    garbage = points.at[1, NUM_REAL_SHORT:].set(50.0)
    # The same batch shape as equivariance_errors' stacked call (4 variants of 2 clouds): one compiled program.
    batch_points = jnp.concatenate([points, garbage, points, jnp.zeros_like(points)])
    batch_weights = jnp.concatenate([weights, weights, weights, jnp.zeros_like(weights)])
    batch_features = jnp.zeros((8, NUM_POINTS, 0), jnp.float32)
    logits, rates = spikenet._forward_with_rates(model, batch_points, batch_features, batch_weights)
    assert logits.shape == (8, 5) and logits.dtype == jnp.float32
    np.testing.assert_allclose(logits[3], logits[1], atol=1e-6)
    assert np.all(np.isfinite(np.asarray(logits[6:]))), "an all-padding row (eval padding) must stay finite"
    real_batch = jnp.concatenate([points, garbage, points, points])
    reported = spikenet.firing_rates(model, real_batch, batch_features, jnp.concatenate([weights] * 4))
    assert {"stem", "svmt0.mask", "svmt1.gate", "down1.hidden", "head.input"} <= set(reported)
    assert all(0.0 < rate < 1.0 for rate in reported.values()), reported
    assert set(rates) == set(reported)


def test_registered_outside_the_language_models(model):
    assert type(model).LANGUAGE_MODEL is False and "spikenet" not in language_model_names()
    assert [block.dssr for block in model.blocks] == ["gated", "gated"]
    assert model.head.kernel.shape == (16, 5)


def test_one_time_step_and_the_membrane_shortcut_keep_the_symmetries(clouds):
    single = build_model(ModelConfig(name="spikenet", d_model=8, num_layers=1, num_heads=2, model_options=(
        ("num_outputs", 5), ("num_neighbors", 8), ("time_steps", 1), ("dssr", "membrane"))), rngs=nnx.Rngs(1))
    assert single.blocks[0].gate is None and len(single.downs) == 0
    errors = spikenet.equivariance_errors(single, *clouds, jax.random.key(6))
    assert errors["in_group"] <= IN_GROUP_BOUND and errors["out_of_group"] > 1e3 * IN_GROUP_BOUND, errors


@pytest.mark.parametrize(("options", "match"), [
    ({"readout": "point"}, "readout"),
    ({"dssr": "dense"}, "dssr"),
    ({"tau": 1.0}, "tau"),
    ({"v_threshold": -0.1}, "v_threshold"),
    ({"time_steps": 0}, "time_steps"),
    ({"unknown": 1}, "unknown"),
])
def test_bad_options_name_model_options(options, match):
    with pytest.raises(ValueError, match=f"model.model_options.*{match}"):
        build_model(small_config(**options), rngs=nnx.Rngs(0))


def test_bad_inputs_name_the_argument(model, clouds):
    points, features, weights = clouds
    with pytest.raises(ValueError, match="points must be finite"):
        model(points.at[0, 3, 1].set(jnp.nan), features, weights)
    with pytest.raises(ValueError, match="weights must mark at least one real point"):
        model(points, features, weights.at[1].set(0.0))
    with pytest.raises(ValueError, match=r"points must have shape \[B, N, 3\]"):
        model(points[..., :2], features, weights)
    with pytest.raises(ValueError, match=r"features must have shape \[B, N, 0\]"):
        model(points, jnp.ones((2, NUM_POINTS, 2), jnp.float32), weights)
    with pytest.raises(ValueError, match="weights must be a float array"):
        model(points, features, weights[0])
