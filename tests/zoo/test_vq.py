"""FSQ, VQ and codebook usage (icml26zoo.vq): exact round trips, the grid, straight-through gradients, the nearest
code, the two VQ losses, usage statistics on a known assignment, and bad input named."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.vq import (
    FSQ,
    VectorQuantizer,
    code_counts,
    codebook_size,
    fsq_bound,
    fsq_codes_to_indices,
    fsq_indices_to_codes,
    fsq_quantize,
    nearest_code,
    usage_statistics,
    vector_quantize,
)

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

MIXED = (8, 5, 5, 5)  # the presets' levels: an even channel and odd ones, 1000 codes


def official_quantize(z: np.ndarray, levels) -> np.ndarray:
    """The formula of rdilip/apt apt/fsq.py (commit 812ff93492d6dd630b2af51db64755993b19737c), FSQ.bound then
    FSQ.quantize, restated in float64 NumPy for this test: half_l = (l − 1)(1 − 1e-3)/2, offset = 0.5 for even l,
    shift = tan(offset / half_l), bound = tanh(z + shift)·half_l − offset, code = round(bound) / (l // 2)."""
    levels = np.asarray(levels, np.float64)
    half_l = (levels - 1) * (1 - 1e-3) / 2
    offset = np.where(levels % 2 == 0, 0.5, 0.0)
    bounded = np.tanh(z + np.tan(offset / half_l)) * half_l - offset
    return np.round(bounded) / (levels // 2)


def test_fsq_matches_the_official_formula_and_the_grid():
    z = 3.0 * np.random.default_rng(0).normal(size=(64, 4))
    for levels in (MIXED, (2, 3, 4, 7)):
        codes = np.asarray(fsq_quantize(jnp.asarray(z, jnp.float32), levels))
        np.testing.assert_array_equal(codes, official_quantize(z, levels).astype(np.float32))
        half = np.asarray(levels) // 2
        assert np.all(np.abs(codes) <= 1.0)
        np.testing.assert_allclose(codes * half, np.round(codes * half), atol=1e-6)  # on the grid {k / ⌊l/2⌋}
    # z = 0 maps to a grid point; an even channel's value range is asymmetric: l = 8 gives {−1, ..., 0.75}.
    np.testing.assert_allclose(fsq_quantize(jnp.zeros(4), MIXED), official_quantize(np.zeros(4), MIXED), atol=0)
    extremes = np.asarray(fsq_quantize(jnp.array([[-50.0] * 4, [50.0] * 4]), MIXED))
    np.testing.assert_array_equal(extremes, [[-1, -1, -1, -1], [0.75, 1, 1, 1]])


def test_fsq_index_round_trip_over_every_code():
    for levels in (MIXED, (2, 3)):
        size = codebook_size(levels)
        indices = jnp.arange(size)
        codes = fsq_indices_to_codes(indices, levels)
        assert codes.shape == (size, len(levels))
        np.testing.assert_array_equal(np.asarray(fsq_codes_to_indices(codes, levels)), np.arange(size))
        assert len({tuple(c) for c in np.asarray(codes).tolist()}) == size  # every code distinct
    # The mixed-radix basis (1, 8, 40, 200): channel 0 is the fastest digit.
    np.testing.assert_array_equal(fsq_indices_to_codes(jnp.array([1, 8]), MIXED),
                                  [[-0.75, -1, -1, -1], [-1, -0.5, -1, -1]])


def test_fsq_straight_through_gradient_is_the_identity_of_the_rounding():
    z = jnp.asarray(np.random.default_rng(1).normal(size=(5, 4)), jnp.float32)
    cotangent = jnp.asarray(np.random.default_rng(2).normal(size=(5, 4)), jnp.float32)
    got = jax.grad(lambda x: jnp.sum(fsq_quantize(x, MIXED) * cotangent))(z)
    # Without the rounding: bound / ⌊l/2⌋, whose gradient the straight-through estimator must give.
    want = jax.grad(lambda x: jnp.sum(fsq_bound(x, MIXED) / (np.asarray(MIXED) // 2).astype(np.float32) * cotangent))(z)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert float(jnp.min(jnp.abs(got))) > 0


def test_fsq_module_shapes_and_gradient_to_the_input_projection():
    x = jnp.asarray(np.random.default_rng(3).normal(size=(2, 3, 6)), jnp.float32)

    @jax.jit
    def run():  # one compiled program: eager NNX initialization compiles every op on its own
        module = FSQ(6, MIXED, rngs=nnx.Rngs(0))
        out, codes, indices = module(x)
        grads = nnx.grad(lambda m: jnp.sum(m(x)[0] ** 2))(module)
        return out, codes, indices, module.decode_indices(indices), jnp.sum(jnp.abs(grads.project_in.kernel[...]))

    out, codes, indices, decoded, gradient = run()
    assert out.shape == (2, 3, 6) and codes.shape == (2, 3, 4) and indices.shape == (2, 3)
    np.testing.assert_allclose(decoded, out, atol=1e-6)
    assert float(gradient) > 0


def test_vq_nearest_code_losses_and_straight_through():
    codebook = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    z = jnp.array([[0.1, 0.2], [0.9, -0.3], [0.2, 1.4], [0.6, 0.0]])
    c = jnp.arange(8.0).reshape(4, 2)

    @jax.jit
    def run():
        return {"nearest": nearest_code(z, codebook), "out": vector_quantize(z, codebook, commitment_cost=0.25),
                "masked": vector_quantize(z, codebook, weights=jnp.array([1.0, 1.0, 1.0, 0.0])),
                "straight": jax.grad(lambda x: jnp.sum(vector_quantize(x, codebook).quantized * c))(z),
                "codebook_to_z": jax.grad(lambda x: vector_quantize(x, codebook).codebook_loss)(z),
                "commitment_to_e": jax.grad(lambda e: vector_quantize(z, e).commitment_loss)(codebook),
                "module": VectorQuantizer(16, 2, rngs=nnx.Rngs(0))(z).quantized}

    got = run()
    np.testing.assert_array_equal(got["nearest"], [0, 1, 2, 1])  # 0.6 is nearer 1 than 0
    out, chosen = got["out"], np.asarray(codebook)[[0, 1, 2, 1]]
    np.testing.assert_allclose(out.quantized, chosen, atol=1e-7)
    mse = np.mean((np.asarray(z) - chosen) ** 2)
    np.testing.assert_allclose([out.codebook_loss, out.commitment_loss, out.loss], [mse, mse, 1.25 * mse], rtol=1e-6)
    # Padding rows (weight 0) leave the losses.
    np.testing.assert_allclose(got["masked"].commitment_loss, np.mean((np.asarray(z) - chosen)[:3] ** 2), rtol=1e-6)
    # Straight through: d(Σ c·quantized)/dz = c; the codebook loss moves only the codes, commitment only z.
    np.testing.assert_allclose(got["straight"], c)
    assert float(jnp.abs(got["codebook_to_z"]).sum()) == 0 and float(jnp.abs(got["commitment_to_e"]).sum()) == 0
    assert got["module"].shape == (4, 2)


def test_usage_statistics_on_a_known_assignment():
    indices = jnp.array([[0, 0, 1, 3], [3, 3, 3, 5]])
    weights = jnp.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])  # the 5 is padding
    np.testing.assert_array_equal(code_counts(indices, 6, weights), [2, 1, 0, 4, 0, 0])
    stats = usage_statistics(indices, 6, weights)
    p = np.array([2, 1, 4]) / 7
    np.testing.assert_allclose(stats["perplexity"], np.exp(-np.sum(p * np.log(p))), rtol=1e-6)
    assert int(stats["used_codes"]) == 3 and int(stats["dead_codes"]) == 3
    np.testing.assert_allclose(usage_statistics(jnp.arange(8), 8)["perplexity"], 8.0, rtol=1e-6)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: fsq_quantize(jnp.zeros(2), (8, 1)), r"levels\[1\]"),
    (lambda: codebook_size(()), "levels"),
    (lambda: FSQ(4, (5, 1.5), rngs=nnx.Rngs(0)), r"levels\[1\]"),
    (lambda: fsq_quantize(jnp.zeros(3), MIXED), "z must have shape"),
    (lambda: VectorQuantizer(1, 4, rngs=nnx.Rngs(0)), "num_codes"),
    (lambda: nearest_code(jnp.zeros((2, 3)), jnp.zeros((1, 3))), "number of codes"),
    (lambda: code_counts(jnp.zeros(3, jnp.int32), 0), "num_codes"),
    (lambda: vector_quantize(jnp.zeros((2, 3)), jnp.zeros((4, 3)), commitment_cost=-1.0), "commitment_cost"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
