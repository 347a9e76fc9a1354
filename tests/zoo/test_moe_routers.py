"""Routers of zoo.moe: expert-permutation equivariance of every registered router (through the MoE layer),
MP-MoE's greedy against brute force and its exact reduction to top-k, ConfSMoE's and the distance gates'
invariances, and bad input."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.models import ModelConfig
from icml26zoo.moe import ROUTERS, MoEConfig, MoEFeedForward
from icml26zoo.moe.confidence import confidence_loss, confidence_targets
from icml26zoo.moe.mahalanobis import (
    CoOccurrence,
    covariance,
    greedy_select,
    independent_statistics,
    selection_statistics,
)

pytestmark = pytest.mark.usefixtures("fast_compile")

# Distinct sizes, so that the expert axis of every parameter is the only axis of length E.
DIM, HIDDEN, EXPERTS, TOP_K, CLASSES, TOKENS = 6, 10, 5, 2, 7, 24
# One compiled program per layer structure (a permuted layer reuses its original's) and per k.
apply_layer = nnx.jit(lambda layer, x: layer(x))
greedy_batch = jax.jit(jax.vmap(greedy_select, in_axes=(0, None, None)), static_argnums=2)
route = nnx.jit(lambda router, x: router(x, jnp.ones(x.shape[:1], jnp.bool_)))


def _layer(router: str, **overrides) -> MoEFeedForward:
    overrides.setdefault("router_options", (("num_classes", CLASSES),) if router == "confidence" else ())
    config = MoEConfig(num_experts=EXPERTS, top_k=TOP_K, router=router, implementation="reference", **overrides)
    return MoEFeedForward(DIM, HIDDEN, config, rngs=nnx.Rngs(0))


def _inputs(seed: int = 0) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), (TOKENS, DIM))


def _random_statistics(seed: int) -> tuple[jax.Array, jax.Array]:
    """Statistics of random, correlated selections (experts 0 and 1 often chosen together)."""
    rng = np.random.default_rng(seed)
    picks = np.stack([rng.choice(EXPERTS, TOP_K, replace=False) for _ in range(64)])
    picks[:20] = [0, 1]
    return selection_statistics(jnp.asarray(picks, jnp.int32), jnp.ones(64, jnp.bool_), EXPERTS)


def _permute_experts(module: nnx.Module, perm: np.ndarray) -> None:
    """New expert i is old expert perm[i]: every axis of length E of every state leaf is permuted."""
    state = nnx.state(module)

    def permute(leaf):
        for axis, size in enumerate(leaf.shape):
            if size == EXPERTS:
                leaf = jnp.take(leaf, jnp.asarray(perm), axis=axis)
        return leaf

    nnx.update(module, jax.tree.map(permute, state))


# Capacity dropping depends on the chosen indices only (not on the router), so one router checks it.
@pytest.mark.parametrize(
    ("router", "capacity_factor"),
    [("topk_softmax", None), ("confidence", None), ("gaussian", None), ("laplacian", None),
     ("mahalanobis", None), ("mahalanobis", 0.6)],
)
def test_every_router_is_equivariant_to_permuting_experts(router, capacity_factor):
    """Relabelling the experts (router and expert weights together) leaves the output unchanged and
    permutes the expert load; with capacity the same assignments are dropped."""
    assert router in ROUTERS
    layer = _layer(router, capacity_factor=capacity_factor)
    if router == "mahalanobis":
        frequency, cooccurrence = _random_statistics(1)
        layer.router.frequency[...], layer.router.cooccurrence[...] = frequency, cooccurrence
    x = _inputs()
    y, aux = apply_layer(nnx.clone(layer), x)
    perm = np.random.default_rng(2).permutation(EXPERTS)
    _permute_experts(layer, perm)
    y_perm, aux_perm = apply_layer(layer, x)
    np.testing.assert_allclose(y_perm, y, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(aux_perm["load"], aux["load"][perm], atol=1e-6)
    np.testing.assert_allclose(aux_perm["dropped"], aux["dropped"], atol=1e-6)
    if capacity_factor is not None:
        assert float(aux["dropped"]) > 0


def test_greedy_with_identity_covariance_is_exactly_top_k():
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(3), (50, 8)), axis=-1)
    for k in (1, 3, 8):
        greedy, gains = greedy_batch(probs, jnp.eye(8), k)
        np.testing.assert_array_equal(greedy, jax.lax.top_k(probs, k)[1])
        assert float(gains.min()) >= 0


def test_mahalanobis_router_reduces_to_top_k_with_uncorrelated_statistics():
    """At its initial (independent) statistics, and with normalized co-occurrence C = I, MP-MoE routes
    exactly as top-k softmax with the same weights."""
    x = _inputs(4)
    top_k = route(_layer("topk_softmax").router, x)
    for options in ((), (("covariance", "normalized"),)):
        config = MoEConfig(num_experts=EXPERTS, top_k=TOP_K, router="mahalanobis", router_options=options)
        router = MoEFeedForward(DIM, HIDDEN, config, rngs=nnx.Rngs(0)).router
        if options:
            router.frequency[...], router.cooccurrence[...] = jnp.ones(EXPERTS), jnp.eye(EXPERTS)
        routing = route(router, x)
        np.testing.assert_array_equal(routing.indices, top_k.indices)
        np.testing.assert_allclose(routing.gates, top_k.gates, atol=1e-6)
    frequency, cooccurrence = independent_statistics(EXPERTS, TOP_K)
    np.testing.assert_allclose(covariance(frequency, cooccurrence, "phi", 0.0), np.eye(EXPERTS), atol=1e-6)


def _logdet_value(p: np.ndarray, sigma: np.ndarray, subset: list[int]) -> float:
    """det L_SS with L = diag(p) Σ diag(p) (1 for the empty set)."""
    if not subset:
        return 1.0
    return float(np.linalg.det(np.outer(p[subset], p[subset]) * sigma[np.ix_(subset, subset)]))


def test_incremental_cholesky_gains_equal_direct_determinants_in_float64():
    rng = np.random.default_rng(5)
    with jax.enable_x64(True):
        greedy = jax.jit(greedy_select, static_argnums=2)
        for _ in range(3):
            a = rng.normal(size=(7, 7))
            sigma = a @ a.T / 7 + 0.1 * np.eye(7)
            p = rng.dirichlet(np.ones(7))
            indices, gains = greedy(jnp.asarray(p), jnp.asarray(sigma), 4)
            assert gains.dtype == jnp.float64 and len(set(np.asarray(indices).tolist())) == 4
            chosen: list[int] = []
            for index, gain in zip(np.asarray(indices), np.asarray(gains), strict=True):
                direct = {j: _logdet_value(p, sigma, chosen + [j]) / _logdet_value(p, sigma, chosen)
                          for j in range(7) if j not in chosen}
                np.testing.assert_allclose(gain, direct[index], rtol=1e-6, atol=1e-15)
                assert direct[index] == pytest.approx(max(direct.values()), rel=1e-9)
                chosen.append(int(index))


def test_greedy_avoids_co_selected_twins():
    """Experts 0 and 1 are always chosen together (phi correlation ~1); expert 2 scores a little less than
    either: the greedy takes one twin and expert 2, plain top-k takes both twins."""
    picks = jnp.asarray([[0, 1]] * 40 + [[2, 3]] * 20 + [[3, 4]] * 20 + [[2, 4]] * 20, jnp.int32)
    frequency, cooccurrence = selection_statistics(picks, jnp.ones(100, jnp.bool_), 5)
    sigma = covariance(frequency, cooccurrence, "phi", 1e-3)
    p = jnp.asarray([0.3, 0.29, 0.25, 0.08, 0.08])
    indices, _ = greedy_batch(p[None], sigma, 2)
    assert sorted(np.asarray(indices[0]).tolist()) == [0, 2]
    assert sorted(np.asarray(jax.lax.top_k(p, 2)[1]).tolist()) == [0, 1]


def _twin_covariance(num_experts: int, twins: tuple[int, int], rest: np.ndarray | None = None) -> np.ndarray:
    """Unit-diagonal Σ + 1e-3 I [E, E]: experts `twins` perfectly correlated, uncorrelated with every other
    expert; the others correlated among themselves by `rest` ([E−2, E−2] correlation) or not at all."""
    sigma = np.eye(num_experts)
    sigma[twins[0], twins[1]] = sigma[twins[1], twins[0]] = 1.0
    if rest is not None:
        others = [e for e in range(num_experts) if e not in twins]
        sigma[np.ix_(others, others)] = rest
    return sigma + 1e-3 * np.eye(num_experts)


def test_greedy_prefers_an_uncorrelated_expert_to_a_low_probability_twin():
    """The review's case (issue 31): perfect twins 0 and 1, expert 2 uncorrelated: top-2 is {0, 2}, not the
    twin pair (which the earlier gain (p_j − Σ_jS Σ_SS⁻¹ p_S)² / schur_j chose, at 11.2 against 0.36)."""
    p = jnp.asarray([0.30, 0.15, 0.25, 0.15, 0.15])
    indices, gains = greedy_batch(p[None], jnp.asarray(_twin_covariance(5, (0, 1))), 2)
    assert np.asarray(indices[0]).tolist() == [0, 2]
    np.testing.assert_allclose(gains[0], [0.3**2 * 1.001, 0.25**2 * 1.001], rtol=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_a_perfect_twin_of_a_chosen_expert_loses_to_a_comparable_uncorrelated_one(seed):
    """Property over random twins, probabilities and correlations among the other experts: once the greedy has
    chosen one twin, the other twin (probability p_t, anywhere below its partner's) is not chosen next while
    some uncorrelated expert has probability ≥ 0.8 p_t."""
    rng = np.random.default_rng(seed)
    num_experts = 7
    a, b, c = rng.choice(num_experts, 3, replace=False)
    factor = rng.normal(size=(num_experts - 2, num_experts - 2))
    rest = np.corrcoef(factor @ factor.T)
    p = rng.dirichlet(np.ones(num_experts)) * 0.3
    p[a] = 0.3 + 0.05 * rng.random()                  # the largest: chosen first
    p[b] = p[a] * rng.uniform(0.3, 1.0)               # its twin, unequal probability
    p[c] = p[b] * rng.uniform(0.8, 1.0)               # an uncorrelated expert of comparable probability
    p /= p.sum()
    indices, _ = greedy_batch(jnp.asarray(p, jnp.float32)[None],
                              jnp.asarray(_twin_covariance(num_experts, (a, b), rest), jnp.float32), 3)
    first, second, _ = np.asarray(indices[0]).tolist()
    assert first == a and second != b


def test_running_statistics_update_in_training_only_and_carry_no_gradient():
    layer = _layer("mahalanobis")
    router = layer.router
    x, mask = _inputs(6), jnp.ones(TOKENS, jnp.bool_)
    before = jnp.asarray(router.cooccurrence[...])
    router.use_running_average = True
    route(router, x)
    np.testing.assert_array_equal(router.cooccurrence[...], before)
    router.use_running_average = False
    routing = route(router, x)
    picked_f, picked_c = selection_statistics(routing.indices, mask, EXPERTS)
    np.testing.assert_allclose(router.cooccurrence[...], 0.99 * before + 0.01 * picked_c, atol=1e-6)
    assert isinstance(nnx.state(router, CoOccurrence)["frequency"], CoOccurrence)

    def gates_sum(kernel, cooccurrence):
        frozen = nnx.clone(router)
        frozen.kernel[...], frozen.cooccurrence[...] = kernel, cooccurrence
        frozen.use_running_average = True
        frozen.options = type(frozen.options)(select_at_inference=True)
        return jnp.sum(frozen(x, mask).gates * jnp.arange(TOP_K, dtype=jnp.float32))

    grads = jax.grad(gates_sum, argnums=(0, 1))(router.kernel[...], router.cooccurrence[...])
    assert float(jnp.abs(grads[0]).max()) > 0
    assert float(jnp.abs(grads[1]).max()) == 0


def test_confidence_output_depends_on_gate_logits_only_through_the_chosen_set():
    layer = _layer("confidence")
    x = _inputs(7)
    y, aux = apply_layer(layer, x)
    gate = jnp.asarray(layer.router.gate[...])
    # Scaling the gate's projection by 2 is a strictly increasing map of every logit.
    layer.router.gate[...] = 2.0 * gate
    np.testing.assert_allclose(apply_layer(layer, x)[0], y, atol=1e-6)
    confidence = np.asarray(aux["confidence"])
    assert (confidence > 0).all() and (confidence < 1).all()
    assert np.abs(confidence.sum(-1) - 1).max() > 1e-3  # weights are not normalized


def test_confidence_gate_is_frozen_as_in_the_official_code_while_the_softmax_gate_learns():
    """ConfSMoE's gate and noise gate get exactly zero gradient from the task and confidence losses: the official
    code computes the softmax over the chosen logits but weights nothing with it and never adds its cv² balance
    loss, so selection is the initial (noisy) projection. The confidence nets, the class head and the experts
    learn; the softmax gate of "topk_softmax" learns through its weights."""
    x, cotangent = _inputs(3), jax.random.normal(jax.random.key(4), (TOKENS, DIM))
    labels = jax.random.randint(jax.random.key(5), (TOKENS,), 0, CLASSES)

    def loss(layer: MoEFeedForward) -> jax.Array:
        y, aux = layer(x, rng=jax.random.key(6))
        total = jnp.sum(y * cotangent) + aux["loss"]
        if "confidence" in aux:
            total += confidence_loss(aux["confidence"], aux["class_logits"], labels, jnp.ones(TOKENS))
        return total

    confidence = nnx.grad(loss)(_layer("confidence")).router
    assert float(jnp.abs(confidence.gate[...]).max()) == 0.0
    assert float(jnp.abs(confidence.noise_gate[...]).max()) == 0.0
    for name in ("confidence_kernel", "class_kernel", "norm_scale"):
        assert float(jnp.abs(getattr(confidence, name)[...]).max()) > 0, name
    softmax = nnx.grad(loss)(_layer("topk_softmax")).router
    assert float(jnp.abs(softmax.kernel[...]).max()) > 0


def test_confidence_targets_and_loss():
    uniform = jnp.zeros((3, 4, TOP_K, CLASSES))
    labels = jnp.zeros((3, 4), jnp.int32)
    np.testing.assert_allclose(confidence_targets(uniform, labels), np.full((3, 4, TOP_K), 1 / CLASSES), atol=1e-7)
    confidence = jnp.full((3, 4, TOP_K), 0.5)
    weights = jnp.ones((3, 4)).at[0].set(0.0)
    expected = (0.5 - 1 / CLASSES) ** 2
    np.testing.assert_allclose(confidence_loss(confidence, uniform, labels, weights), expected, rtol=1e-6)


def test_laplace_gate_is_translation_invariant_and_gaussian_gate_reduces_to_linear():
    laplace = _layer("laplacian").router
    x, mask = _inputs(8), jnp.ones(TOKENS, jnp.bool_)
    shift = 3.0 * jnp.ones(DIM)
    before = laplace(x, mask)
    laplace.centers[...] = laplace.centers[...] + shift
    after = laplace(x + shift, mask)
    np.testing.assert_array_equal(after.indices, before.indices)
    np.testing.assert_allclose(after.gates, before.gates, atol=1e-5)

    gaussian = _layer("gaussian").router
    means = jax.random.normal(jax.random.key(9), (EXPERTS, DIM))
    gaussian.means[...] = means / jnp.linalg.norm(means, axis=-1, keepdims=True)  # equal norms, equal σ, π
    linear = _layer("topk_softmax").router
    linear.kernel[...] = gaussian.means[...].T
    np.testing.assert_array_equal(gaussian(x, mask).indices, linear(x, mask).indices)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"num_experts": 4, "top_k": 5}, "top_k must be at most num_experts"),
        ({"num_experts": 4, "capacity_factor": 0.0}, "capacity_factor must be a positive number, got 0.0"),
        ({"num_experts": 4, "capacity_factor": -1.0}, "capacity_factor must be a positive number, got -1.0"),
        ({"num_experts": 0}, "num_experts must be an integer"),
        ({"router": "softmax"}, "router must be one of"),
        ({"implementation": "pallas"}, r"implementation must be one of \['reference', 'xla'\], got 'pallas'"),
        ({"router": "mahalanobis", "router_options": (("ridge", 0.0),)}, "'ridge' must be > 0"),
        ({"router_options": (("temperature", 1.0),)}, "unknown topk_softmax router option 'temperature'"),
    ],
)
def test_bad_moe_config_raises_naming_the_field(fields, match):
    with pytest.raises(ValueError, match=match):
        MoEConfig(**fields)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"moe": MoEConfig(num_experts=4), "mlp_dim": 0}, "mlp_dim must not be 0"),
        ({"moe": MoEConfig(num_experts=4, router="mahalanobis", router_options=(("statistics", "running"),))},
         "statistics must be 'batch'"),
        ({"moe": {"num_experts": 4}}, "moe must be None or a MoEConfig, got dict"),
    ],
)
def test_bad_model_moe_options_raise_naming_the_field(fields, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**fields)


def test_a_model_runs_the_mahalanobis_router_on_batch_statistics():
    cfg = ModelConfig(moe=MoEConfig(num_experts=4, router="mahalanobis", router_options=(("ridge", 0.01),)))
    assert cfg.moe.router_options == (("ridge", 0.01),)
    assert cfg.resolved_moe.router_options == (("statistics", "batch"), ("ridge", 0.01))
    assert ModelConfig(moe=MoEConfig(num_experts=4)).resolved_moe == MoEConfig(num_experts=4)
    assert ModelConfig().resolved_moe is None


def test_greedy_returns_distinct_experts_for_every_k():
    sigma = covariance(*_random_statistics(10), "phi", 1e-3)
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(11), (30, EXPERTS)), axis=-1)
    for k in (2, EXPERTS):
        indices, gains = greedy_batch(probs, sigma, k)
        assert all(len(set(row)) == k for row in np.asarray(indices).tolist())
        assert float(gains.min()) >= 0
    assert list(itertools.islice(ROUTERS, 5)) == sorted(ROUTERS.names())


def test_softmax_gate_normalized_over_all_experts_takes_their_probabilities_unrenormalized():
    x = _inputs(8)
    chosen = route(_layer("topk_softmax").router, x)
    every = route(_layer("topk_softmax", router_options=(("normalize", "all"),)).router, x)
    np.testing.assert_array_equal(every.indices, chosen.indices)
    np.testing.assert_allclose(chosen.gates.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(every.gates, np.take_along_axis(np.asarray(every.probs), np.asarray(every.indices), -1),
                               rtol=1e-6)
    assert float(every.gates.sum(-1).max()) < 1.0
    with pytest.raises(ValueError, match="normalize.*'all'"):
        MoEConfig(num_experts=EXPERTS, top_k=TOP_K, router="topk_softmax", router_options=(("normalize", "al"),))
