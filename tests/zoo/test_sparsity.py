"""Pruning-at-initialisation masks and graphon statistics (Pham, Ta, Tran-Thanh, arXiv 2602.06675)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.flatten_util import ravel_pytree

from icml26zoo.models import ModelConfig, build_model
from icml26zoo.sparsity import (
    apply_mask,
    cut_norm,
    fit_factorised_saliency,
    graphon_distances,
    grasp_hessian_gradient,
    grasp_mask,
    lm_loss_fn,
    magnitude_mask,
    mask_statistics,
    masked_optimizer,
    matrix_statistics,
    method_graphon,
    predicted_graphon,
    random_mask,
    snip_mask,
    snip_scores,
)

pytestmark = pytest.mark.usefixtures("fast_compile")


# A toy model with the zoo's layout: an embedding, 3 scanned layers stacked [L, ...] with biases and
# norm scales (never pruned), and an output kernel. Prunable sizes: 72 + 3 x 36 + 24 = 204.
def _toy_params(seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 4)
    return {
        "embed": {"embedding": jax.random.normal(k[0], (12, 6))},
        "layers": {"dense": {"kernel": 0.5 * jax.random.normal(k[1], (3, 6, 6)), "bias": 0.1 * jnp.ones((3, 6))},
                   "norm": {"scale": jnp.ones((3, 6))}},
        "out": {"kernel": jax.random.normal(k[2], (6, 4))},
    }


def _toy_loss(params, batch):
    h = params["embed"]["embedding"][batch["tokens"]]
    for layer in range(3):
        h = jnp.tanh(h @ params["layers"]["dense"]["kernel"][layer] + params["layers"]["dense"]["bias"][layer])
        h = h * params["layers"]["norm"]["scale"][layer]
    logits = h @ params["out"]["kernel"]
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]))


def _toy_batches():
    k1, k2 = jax.random.split(jax.random.PRNGKey(7))
    return [{"tokens": jax.random.randint(k, (16,), 0, 12), "labels": jax.random.randint(k, (16,), 0, 4) % 4}
            for k in (k1, k2)]


def _method(name, params, sparsity, scope):
    if name == "random":
        return random_mask(params, sparsity=sparsity, key=jax.random.PRNGKey(3), scope=scope)
    if name == "magnitude":
        return magnitude_mask(params, sparsity=sparsity, scope=scope)
    if name == "snip":
        return snip_mask(params, sparsity=sparsity, loss_fn=_toy_loss, batch=_toy_batches()[0], scope=scope)
    return grasp_mask(params, sparsity=sparsity, loss_fn=_toy_loss, batches=_toy_batches(), scope=scope)


@pytest.mark.parametrize("method", ["random", "magnitude", "snip", "grasp"])
@pytest.mark.parametrize("sparsity", [0.0, 0.7])
def test_exact_sparsity_global_and_layerwise(method, sparsity):
    params = _toy_params()
    density = 1.0 - sparsity
    glob = _method(method, params, sparsity, "global")
    kept = sum(int(np.sum(m)) for m in jax.tree.leaves(glob) if not isinstance(m, bool))
    assert kept == round(density * 204)
    layer = _method(method, params, sparsity, "layerwise")
    assert int(np.sum(layer["embed"]["embedding"])) == round(density * 72)
    assert int(np.sum(layer["out"]["kernel"])) == round(density * 24)
    per_slice = np.asarray(layer["layers"]["dense"]["kernel"]).reshape(3, -1).sum(axis=1)
    np.testing.assert_array_equal(per_slice, [round(density * 36)] * 3)  # per scanned layer, not per leaf
    for mask in (glob, layer):  # biases and norm scales are never pruned
        assert mask["layers"]["dense"]["bias"] is True and mask["layers"]["norm"]["scale"] is True
        assert mask["embed"]["embedding"].dtype == jnp.bool_


def test_ties_are_broken_by_tree_order():
    params = {"a": {"kernel": jnp.ones((4, 5))}, "b": {"kernel": -jnp.ones((3, 5))}}  # every |w| equal
    mask = magnitude_mask(params, sparsity=0.6)  # keep round(0.4 * 35) = 14: the first 14 in flatten order
    flat = np.concatenate([np.ravel(mask["a"]["kernel"]), np.ravel(mask["b"]["kernel"])])
    np.testing.assert_array_equal(flat, np.arange(35) < 14)


def _lm(scan_layers):
    cfg = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=2, num_kv_heads=1, mlp_dim=64,
                      scan_layers=scan_layers, max_seq_len=16)
    graphdef, state = nnx.split(build_model(cfg, rngs=nnx.Rngs(0)), nnx.Param)
    return graphdef, nnx.to_pure_dict(state)


def test_layerwise_on_a_scanned_lm_matches_the_unscanned_layers():
    _, params = _lm(scan_layers=False)
    stacked = dict(params, layers=jax.tree.map(lambda *xs: jnp.stack(xs), params["layers"][0], params["layers"][1]))
    listed = magnitude_mask(params, sparsity=0.75, scope="layerwise")
    scanned = magnitude_mask(stacked, sparsity=0.75, scope="layerwise")
    for layer in (0, 1):
        jax.tree.map(lambda a, b, i=layer: np.testing.assert_array_equal(a if a is True else np.asarray(a)[i], b),
                     scanned["layers"], listed["layers"][layer])
    kernel = np.asarray(scanned["layers"]["mlp"]["up"]["kernel"])  # [2, 32, 64]
    np.testing.assert_array_equal(kernel.reshape(2, -1).sum(axis=1), [512, 512])


def test_random_mask_is_a_function_of_the_key():
    params = _toy_params()
    a, b = (random_mask(params, sparsity=0.5, key=jax.random.PRNGKey(11)) for _ in range(2))
    c = random_mask(params, sparsity=0.5, key=jax.random.PRNGKey(12))
    jax.tree.map(np.testing.assert_array_equal, a, b)
    assert not np.array_equal(a["layers"]["dense"]["kernel"], c["layers"]["dense"]["kernel"])


def _prunable_flat(tree):
    return np.concatenate([np.ravel(tree["embed"]["embedding"]), np.ravel(tree["layers"]["dense"]["kernel"]),
                           np.ravel(tree["out"]["kernel"])])


def test_magnitude_keeps_exactly_the_largest_weights():
    params = _toy_params()
    mask = magnitude_mask(params, sparsity=0.8)
    w, m = np.abs(_prunable_flat(params)), _prunable_flat(mask)
    assert m.sum() == round(0.2 * 204) and w[m].min() > w[~m].max()


def test_snip_on_a_linear_model_equals_the_closed_form():
    # L(θ) = |Xθ − y|² / 2n, so ∂L/∂θ = Xᵀ(Xθ − y)/n and SNIP's score is |θ ⊙ Xᵀ(Xθ − y)/n|.
    kx, ky, kw = jax.random.split(jax.random.PRNGKey(1), 3)
    x, y = jax.random.normal(kx, (32, 10)), jax.random.normal(ky, (32, 3))
    params = {"linear": {"kernel": jax.random.normal(kw, (10, 3)), "bias": jnp.zeros(3)}}

    def loss(p, batch):
        return 0.5 * jnp.mean(jnp.sum((batch[0] @ p["linear"]["kernel"] - batch[1]) ** 2, axis=-1))

    theta, xn, yn = (np.asarray(a, np.float64) for a in (params["linear"]["kernel"], x, y))
    expected = np.abs(theta * (xn.T @ (xn @ theta - yn) / 32))
    np.testing.assert_allclose(snip_scores(params, loss, (x, y))["linear"]["kernel"], expected, rtol=1e-5)
    mask = snip_mask(params, sparsity=0.5, loss_fn=loss, batch=(x, y))["linear"]["kernel"]
    assert np.asarray(mask).sum() == 15 and expected[np.asarray(mask)].min() > expected[~np.asarray(mask)].max()


def _mlp_loss(params, batch, temperature=200.0):
    h = jnp.tanh(batch["x"] @ params["l1"]["kernel"] + params["l1"]["bias"])
    logits = (h @ params["l2"]["kernel"]) / temperature  # GraSP's temperature T = 200
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]))


def test_grasp_hvp_matches_the_dense_hessian_and_keeps_the_smallest_score():
    k = jax.random.split(jax.random.PRNGKey(2), 4)
    params = {"l1": {"kernel": jax.random.normal(k[0], (3, 5)), "bias": 0.1 * jnp.ones(5)},
              "l2": {"kernel": jax.random.normal(k[1], (5, 4))}}
    x = jax.random.normal(k[2], (8, 3))
    y = jax.random.randint(k[3], (8,), 0, 4)
    halves = [{"x": x[:4], "y": y[:4]}, {"x": x[4:], "y": y[4:]}]
    theta, unravel = ravel_pytree(params)
    dense = [(lambda t, b=b: _mlp_loss(unravel(t), b)) for b in halves]
    g = sum(jax.jit(jax.grad(f))(theta) for f in dense)
    hg = sum(jax.jit(jax.hessian(f))(theta) @ g for f in dense)  # the dense [P, P] Hessians
    g_ours, hg_ours = grasp_hessian_gradient(params, _mlp_loss, halves)
    np.testing.assert_allclose(ravel_pytree(g_ours)[0], g, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(ravel_pytree(hg_ours)[0], hg, rtol=1e-4, atol=1e-10)
    assert np.abs(np.asarray(hg)).max() > 1e-7  # a non-trivial product: the comparison means something
    score = unravel(-theta * hg)  # GraSP step 5: S = −θ ⊙ Hg
    mask = grasp_mask(params, sparsity=0.6, loss_fn=_mlp_loss, batches=halves)
    s = np.concatenate([np.ravel(score["l1"]["kernel"]), np.ravel(score["l2"]["kernel"])])
    m = np.concatenate([np.ravel(mask["l1"]["kernel"]), np.ravel(mask["l2"]["kernel"])])
    assert m.sum() == round(0.4 * 35) and s[m].max() < s[~m].min()  # step 6: the largest S are removed
    assert mask["l1"]["bias"] is True


def _lm_batch():
    tokens = jnp.tile(jnp.arange(17, dtype=jnp.int32) * 3 % 64, (4, 1))
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": jnp.ones((4, 16), jnp.float32),
            "segment_ids": jnp.ones((4, 16), jnp.int32), "positions": jnp.tile(jnp.arange(16), (4, 1))}


def test_masked_adamw_keeps_pruned_lm_weights_at_zero_and_trains():
    graphdef, params = _lm(scan_layers=True)
    loss_fn, batch = lm_loss_fn(graphdef), _lm_batch()
    mask = snip_mask(params, sparsity=0.8, loss_fn=loss_fn, batch=batch)
    params = apply_mask(params, mask)

    optimizer = masked_optimizer(optax.adamw(1e-2, weight_decay=0.1), mask)

    @jax.jit
    def step(p, state):
        loss, grads = jax.value_and_grad(loss_fn)(p, batch)
        with jax.numpy_dtype_promotion("standard"):  # optax's Adam mixes Python floats and int32 counts
            updates, state = optimizer.update(grads, state, p)
        return optax.apply_updates(p, updates), state, loss, grads

    trained, state, losses, grads = params, optimizer.init(params), [], []
    for _ in range(5):  # the 5th loss is the loss after 4 updates
        trained, state, loss, g = step(trained, state)
        losses.append(float(loss))
        grads.append(g)
    assert losses[-1] < losses[0] - 0.1
    pruned = [np.asarray(p)[~np.asarray(m)]
              for p, m in zip(jax.tree.leaves(trained), jax.tree.leaves(mask), strict=True) if m is not True]
    assert sum(a.size for a in pruned) == round(0.8 * sum(a.size for a in jax.tree.leaves(mask) if a is not True))
    assert all(np.all(a == 0.0) for a in pruned)
    # The control: the gradient at a pruned weight is not zero, so plain AdamW would revive it at once.
    with jax.numpy_dtype_promotion("standard"):
        plain = optax.adamw(1e-2, weight_decay=0.1)
        updates, _ = plain.update(grads[0], plain.init(params), params)
    assert np.any(np.asarray(updates["embed"]["embedding"])[~np.asarray(mask["embed"]["embedding"])] != 0.0)


def test_masked_optimizer_zeroes_unmasked_params_and_leaves_other_leaves_alone():
    params = _toy_params()
    mask = magnitude_mask(params, sparsity=0.5)
    optimizer = masked_optimizer(optax.sgd(0.1), mask)
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = jax.jit(optimizer.update)(grads, optimizer.init(params), params)
    new = optax.apply_updates(params, updates)  # params were never masked: one step prunes them exactly
    m = np.asarray(mask["out"]["kernel"])
    assert np.all(np.asarray(new["out"]["kernel"])[~m] == 0.0)
    np.testing.assert_allclose(np.asarray(new["out"]["kernel"])[m], np.asarray(params["out"]["kernel"])[m] - 0.1)
    np.testing.assert_allclose(new["layers"]["dense"]["bias"], params["layers"]["dense"]["bias"] - 0.1)


def test_statistics_degree_sums_equal_the_kept_weights():
    _, params = _lm(scan_layers=True)
    mask = random_mask(params, sparsity=0.6, key=jax.random.PRNGKey(0))
    stats = mask_statistics(mask, grid=8, bins=5)
    assert len(stats["layers"]) == 1 + 7 * 2  # embedding + 7 kernels per scanned layer, split per layer
    up = np.asarray(mask["layers"]["mlp"]["up"]["kernel"])
    for s in stats["layers"].values():
        assert s["out_degree"].sum() == s["in_degree"].sum() == s["kept"]
        assert s["out_degree_hist"].sum() == s["out_degree"].size and s["in_degree_hist"].sum() == s["in_degree"].size
        assert s["density"] == pytest.approx(s["kept"] / s["size"])
        assert s["graphon"].mean() == pytest.approx(s["density"])  # equal-size cells here
    layer1 = stats["layers"]["layers/mlp/up/kernel[1]"]
    np.testing.assert_array_equal(layer1["out_degree"], up[1].sum(axis=1))  # rows: input neurons
    np.testing.assert_array_equal(layer1["in_degree"], up[1].sum(axis=0))  # columns: output neurons
    total = sum(int(np.sum(m)) for m in jax.tree.leaves(mask) if not isinstance(m, bool))
    assert stats["total"]["kept"] == total == sum(s["kept"] for s in stats["layers"].values())


def test_graphon_homogeneity_random_versus_feature_selecting_snip():
    rand = matrix_statistics(np.asarray(jax.random.uniform(jax.random.PRNGKey(0), (256, 256)) < 0.2))
    assert rand["null_var"] / 2 < rand["homogeneity"] < 2 * rand["null_var"]
    # SNIP on a task where only the first 5 of 50 inputs matter (the paper's feature-selection claim): the first layer's
    # out-degree concentrates on those 5 inputs and the empirical graphon is far from constant.
    k = jax.random.split(jax.random.PRNGKey(4), 4)
    x = jax.random.normal(k[0], (512, 50))
    y = jnp.sum(x[:, :5], axis=-1)
    params = {"l1": {"kernel": jax.random.normal(k[2], (50, 64)) / np.sqrt(50)},
              "l2": {"kernel": jax.random.normal(k[3], (64,)) / 8.0}}

    def loss(p, batch):
        return 0.5 * jnp.mean((jnp.tanh(batch[0] @ p["l1"]["kernel"]) @ p["l2"]["kernel"] - batch[1]) ** 2)

    mask = snip_mask(params, sparsity=0.95, loss_fn=loss, batch=(x, y), scope="layerwise")
    s = matrix_statistics(np.asarray(mask["l1"]["kernel"]))
    # A homogeneous mask would give the 5 informative inputs 10% of the kept weights.
    assert s["out_degree"][:5].sum() >= 0.5 * s["kept"] and s["out_degree"][:5].min() > s["out_degree"][5:].max()
    assert s["homogeneity"] > 5 * s["null_var"]  # about 7x here; a random mask sits near 1x


@pytest.mark.parametrize("sparsity", [-0.1, 1.0, 1.5])
def test_bad_sparsity_raises(sparsity):
    params = _toy_params()
    calls = [lambda: random_mask(params, sparsity=sparsity, key=jax.random.PRNGKey(0)),
             lambda: magnitude_mask(params, sparsity=sparsity),
             lambda: snip_mask(params, sparsity=sparsity, loss_fn=_toy_loss, batch=_toy_batches()[0]),
             lambda: grasp_mask(params, sparsity=sparsity, loss_fn=_toy_loss, batches=_toy_batches())]
    for call in calls:
        with pytest.raises(ValueError, match=rf"sparsity .*{sparsity}"):
            call()
    with pytest.raises(ValueError, match="scope"):
        magnitude_mask(params, sparsity=0.5, scope="per_row")


# The Factorised Saliency Model and its predicted graphon (zoo.sparsity.graphon; a reconstruction).


@pytest.mark.parametrize("method", ["random", "magnitude"])
def test_predicted_graphon_of_a_homogeneous_method_is_constant_at_the_density(method):
    graphon = method_graphon(method, 0.3, grid=6)
    assert graphon.shape == (6, 6)
    np.testing.assert_array_equal(graphon, np.full((6, 6), 0.3))


def _gaussian_survival(x):
    return 0.5 * np.vectorize(math.erfc)(x / math.sqrt(2.0))


@pytest.mark.parametrize("signed", [False, True])
def test_fsm_fit_recovers_the_factors_and_predicts_the_gaussian_closed_form(signed):
    # s = ε v u with ε = |w| (Magnitude-like, kept if large) or ε = w (signed, as GraSP's θ ⊙ Hg), w ~ N(0, 1):
    # the limit graphon is P(ε ≥ t / (v u)) = 2[1 − Φ(t / (v u))] (or 1 − Φ(t / (v u)) when signed).
    rng = np.random.default_rng(0)
    n, density = 512, 0.2
    v, u = np.exp(0.5 * rng.standard_normal(n)), np.sqrt(rng.chisquare(4, n))
    w = rng.standard_normal((n, n))
    scores = (w if signed else np.abs(w)) * v[:, None] * u[None, :]
    factors = fit_factorised_saliency(scores)
    assert np.corrcoef(np.log(factors.input_factor), np.log(v))[0, 1] > 0.99
    assert np.corrcoef(np.log(factors.output_factor), np.log(u))[0, 1] > 0.99
    predicted = predicted_graphon(factors, density, grid=8)
    assert predicted.mean() == pytest.approx(density, abs=1e-3)
    # The closed form with the true factor laws at 256 mid-quantiles, t by bisection on the mean.
    q = (np.arange(256) + 0.5) / 256
    product = np.outer(np.quantile(v, 1 - q), np.quantile(u, 1 - q))
    factor = 1.0 if signed else 2.0
    lo, hi = 0.0, 100.0
    for _ in range(60):
        t = 0.5 * (lo + hi)
        lo, hi = (t, hi) if factor * _gaussian_survival(t / product).mean() > density else (lo, t)
    closed = (factor * _gaussian_survival(t / product)).reshape(8, 32, 8, 32).mean(axis=(1, 3))
    assert closed.std() > 0.1  # a heterogeneous graphon: the comparison is not constant against constant
    assert graphon_distances(predicted, closed)["l2"] < 0.01
    # The keep-largest mask itself sits close to the prediction, and far from the constant graphon.
    mask = scores >= np.sort(scores.ravel())[::-1][round(density * n * n) - 1]
    empirical = matrix_statistics(mask)["graphon"]
    assert graphon_distances(empirical, predicted)["l2"] < 0.02
    assert graphon_distances(empirical, np.full((8, 8), density))["l2"] > 0.1


def test_cut_norm_is_the_brute_force_maximum_over_cell_unions():
    m = np.random.default_rng(1).standard_normal((4, 5))
    brute = max(abs(m[np.ix_(rows, cols)].sum())
                for r in range(1, 5) for rows in itertools.combinations(range(4), r)
                for c in range(1, 6) for cols in itertools.combinations(range(5), c))
    assert cut_norm(m) == pytest.approx(brute / m.size)
    assert cut_norm(np.array([[1.0, -1.0], [-1.0, 1.0]])) == pytest.approx(0.25)  # L2 would say 1
    d = graphon_distances(np.full((4, 4), 0.5), np.full((4, 4), 0.2))
    assert d["l2"] == pytest.approx(0.3) and d["cut"] == pytest.approx(0.3)


def test_graphon_bad_inputs_name_the_field():
    for density in (0.0, 1.0, -0.2, True):
        with pytest.raises(ValueError, match="density"):
            method_graphon("random", density)
    with pytest.raises(ValueError, match="method"):
        method_graphon("obd", 0.5)
    with pytest.raises(ValueError, match="factors"):
        method_graphon("snip", 0.5)
    for scores in (np.ones(8), np.ones((1, 8)), np.full((4, 4), np.nan)):
        with pytest.raises(ValueError, match="scores"):
            fit_factorised_saliency(scores)
    with pytest.raises(ValueError, match="all zero"):
        fit_factorised_saliency(np.zeros((4, 4)))
    with pytest.raises(ValueError, match="matrix"):
        cut_norm(np.zeros((17, 17)))
    with pytest.raises(ValueError, match="share a grid"):
        graphon_distances(np.zeros((4, 4)), np.zeros((8, 8)))
