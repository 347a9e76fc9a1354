"""NormFace / NTCE / NONL / SupCon against readable per-sample formulas, and the invariants of the
NC-by-design paper (arXiv 2605.20302)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.losses import neural_collapse as nc

pytestmark = pytest.mark.usefixtures("fast_compile")

TAU = 0.2
ATOL = 1e-5
# One compiled program per loss (eager dispatch compiles every primitive separately); the argument checks
# run while tracing, and the bad-input test calls the functions eagerly.
normface = jax.jit(nc.normface_losses, static_argnames="temperature")
ntce = jax.jit(nc.ntce_losses, static_argnames="temperature")
nonl = jax.jit(nc.nonl_losses, static_argnames=("temperature", "variant"))
supcon = jax.jit(nc.supcon_losses, static_argnames="temperature")


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def batch(num_samples=6, num_classes=3, dim=4, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.arange(num_samples) % num_classes
    return (rng.normal(size=(num_samples, dim)).astype(np.float32),
            rng.normal(size=(num_classes, dim)).astype(np.float32), labels.astype(np.int32))


def cos(a, b):
    return float(unit(a) @ unit(b))


def test_normface_is_cosine_softmax_cross_entropy():
    z, w, y = batch()
    losses, valid = normface(jnp.asarray(z), jnp.asarray(w), jnp.asarray(y), TAU)
    for i in range(len(y)):
        logits = [cos(z[i], w[c]) / TAU for c in range(len(w))]
        want = -logits[y[i]] + math.log(sum(math.exp(s) for s in logits))
        assert float(losses[i]) == pytest.approx(want, abs=ATOL)
    np.testing.assert_array_equal(valid, 1.0)


def test_ntce_is_cross_entropy_over_the_batch_matrix():
    z, w, y = batch()
    losses, _ = ntce(jnp.asarray(z), jnp.asarray(w), jnp.asarray(y), TAU)
    matrix = unit(w)[y] @ unit(z).T / TAU
    want = optax.losses.softmax_cross_entropy_with_integer_labels(jnp.asarray(matrix), jnp.arange(len(y)))
    np.testing.assert_allclose(losses, want, atol=ATOL)
    for i in range(len(y)):
        # Same-class samples j ≠ i stay in the denominator, as the paper's code does.
        terms = [math.exp(cos(w[y[i]], z[j]) / TAU) for j in range(len(y))]
        assert float(losses[i]) == pytest.approx(-math.log(terms[i] / sum(terms)), abs=ATOL)


@pytest.mark.parametrize("variant", nc.NONL_VARIANTS)
def test_nonl_variants_match_their_formulas(variant):
    z, w, y = batch()
    losses, valid = nonl(jnp.asarray(z), jnp.asarray(w), jnp.asarray(y), TAU, variant=variant)
    for i in range(len(y)):
        by_samples = sum(math.exp(cos(w[y[i]], z[j]) / TAU) for j in range(len(y)) if y[j] != y[i])
        by_classes = sum(math.exp(cos(z[i], w[c]) / TAU) for c in range(len(w)) if c != y[i])
        denominator = {"symmetric": by_samples, "instance": by_classes, "bidirectional": by_samples + by_classes}
        want = -cos(w[y[i]], z[i]) / TAU + math.log(denominator[variant])
        assert float(losses[i]) == pytest.approx(want, abs=1e-4)
    np.testing.assert_array_equal(valid, 1.0)


def test_nonl_distinct_classes_exclude_only_self_and_decouple_the_positive():
    z, w, y = batch(num_samples=4, num_classes=4)
    anchored = unit(w)[y] @ unit(z).T
    cosine = jnp.asarray(unit(z) @ unit(w).T / TAU)

    @jax.jit
    def losses_and_jacobian(cosines):
        def losses(c):
            return nc.nonl_from_logits(c / TAU, cosine, jnp.asarray(y), jnp.ones(4))[0]
        return losses(cosines), jax.jacrev(losses)(cosines)

    losses, jacobian = losses_and_jacobian(jnp.asarray(anchored))
    for i in range(4):
        others = [anchored[i, j] / TAU for j in range(4) if j != i]
        want = -anchored[i, i] / TAU + math.log(sum(math.exp(v) for v in others))
        assert float(losses[i]) == pytest.approx(want, abs=1e-4)
        # ∂ℓ_i/∂⟨w_{y_i}, z_i⟩ = −1/τ exactly: the positive never enters its own denominator.
        assert float(jacobian[i, i, i]) == pytest.approx(-1.0 / TAU, rel=1e-6)


def test_nonl_sample_without_negatives_is_invalid_not_nan():
    z, w, _ = batch(num_samples=4, num_classes=2)

    @jax.jit
    def loss_grad_valid(features, labels):
        def loss(f):
            return nc.reduce_losses(*nc.nonl_losses(f, jnp.asarray(w), labels, TAU))
        return loss(features), jax.grad(loss)(features), nc.nonl_losses(features, jnp.asarray(w), labels, TAU)[1]

    _, _, valid = loss_grad_valid(jnp.asarray(z), jnp.asarray([0, 0, 0, 1]))
    np.testing.assert_array_equal(valid, [1, 1, 1, 1])
    loss, grad, valid = loss_grad_valid(jnp.asarray(z), jnp.zeros(4, jnp.int32))
    np.testing.assert_array_equal(valid, 0.0)
    assert float(loss) == 0.0 and np.all(np.asarray(grad) == 0.0)


def test_supcon_matches_khosla_formula_with_two_views():
    rng = np.random.default_rng(1)
    views = rng.normal(size=(4, 2, 3)).astype(np.float32)
    labels = np.array([0, 1, 0, 2], np.int32)
    losses, valid = supcon(jnp.asarray(views), jnp.asarray(labels), 0.07)
    rows = np.concatenate([views[:, 0], views[:, 1]])
    row_labels = np.tile(labels, 2)
    for a in range(8):
        others = [k for k in range(8) if k != a]
        log_denominator = math.log(sum(math.exp(cos(rows[a], rows[k]) / 0.07) for k in others))
        positives = [p for p in others if row_labels[p] == row_labels[a]]
        want = -np.mean([cos(rows[a], rows[p]) / 0.07 - log_denominator for p in positives])
        assert float(losses[a]) == pytest.approx(want, rel=1e-4)
    np.testing.assert_array_equal(valid, 1.0)
    # One view: the classes seen once (1 and 2) have no positive.
    _, valid = supcon(jnp.asarray(views[:, :1]), jnp.asarray(labels))
    np.testing.assert_array_equal(valid, [1, 0, 1, 0])


@pytest.mark.parametrize("name", ["normface", "ntce", "nonl"])
def test_normalised_losses_ignore_positive_rescaling(name):
    z, w, y = batch()
    fn = {"normface": normface, "ntce": ntce, "nonl": nonl}[name]
    base, _ = fn(jnp.asarray(z), jnp.asarray(w), jnp.asarray(y), TAU)
    scales = np.array([0.5, 3.0, 7.0, 1.0, 2.0, 0.1], np.float32)[:, None]
    scaled, _ = fn(jnp.asarray(z * scales), jnp.asarray(w * 4.0), jnp.asarray(y), TAU)
    np.testing.assert_allclose(scaled, base, atol=1e-4)


def test_padding_rows_leave_every_sum_and_denominator():
    z, w, y = batch()
    valid = jnp.asarray([1, 1, 1, 1, 0, 0], jnp.float32)
    padded, mask = ntce(jnp.asarray(z), jnp.asarray(w), jnp.asarray(y), TAU, valid)
    kept, _ = ntce(jnp.asarray(z[:4]), jnp.asarray(w), jnp.asarray(y[:4]), TAU)
    np.testing.assert_allclose(padded[:4], kept, atol=ATOL)
    assert float(nc.reduce_losses(padded, mask)) == pytest.approx(float(jnp.mean(kept)), abs=ATOL)


def test_reductions():
    losses, valid = jnp.asarray([1.0, -2.0, 4.0]), jnp.asarray([1.0, 1.0, 0.0])
    assert float(nc.reduce_losses(losses, valid, "mean")) == pytest.approx(-0.5)
    assert float(nc.reduce_losses(losses, valid, "sum")) == pytest.approx(-1.0)
    np.testing.assert_array_equal(nc.reduce_losses(losses, valid, "none"), [1.0, -2.0, 0.0])
    assert float(nc.reduce_losses(losses, jnp.zeros(3))) == 0.0
    with pytest.raises(ValueError, match="reduction"):
        nc.reduce_losses(losses, valid, "max")


@pytest.mark.parametrize("num_classes,dim", [(2, 1), (4, 3), (10, 16)])
def test_simplex_etf_is_equiangular_and_unit(num_classes, dim):
    etf = nc.simplex_etf(num_classes, dim).astype(np.float64)
    want = np.full((num_classes, num_classes), -1.0 / (num_classes - 1)) + np.eye(num_classes) * (
        1 + 1.0 / (num_classes - 1))
    np.testing.assert_allclose(etf @ etf.T, want, atol=1e-6)
    with pytest.raises(ValueError, match="dim"):
        nc.simplex_etf(num_classes, num_classes - 2)


def test_class_mean_prototypes_on_collapsed_features():
    etf = nc.simplex_etf(5, 6)
    labels = np.repeat(np.arange(5), 3)
    features = etf[labels] * np.linspace(0.5, 3.0, 15)[:, None]
    whole = nc.ClassMeanPrototypes.empty(5, 6).update(features, labels)
    halves = nc.ClassMeanPrototypes.empty(5, 6).update(features[:7], labels[:7]).update(features[7:], labels[7:])
    np.testing.assert_allclose(halves.prototypes(), whole.prototypes(), atol=1e-12)
    np.testing.assert_allclose(whole.prototypes(), etf, atol=1e-6)
    predictions = whole.predict(features)
    means = np.stack([features[labels == c].mean(0) for c in range(5)])
    nearest_mean = np.argmin(((features[:, None] - means[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_array_equal(predictions, labels)
    np.testing.assert_array_equal(predictions, nearest_mean)


def test_bad_input_names_the_argument():
    z, w, y = batch()
    args = (jnp.asarray(z), jnp.asarray(w))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        nc.ntce_losses(*args, jnp.asarray(y + 1), TAU)
    with pytest.raises(ValueError, match="labels must be an integer array"):
        nc.nonl_losses(*args, jnp.asarray(y, jnp.float32), TAU)
    with pytest.raises(ValueError, match="temperature"):
        nc.normface_losses(*args, jnp.asarray(y), 0.0)
    with pytest.raises(ValueError, match="prototypes must have shape"):
        nc.ntce_losses(args[0], args[1][:, :3], jnp.asarray(y), TAU)
    with pytest.raises(ValueError, match="variant"):
        nc.nonl_losses(*args, jnp.asarray(y), TAU, variant="both")
    with pytest.raises(ValueError, match="views"):
        nc.supcon_losses(args[0], jnp.asarray(y))
    with pytest.raises(ValueError, match=r"labels: classes \[2\] have no samples"):
        nc.ClassMeanPrototypes.empty(3, 4).update(z[:2], y[:2]).prototypes()
