"""The protein tokenizer (icml26zoo.bio) and its data: aligned RMSD, nested-dropout prefixes, decoding reads only
the kept prefix, padding never matters, the synthetic chains' geometry, and bad input named."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.bio import aligned_rmsd, nested_dropout_keep
from icml26zoo.bio.structure import prefix_mask
from icml26zoo.geometric import random_rotation
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.registry import OBJECTIVES
from icml26zoo.train.data.backbones import CA_STEP, BackboneOptions, generate, has_clash

pytestmark = pytest.mark.usefixtures("fast_compile")

N_TOKENS = 4


def _config(**options) -> ModelConfig:
    pairs = {"levels": (4, 3), "n_tokens": N_TOKENS, "decoder_layers": 1} | options
    return ModelConfig(name="protein_tokenizer", d_model=16, num_layers=1, num_heads=2, mlp_dim=32, max_seq_len=12,
                       model_options=tuple(pairs.items()))


@pytest.fixture(scope="module")
def chains():
    points, weights = generate(BackboneOptions(min_length=8, max_length=12, train_examples=3, eval_examples=1), 3,
                               np.random.SeedSequence(5))
    return points, weights


def test_chains_are_protein_like(chains):
    points, weights = chains
    for row, mask in zip(points, weights, strict=True):
        chain = row[mask > 0].astype(np.float64) * 10  # Å
        steps = np.linalg.norm(np.diff(chain, axis=0), axis=1)
        np.testing.assert_allclose(steps, CA_STEP, atol=0.05)
        assert not has_clash(chain)
        np.testing.assert_allclose(chain.mean(axis=0), 0, atol=1e-4)
        assert np.all(row[mask == 0] == 0) and np.all(mask[: int(mask.sum())] == 1)


def test_aligned_rmsd_ignores_rigid_motion_and_padding_but_not_mirroring(chains):
    points, weights = map(jnp.asarray, chains)
    rotation = random_rotation(jax.random.key(0), (3,))
    moved = jnp.einsum("bij,bnj->bni", rotation, points) + jnp.array([0.3, -1.0, 2.0]) * weights[..., None]
    moved = moved + 50.0 * (weights == 0).astype(jnp.float32)[..., None]  # padding values must not matter
    np.testing.assert_allclose(aligned_rmsd(moved, points, weights), 0, atol=1e-4)
    mirrored = points * jnp.array([1.0, 1.0, -1.0])
    assert float(jnp.min(aligned_rmsd(mirrored, points, weights))) > 0.05  # a reflection is not a rotation
    noisy = points + 0.01 * jax.random.normal(jax.random.key(1), points.shape) * weights[..., None]
    assert 0 < float(jnp.max(aligned_rmsd(noisy, points, weights))) < 0.03


def test_nested_dropout_draws_prefixes_in_the_papers_range():
    lengths = np.array([2, 3, 8, 40] * 500)
    weights = jnp.asarray((np.arange(40)[None] < lengths[:, None]).astype(np.float32))
    keep = np.asarray(nested_dropout_keep(jax.random.key(0), weights, 32, drop_all_probability=0.05))
    kept = keep > 0
    assert np.all(keep[kept] >= 1) and np.all(keep[kept] < np.minimum(lengths, 32)[kept])
    assert set(keep[(lengths == 40) & kept]) == set(range(1, 32))  # k < min(L, n_tokens): 32 itself never drawn
    assert 0.03 < np.mean(keep == 0) < 0.07 and np.all(keep[lengths == 2] <= 1)
    mask = np.asarray(prefix_mask(jnp.asarray(keep[:8]), 32))
    assert np.all(np.diff(mask, axis=1) <= 0) and np.all(mask.sum(1) == keep[:8])  # monotone prefix masks


def test_decoding_reads_only_the_kept_prefix_and_padding_never_matters(chains):
    points, weights = map(jnp.asarray, chains)
    features = jnp.zeros(points.shape[:2] + (0,))

    @jax.jit
    def run():
        model = build_model(_config(), rngs=nnx.Rngs(0))
        tokens, codes, indices = model.encode(points, weights)
        keep = jnp.array([1, 2, 3])

        def decoded(tokens):
            return model.decode(tokens, weights, keep)

        # d(output)/d(token t of row b) must vanish for t >= keep_b: those tokens are zeroed.
        sensitivity = jax.jacrev(lambda t: jnp.sum(decoded(t) ** 2, axis=(1, 2)))(tokens)  # [B, B, T, C]
        per_token = jnp.abs(jnp.einsum("bbtc->bt", sensitivity))
        padded = points + 7.0 * (weights == 0).astype(jnp.float32)[..., None]
        return {"out": model(points, features, weights), "codes": codes, "indices": indices,
                "per_token": per_token, "padded": model(padded, features, weights),
                "full": model.decode(tokens, weights), "all_kept": model.decode(tokens, weights, jnp.full(3, 99))}

    got = run()
    assert got["out"].shape == points.shape and got["codes"].shape == (3, N_TOKENS, 2)
    assert got["indices"].shape == (3, N_TOKENS) and int(jnp.max(got["indices"])) < 12
    per_token = np.asarray(got["per_token"])
    for row, keep in enumerate((1, 2, 3)):
        assert np.all(per_token[row, keep:] == 0) and np.all(per_token[row, :keep] > 0)
    real = np.asarray(weights) > 0
    np.testing.assert_allclose(np.asarray(got["padded"])[real], np.asarray(got["out"])[real], atol=1e-5)
    np.testing.assert_allclose(got["full"], got["all_kept"], atol=1e-6)  # keep is capped at the tokens that exist


def test_the_vq_bottleneck_trains_its_codebook_through_the_objective(chains):
    points, weights = map(jnp.asarray, chains)
    batch = {"points": points, "features": jnp.zeros(points.shape[:2] + (0,)), "weights": weights, "targets": points}
    objective = OBJECTIVES.get("protein_reconstruction")

    @jax.jit
    def run():
        model = build_model(_config(bottleneck="vq", num_codes=16), rngs=nnx.Rngs(0))
        (loss, metrics), grads = nnx.value_and_grad(lambda m: objective(m, batch, jax.random.key(0)),
                                                    has_aux=True)(model)
        _, _, indices = model.encode(points, weights)
        gradient = {name: jnp.sum(jnp.abs(leaf)) for name, leaf in
                    (("codebook", grads.vq.codebook[...]), ("encoder", grads.vq_in.kernel[...]))}
        return loss, metrics, gradient["codebook"], gradient["encoder"], indices

    loss, metrics, codebook_gradient, encoder_gradient, indices = run()
    assert np.isfinite(float(loss)) and float(metrics["bottleneck/loss"]) > 0
    # The codebook loss moves the codes; the straight-through estimator reaches the projection before them.
    assert float(codebook_gradient) > 0 and float(encoder_gradient) > 0
    assert 0 <= int(jnp.min(indices)) and int(jnp.max(indices)) < 16 and 1 <= float(metrics["fsq/used_codes"]) <= 16


@pytest.mark.parametrize(("options", "name"), [
    ({"levels": (8, 1)}, r"levels'\[1\]"),
    ({"levels": ()}, "levels"),
    ({"n_tokens": 0}, "n_tokens"),
    ({"min_tokens": N_TOKENS}, "min_tokens"),
    ({"drop_all_probability": 1.5}, "drop_all_probability"),
    ({"bottleneck": "pq"}, "bottleneck"),
    ({"bottleneck": "vq", "num_codes": 1}, "num_codes"),
])
def test_bad_options_name_the_argument(options, name):
    with pytest.raises(ValueError, match=name):
        build_model(_config(**options), rngs=nnx.Rngs(0))


def test_nan_coordinates_and_long_chains_are_named(chains):
    model = nnx.eval_shape(lambda: build_model(_config(), rngs=nnx.Rngs(0)))  # the checks run before any compute
    points, weights = (np.array(a) for a in chains)
    points[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match=r"points must be finite; row 1, residue 2"):
        model.encode(jnp.asarray(points), jnp.asarray(weights))
    long = jnp.zeros((1, 13, 3))
    with pytest.raises(ValueError, match="max_seq_len"):
        model.encode(long, jnp.ones((1, 13)))
    with pytest.raises(ValueError, match="max_length"):
        BackboneOptions(min_length=20, max_length=10)
