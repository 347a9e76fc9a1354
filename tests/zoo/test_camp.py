"""CAMP (icml26zoo.multimodal.camp, a reconstruction; no official code exists to compare with) and its data: the
spec's invariants 1-4 (prototypes on the unit sphere after updates; Sinkhorn marginals, L_OT >= 0 and ~0 for
identical sets, ott-jax's plan against a NumPy Sinkhorn written here; modality dropout keeps a valid
distribution and explanations list the top-k prototypes; < 1 M parameters), the late-fusion baseline, the two
tasks' layout and missingness, and bad input named. One jitted program serves the model asserts."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from icml26zoo.models import ModelConfig, build_model, count_params
from icml26zoo.multimodal.camp import normalize, renormalise_prototypes
from icml26zoo.multimodal.camp_align import ot_alignment, sinkhorn_cosine
from icml26zoo.multimodal.camp_regularisers import explain, modality_dropout, uniformity_penalty
from icml26zoo.registry import OBJECTIVES
from icml26zoo.train.data.camp_data import ComplementaryOptions, complementary_examples, digit_halves

pytestmark = pytest.mark.usefixtures("fast_compile")

DIMS, CLASSES, J, D, B = (5, 4), 3, 2, 8, 6
DROPOUT_PRESENT = jnp.array([[1, 1, 1]] * 200 + [[0, 1, 0]] * 50, jnp.float32)


def _config(name: str = "camp", **options) -> ModelConfig:
    pairs = {"feature_dims": DIMS, "num_classes": CLASSES} | ({"prototypes": J} if name == "camp" else {}) | options
    return ModelConfig(name=name, d_model=D, num_layers=1, num_heads=1, num_kv_heads=1,
                       model_options=tuple(pairs.items()))


def _batch(key: jax.Array) -> dict[str, jax.Array]:
    points = jax.random.normal(key, (B, 2, max(DIMS)))
    present = jnp.array([[1, 1], [1, 0], [0, 1], [1, 1], [1, 0], [0, 0]], jnp.float32)  # last: a padding row
    return {"points": points, "features": jnp.zeros((B, 2, 0)), "weights": present,
            "labels": jnp.arange(B, dtype=jnp.int32) % CLASSES}


@pytest.fixture(scope="module")
def trained():
    """The model before and after one Adam step on objective camp, and its outputs, from one jitted program."""
    model = build_model(_config(), rngs=nnx.Rngs(0))
    batch = _batch(jax.random.key(1))
    objective = OBJECTIVES.get("camp")
    optimizer = optax.sgd(50.0)  # a large step: the raw prototypes leave the sphere
    graphdef, params = nnx.split(model, nnx.Param)

    @jax.jit
    def step(params, batch):
        def loss_fn(p):
            return objective(nnx.merge(graphdef, p), batch, jax.random.key(2))
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, _ = optimizer.update(grads, optimizer.init(params), params)
        new = optax.apply_updates(params, updates)
        after = nnx.merge(graphdef, new)
        embeddings, present = after.unpack(batch["points"], batch["weights"])
        out = after.evidence(embeddings, present)
        alone = [after.evidence(embeddings, jnp.zeros_like(present).at[:, m].set(1.0)).logits for m in range(2)]
        base, other = after.prototypes()[:1], normalize(jax.random.normal(jax.random.key(4), (1, CLASSES, J, D)))
        collapsed = jnp.broadcast_to(base[:, :1, :1], base.shape)
        checks = {"same": ot_alignment(jnp.concatenate([base, base])),
                  "drift": ot_alignment(jnp.concatenate([base, other])),
                  "spread": uniformity_penalty(base), "collapsed": uniformity_penalty(collapsed),
                  "dropped": modality_dropout(jax.random.key(0), DROPOUT_PRESENT, 0.5),
                  "not_dropped": modality_dropout(jax.random.key(0), DROPOUT_PRESENT, 0.0)}
        return loss, metrics, new, out, alone, after.prototypes(), checks

    loss, metrics, new, out, alone, prototypes, checks = step(params, batch)
    return model, graphdef, new, loss, metrics, out, alone, prototypes, batch, checks


def test_prototypes_stay_on_the_unit_sphere_after_an_update(trained):
    _, graphdef, new, loss, metrics, out, _, prototypes, batch, _ = trained
    assert np.isfinite(float(loss)) and float(metrics["camp/ot"]) >= 0 and float(metrics["weight"]) == B - 1
    model = nnx.merge(graphdef, new)
    raw = np.linalg.norm(np.asarray(model.prototype_params[...]), axis=-1)
    assert np.max(np.abs(raw - 1)) > 1e-3  # the update moved the parameter off the sphere ...
    np.testing.assert_allclose(np.linalg.norm(np.asarray(prototypes), axis=-1), 1.0, atol=1e-6)  # ... not P
    renormalise_prototypes(model)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(model.prototype_params[...]), axis=-1), 1.0, atol=1e-6)
    # Renormalising the parameter changes nothing the model computes.
    np.testing.assert_allclose(model(batch["points"], batch["features"], batch["weights"]), out.logits, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(out.projections), axis=-1), 1.0, atol=1e-6)


def _numpy_sinkhorn(x: np.ndarray, y: np.ndarray, epsilon: float, iterations: int = 5000) -> np.ndarray:
    """A log-domain Sinkhorn in float64 (own transcription of the textbook algorithm), uniform marginals, cost
    1 - cosine: the reference plan."""
    x = x / np.linalg.norm(x, axis=-1, keepdims=True)
    y = y / np.linalg.norm(y, axis=-1, keepdims=True)
    cost = 1.0 - x @ y.T
    log_a, log_b = -np.log(len(x)) * np.ones(len(x)), -np.log(len(y)) * np.ones(len(y))
    f, g = np.zeros(len(x)), np.zeros(len(y))

    def lse(z: np.ndarray, axis: int) -> np.ndarray:
        top = z.max(axis=axis, keepdims=True)
        return (top + np.log(np.exp(z - top).sum(axis=axis, keepdims=True))).squeeze(axis)

    for _ in range(iterations):
        f = epsilon * log_a - epsilon * lse((g[None] - cost) / epsilon, 1)
        g = epsilon * log_b - epsilon * lse((f[:, None] - cost) / epsilon, 0)
    return np.exp((f[:, None] + g[None] - cost) / epsilon)


def test_sinkhorn_plan_marginals_and_cost():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 4, 6)).astype(np.float32), rng.normal(size=(3, 4, 6)).astype(np.float32)
    x[2] = y[2] = np.eye(6, dtype=np.float32)[:4]  # problem 2: identical orthonormal sets
    cost, plan, matrix = jax.jit(lambda x, y: sinkhorn_cosine(x, y, 0.05))(x, y)
    identical_cost = cost[2]
    for index in range(2):
        reference = _numpy_sinkhorn(x[index].astype(np.float64), y[index].astype(np.float64), 0.05)
        np.testing.assert_allclose(plan[index], reference, atol=1e-4)
        np.testing.assert_allclose(float(cost[index]), np.sum(reference * matrix[index]), atol=1e-4)
    np.testing.assert_allclose(np.sum(plan, axis=-1), 1 / 4, atol=1e-4)
    np.testing.assert_allclose(np.sum(plan, axis=-2), 1 / 4, atol=1e-4)
    assert np.all(np.asarray(cost[:2]) > 0)
    # Orthonormal identical sets: the plan is diagonal up to e^{-1/ε} = e^{-20}, so ⟨P, C⟩ is 0 up to that bias.
    assert 0 <= float(identical_cost) < 1e-6


def test_ot_alignment_vanishes_for_identical_modalities_and_penalises_drift(trained):
    checks = trained[-1]
    assert 0 <= float(checks["same"]) < 0.05 * J * CLASSES  # only the entropic bias remains
    assert float(checks["drift"]) > float(checks["same"]) + 0.5
    # Uniformity: spread prototypes score lower than collapsed ones (log exp(2) = 2).
    assert float(checks["spread"]) < float(checks["collapsed"]) == pytest.approx(2.0, abs=1e-5)


def test_missing_modalities_leave_a_valid_distribution(trained):
    _, _, _, _, _, out, alone, _, _, _ = trained
    probabilities = jax.nn.softmax(out.logits)
    np.testing.assert_allclose(np.sum(probabilities, axis=-1), 1.0, atol=1e-6)
    assert np.all(np.isfinite(np.asarray(out.logits)))
    # A row with one modality present is that modality's evidence alone; a row with none is uniform.
    np.testing.assert_allclose(out.logits[1], out.evidence[1, 0], atol=1e-5)
    np.testing.assert_allclose(out.logits[2], out.evidence[2, 1], atol=1e-5)
    np.testing.assert_allclose(out.logits[5], 0.0)
    np.testing.assert_allclose(alone[0], out.evidence[:, 0], atol=1e-5)
    # Both present: the β-weighted mean of the two evidences.
    beta = np.asarray(out.beta)
    np.testing.assert_allclose(out.logits[0], beta @ np.asarray(out.evidence[0]), atol=1e-5)


def test_modality_dropout_keeps_a_modality_per_row(trained):
    checks, present = trained[-1], np.asarray(DROPOUT_PRESENT)
    dropped = np.asarray(checks["dropped"])
    assert set(np.unique(dropped)) <= {0.0, 1.0} and np.all(dropped <= present)
    assert np.all(dropped.sum(axis=1) >= 1)
    np.testing.assert_array_equal(dropped[200:], present[200:])  # a lone modality is never dropped
    assert 0.35 < 1 - dropped[:200].mean() < 0.55  # about half dropped (less: rows keep one)
    np.testing.assert_array_equal(checks["not_dropped"], present)


def test_explanations_list_the_top_k_prototypes(trained):
    _, _, _, _, _, out, _, _, _, _ = trained
    k = 3
    explanation = explain(out.similarities, out.present, k, temperature=0.1)
    flat = np.asarray(out.similarities).reshape(B, 2, CLASSES * J)
    order = np.argsort(-flat, axis=-1)[..., :k]
    np.testing.assert_array_equal(explanation.classes, order // J)
    np.testing.assert_array_equal(explanation.indices, order % J)
    np.testing.assert_allclose(explanation.similarity, np.take_along_axis(flat, order, -1) * 0.1, atol=1e-6)
    assert np.all(np.diff(np.asarray(explanation.similarity), axis=-1) <= 0)
    assert np.all(np.abs(np.asarray(explanation.similarity)) <= 1 + 1e-6)  # cosines
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 6\], got 7"):
        explain(out.similarities, out.present, CLASSES * J + 1)


def test_parameter_count_is_below_one_million():
    for dims, classes in (((768, 768), 20), ((768, 512, 384), 20), ((32, 32), 10)):
        cfg = ModelConfig(name="camp", d_model=64, num_layers=1, num_heads=1, num_kv_heads=1,
                          model_options=(("feature_dims", dims), ("num_classes", classes), ("prototypes", 5)))
        count = count_params(nnx.eval_shape(lambda cfg=cfg: build_model(cfg, rngs=nnx.Rngs(0))))
        expected = sum(d * 64 + 64 for d in dims) + len(dims) * classes * 5 * 64 + len(dims)
        assert count == expected < 1_000_000


def test_concat_baseline():
    batch = _batch(jax.random.key(1))
    linear = build_model(_config("camp_concat", hidden=0), rngs=nnx.Rngs(0))
    assert count_params(linear) == (sum(DIMS) + 2) * CLASSES + CLASSES
    logits = linear(batch["points"], batch["features"], batch["weights"])
    # A missing modality's embedding is ignored: changing it leaves the logits unchanged.
    changed = batch["points"].at[1, 1].add(5.0)
    np.testing.assert_allclose(linear(changed, batch["features"], batch["weights"]), logits, atol=1e-6)
    mlp = build_model(_config("camp_concat", hidden=7), rngs=nnx.Rngs(0))
    assert mlp(batch["points"], batch["features"], batch["weights"]).shape == (B, CLASSES)


def test_bad_input_is_named():
    model = build_model(_config(), rngs=nnx.Rngs(0))
    embeddings = (jnp.zeros((B, DIMS[0])), jnp.zeros((B, DIMS[1])))
    with pytest.raises(ValueError, match=r"present \(the missing-modality mask\) must have shape \[B, M\] = \[6, 2\], "
                                         r"got \[6, 3\]"):
        model.evidence(embeddings, jnp.ones((B, 3)))
    with pytest.raises(ValueError, match=r"camp option 'prototypes' must be an integer >= 1, got 0"):
        build_model(_config(prototypes=0), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="'feature_dims' must be a tuple of at least 2 embedding widths"):
        build_model(_config(feature_dims=(5,)), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"embeddings\[1\] must be a float array of shape \[B, d_m\]"):
        model.evidence((embeddings[0], jnp.zeros((B, 3))))
    with pytest.raises(ValueError, match="objective 'camp' needs model.name='camp'"):
        OBJECTIVES.get("camp")(build_model(_config("camp_concat"), rngs=nnx.Rngs(0)), _batch(jax.random.key(0)),
                               jax.random.key(0))


def test_complementary_task_needs_both_modalities():
    options = ComplementaryOptions(missing_rate=0.4, train_examples=8, eval_examples=8)
    points, present, labels = complementary_examples(options, 3000, np.random.SeedSequence(0))
    again, present0, labels0 = complementary_examples(options, 3000, np.random.SeedSequence(0), missing_rate=0.0)
    assert points.shape == (3000, 2, 32) and set(np.unique(labels)) == {0, 1, 2}
    np.testing.assert_array_equal(labels, labels0)  # same samples at every missing rate
    assert np.all(present.sum(axis=1) >= 1) and 0.3 < 1 - present.mean() < 0.45 and np.all(present0 == 1)
    np.testing.assert_array_equal(points[present == 0], 0.0)
    # The generator draws the factors first: z = (z1, z2) and y = (z1 + z2) mod 3.
    factors = np.random.default_rng(np.random.SeedSequence(0)).integers(3, size=(3000, 2))
    np.testing.assert_array_equal(labels, factors.sum(axis=1) % 3)
    for m in range(2):
        by_factor = np.stack([again[factors[:, m] == v, m].mean(axis=0) for v in range(3)])
        by_label = np.stack([again[labels == c, m].mean(axis=0) for c in range(3)])
        # Modality m's embedding moves with its factor, not with the class (z_m is independent of y).
        assert np.ptp(by_factor, axis=0).max() > 5 * np.ptp(by_label, axis=0).max()


def test_digit_halves_reassemble_the_digit():
    points, present, labels = digit_halves("validation", 20, missing_rate=0.0)
    full = digit_halves("validation", 20, missing_rate=0.5)[1]
    assert points.shape == (20, 2, 32) and labels.shape == (20,) and np.all(present == 1)
    assert np.all(full.sum(axis=1) >= 1) and full.min() == 0
    image = np.concatenate([points[:, 0].reshape(20, 8, 4), points[:, 1].reshape(20, 8, 4)], axis=2)
    assert image.max() <= 1 and image.min() >= 0 and np.all(image.reshape(20, -1).sum(axis=1) > 0)
