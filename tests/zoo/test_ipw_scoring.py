"""The IPW scoring rule (icml26zoo.losses.ipw_scoring) against the closed forms of its design notes: partial
losses, link and inverse link, propriety on a grid and by gradient, the log-loss and Brier reductions, the
curvature the rule was derived from, its limits, optax fitting, the registered objective, and bad input."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.losses import ipw_scoring as ipw
from icml26zoo.registry import OBJECTIVES

QS = np.array([0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98])
PS = np.array([0.05, 0.2, 0.5, 0.8, 0.95])
GRID = np.linspace(0.0005, 0.9995, 1999)  # spacing 5e-4; every GRID_P is a grid point
GRID_PS = np.array([0.01, 0.05, 0.2, 0.5, 0.8, 0.95, 0.99])
ROUND_TRIP_QS = np.array([0.02, 0.3, 0.5, 0.9])
RULE_NAMES = ("ipw", "ipw_bias", "log", "brier")
SCALED_RULE = ipw.IPWRule(treated_scale=4.0, control_scale=0.25)
pytestmark = pytest.mark.usefixtures("fast_compile")


@pytest.fixture(autouse=True)
def float64():
    """Closed forms are compared in float64 (the spec's 1e-10 link round trip needs it)."""
    with jax.enable_x64(True):
        yield


def _expected(q, p, rule):
    """E_{y ~ Bernoulli(p)} ℓ(q, y)."""
    return p * ipw.scoring_loss(q, jnp.ones_like(q), rule) + (1 - p) * ipw.scoring_loss(q, jnp.zeros_like(q), rule)


def _expected_grid(grid, grid_ps, rule):
    """E ℓ(q, y) for every p [P'] and q in grid [G] -> [P', G]."""
    return jax.vmap(lambda p: _expected(grid, p, rule))(grid_ps)


@functools.partial(jax.jit, static_argnames="rule")
def _measure(q, ps, grid, grid_ps, round_trip_qs, rule):
    """Everything the rule's tests compare, in one compiled program per rule (compiling dominates):

    losses / mirrored: (ℓ(q, 1), ℓ(q, 0)) at q and at 1 − q [Q]; slopes: autodiff ∂ℓ(q, y)/∂q for y = 1, 0;
    canonical_q, canonical_grads, canonical_curvature: q(f) at f = ψ(q), ∂ℓ(q(f), y)/∂f for y = 0, 1
    and ∂²ℓ/∂f²; expected_grid: E ℓ over grid [P', G]; expected_slopes [P, Q], slope_at_p and curvature_at_p [P]
    of the expected score; round_trip: ψ⁻¹(ψ(q)) and ψ(ψ⁻¹(ψ(q))).
    """
    link = ipw.get_rule(rule).link
    losses = lambda q: (ipw.scoring_loss(q, jnp.ones_like(q), rule), ipw.scoring_loss(q, jnp.zeros_like(q), rule))
    slope = jax.vmap(jax.grad(lambda q, y: ipw.scoring_loss(q, y, rule)), in_axes=(0, None))
    canonical = lambda f, y: ipw.canonical_scoring_loss(f, y, rule)
    scores = link(q)
    expected_slope = jax.grad(_expected)
    back = ipw.inverse_link(link(round_trip_qs), rule)
    return {
        "losses": losses(q), "mirrored": losses(1 - q), "slopes": (slope(q, 1.0), slope(q, 0.0)),
        "canonical_q": ipw.inverse_link(scores, rule),
        "canonical_grads": [jax.vmap(jax.grad(canonical), in_axes=(0, None))(scores, y) for y in (0.0, 1.0)],
        # ℓ is affine in y, so its curvature in f is the same for both labels.
        "canonical_curvature": jax.vmap(jax.grad(jax.grad(canonical)), in_axes=(0, None))(scores, 1.0),
        "expected_grid": _expected_grid(grid, grid_ps, rule),
        "expected_slopes": jax.vmap(lambda p: jax.vmap(expected_slope, in_axes=(0, None, None))(q, p, rule))(ps),
        "slope_at_p": jax.vmap(lambda p: expected_slope(p, p, rule))(ps),
        "curvature_at_p": jax.vmap(lambda p: jax.grad(expected_slope)(p, p, rule))(ps),
        "round_trip": (back, link(back)),
    }


@functools.cache
def _measured(rule):
    """`_measure`'s results for `rule` as numpy arrays, computed once per test session."""
    return jax.device_get(_measure(*(jnp.asarray(a) for a in (QS, PS, GRID, GRID_PS, ROUND_TRIP_QS)), rule=rule))


@functools.partial(jax.jit, static_argnames="rule")
def _partial_losses(q, rule):
    """(ℓ(q, 1), ℓ(q, 0)) for q [Q]."""
    return ipw.scoring_loss(q, jnp.ones_like(q), rule), ipw.scoring_loss(q, jnp.zeros_like(q), rule)


def test_ipw_partial_losses_weight_potential_and_link_match_the_spec_closed_forms():
    q = QS
    treated, control = _measured("ipw")["losses"]
    np.testing.assert_allclose(treated, (1 - 2 * q) / (2 * q**2) - 1 / (1 - q), rtol=1e-12)
    np.testing.assert_allclose(control, (2 * q - 1) / (2 * (1 - q) ** 2) - 1 / q, rtol=1e-12)
    rule = ipw.IPWRule()
    np.testing.assert_allclose(rule.weight(q), 1 / q**3 + 1 / (1 - q) ** 3, rtol=1e-12)
    np.testing.assert_allclose(rule.potential(q), 1 / (2 * q * (1 - q)), rtol=1e-12)
    np.testing.assert_allclose(rule.link(q), 1 / (2 * (1 - q) ** 2) - 1 / (2 * q**2), rtol=1e-12, atol=1e-12)
    s = 2 * q - 1
    np.testing.assert_allclose(rule.link(q), 8 * s / (1 - s**2) ** 2, rtol=1e-12, atol=1e-12)


def test_bias_rule_matches_its_closed_form():
    q = QS
    treated, _ = _measured("ipw_bias")["losses"]
    np.testing.assert_allclose(treated, np.log(q) + np.log(1 - q) + (1 - q) / q - 1, rtol=1e-12)
    np.testing.assert_allclose(ipw.IPWBiasRule().weight(jnp.asarray(q)), 1 / q**2 + 1 / (1 - q) ** 2, rtol=1e-12)


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_symmetry_savage_slopes_and_canonical_derivatives(rule):
    # ℓ(q, 0) = ℓ(1 − q, 1); ∂ℓ(q, 1)/∂q = −(1 − q) w(q), ∂ℓ(q, 0)/∂q = q w(q); ∂ℓ(q(f), y)/∂f = q − y and
    # ∂²ℓ/∂f² = 1/w(q) through the canonical link (Brier's bounded link is checked inside its range).
    weight = ipw.get_rule(rule).weight
    measured = _measured(rule)
    np.testing.assert_allclose(measured["losses"][1], measured["mirrored"][0], rtol=1e-12, atol=1e-12)
    treated, control = measured["slopes"]
    np.testing.assert_allclose(treated, -(1 - QS) * weight(QS), rtol=1e-10)
    np.testing.assert_allclose(control, QS * weight(QS), rtol=1e-10)
    probs = measured["canonical_q"]
    for y, grad in zip((0.0, 1.0), measured["canonical_grads"], strict=True):
        np.testing.assert_allclose(grad, probs - y, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(measured["canonical_curvature"], 1 / weight(probs), rtol=1e-9)


@pytest.mark.parametrize("rule", (*RULE_NAMES, SCALED_RULE))
def test_propriety_expected_score_is_strictly_minimised_at_the_truth_on_a_grid(rule):
    if rule is SCALED_RULE:
        expected = jax.jit(_expected_grid, static_argnames="rule")(jnp.asarray(GRID), jnp.asarray(GRID_PS), rule=rule)
    else:
        expected = _measured(rule)["expected_grid"]
    for p, row in zip(GRID_PS, np.asarray(expected), strict=True):
        at_p = int(np.argmin(np.abs(GRID - p)))
        assert int(np.argmin(row)) == at_p, (rule, p)
        assert np.all(np.delete(row, at_p) > row[at_p]), (rule, p)  # strict: no other q ties


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_propriety_by_gradient_slope_is_w_times_q_minus_p_and_curvature_w(rule):
    weight = ipw.get_rule(rule).weight
    slopes, at_p, curvature = (_measured(rule)[k] for k in ("expected_slopes", "slope_at_p", "curvature_at_p"))
    want = np.asarray(weight(QS))[None, :] * (QS[None, :] - PS[:, None])
    np.testing.assert_allclose(slopes, want, rtol=1e-9, atol=1e-9)
    assert np.all(np.sign(np.asarray(slopes)) == np.sign(QS[None, :] - PS[:, None]))
    assert np.all(np.abs(np.asarray(at_p)) < 1e-9)
    np.testing.assert_allclose(curvature, weight(PS), rtol=1e-9)


def test_ipw_weight_is_half_the_curvature_of_the_ipw_weights_squared_error():
    def weight_error(q, p):
        return p * (1 / q - 1 / p) ** 2 + (1 - p) * (1 / (1 - q) - 1 / (1 - p)) ** 2

    ps = jnp.asarray([0.02, 0.3, 0.5, 0.9])
    curvature = jax.jit(jax.vmap(lambda p: jax.grad(jax.grad(weight_error))(p, p)))(ps)
    np.testing.assert_allclose(curvature, 2 / ps**3 + 2 / (1 - ps) ** 3, rtol=1e-10)
    np.testing.assert_allclose(curvature, 2 * ipw.IPWRule().weight(ps), rtol=1e-10)


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_inverse_link_round_trips_to_1e_10(rule):
    back, scores_back = _measured(rule)["round_trip"]
    np.testing.assert_allclose(back, ROUND_TRIP_QS, rtol=1e-10, atol=0)
    np.testing.assert_allclose(scores_back, ipw.get_rule(rule).link(jnp.asarray(ROUND_TRIP_QS)), rtol=1e-10,
                               atol=1e-12)


def test_ipw_link_is_zero_at_one_half_and_odd_around_it():
    link = ipw.IPWRule().link
    assert float(link(jnp.float64(0.5))) == 0.0
    np.testing.assert_allclose(link(jnp.asarray(1 - QS)), -link(jnp.asarray(QS)), rtol=1e-12)
    scores = jnp.asarray([-1e4, -3.0, 0.0, 0.7, 250.0])
    np.testing.assert_allclose(ipw.inverse_link(-scores), 1 - ipw.inverse_link(scores), rtol=1e-12, atol=1e-15)


def test_inverse_link_derivative_matches_finite_differences_of_the_bisection():
    scores = jnp.asarray([-1249.0, -4.5, 0.0, 0.3, 49.0])
    h = 1e-5 * jnp.maximum(1.0, jnp.abs(scores))
    finite = (ipw.inverse_link(scores + h) - ipw.inverse_link(scores - h)) / (2 * h)
    np.testing.assert_allclose(jax.jit(jax.vmap(jax.grad(ipw.inverse_link)))(scores), finite, rtol=1e-6)


def test_log_loss_weight_in_the_same_code_path_is_logistic_log_loss_and_the_logit_link():
    q, y = jnp.asarray(QS), jnp.asarray([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(ipw.scoring_loss(q, y, "log"), -y * jnp.log(q) - (1 - y) * jnp.log1p(-q),
                               rtol=1e-12)
    logits = jnp.asarray([-8.0, -1.5, 0.0, 0.4, 6.0, 2.0, -3.0])
    np.testing.assert_allclose(ipw.inverse_link(logits, "log"), jax.nn.sigmoid(logits), rtol=1e-12)
    np.testing.assert_allclose(ipw.canonical_scoring_loss(logits, y, "log"),
                               optax.losses.sigmoid_binary_cross_entropy(logits, y), rtol=1e-10)
    np.testing.assert_allclose(ipw.sigmoid_scoring_loss(logits, y, "log"),
                               optax.losses.sigmoid_binary_cross_entropy(logits, y), rtol=1e-10)


def test_constant_weight_is_the_brier_score():
    q, y = jnp.asarray(QS), jnp.asarray([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(ipw.scoring_loss(q, y, "brier"), (q - y) ** 2, rtol=1e-12, atol=1e-15)


def test_outcome_scales_reduce_to_the_default_rule_and_scale_each_side():
    q = jnp.asarray(QS)
    scaled = _partial_losses(q, ipw.IPWRule(treated_scale=3.0, control_scale=3.0))
    for got, want in zip(scaled, _partial_losses(q, "ipw"), strict=True):
        np.testing.assert_allclose(got, 3.0 * want, rtol=1e-12)
    rule = ipw.IPWRule(treated_scale=2.0, control_scale=0.5)
    np.testing.assert_allclose(rule.weight(q), 2 / QS**3 + 0.5 / (1 - QS) ** 3, rtol=1e-12)
    np.testing.assert_allclose(rule.link(q), 0.5 / (2 * (1 - QS) ** 2) - 2 / (2 * QS**2), rtol=1e-12)


def test_limits_cubic_weight_near_zero_and_unbounded_reward_near_one():
    rule, log_rule = ipw.IPWRule(), ipw.LogLossRule()
    small = jnp.asarray([1e-2, 1e-3, 1e-4])
    np.testing.assert_allclose(rule.weight(small) * small**3, 1.0, rtol=1.1e-2)
    ratio = rule.weight(small) / log_rule.weight(small)
    assert np.all(np.diff(np.asarray(ratio)) > 0) and float(ratio[-1]) > 1e7  # ~1/q² times log-loss's weight
    near_one = jnp.asarray([0.9, 0.99, 0.999, 0.9999])
    reward = _partial_losses(near_one, "ipw")[0]
    assert np.all(np.diff(np.asarray(reward)) < 0) and float(reward[-1]) < -9000  # ℓ(q, 1) ≈ −1/(1 − q)


def test_clip_floors_the_propensity_and_stops_its_gradient():
    clipped = ipw.scoring_loss(jnp.asarray([0.0, 1e-5, 1.0]), jnp.asarray([1.0, 1.0, 1.0]), clip=1e-3)
    want = _partial_losses(jnp.asarray([1e-3, 1e-3, 1 - 1e-3]), "ipw")[0]
    np.testing.assert_allclose(clipped, want, rtol=1e-12)
    assert float(jax.jit(jax.grad(lambda q: ipw.scoring_loss(q, 1.0, clip=1e-3)))(jnp.float64(1e-5))) == 0.0


def test_optax_fit_of_a_constant_propensity_recovers_the_sample_mean():
    # For any proper rule, the constant q minimising the empirical loss is the treated fraction. In float32:
    # optax's L-BFGS mixes int32 and int64 counters under x64 with strict promotion.
    with jax.enable_x64(False):
        _fit_constant_propensity()


def _fit_constant_propensity():
    treated = (jax.random.uniform(jax.random.key(0), (200,)) < 0.15).astype(jnp.float32)
    objective = lambda f: jnp.mean(ipw.canonical_scoring_loss(jnp.broadcast_to(f, treated.shape), treated))
    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    @jax.jit
    def fit(score):
        def step(carry, _):
            score, state = carry
            value, grad = value_and_grad(score, state=state)
            updates, state = solver.update(grad, state, score, value=value, grad=grad, value_fn=objective)
            return (optax.apply_updates(score, updates), state), None

        return jax.lax.scan(step, (score, solver.init(score)), length=40)[0][0]

    np.testing.assert_allclose(ipw.inverse_link(fit(jnp.float32(0.0))), jnp.mean(treated), rtol=1e-5)


class _FixedLogits:
    """A stand-in model returning the same logits [B, T, 2] whatever the tokens."""

    def __init__(self, logits):
        self.logits = logits

    def __call__(self, inputs, *, segment_ids, positions):
        return self.logits


def _batch(labels, segment_ids):
    zeros = jnp.zeros(segment_ids.shape, jnp.int32)
    return {"inputs": zeros, "positions": zeros, "segment_ids": segment_ids, "labels": labels}


def test_registered_objective_is_the_clipped_canonical_loss_over_rows_with_tokens():
    objective = OBJECTIVES.get("ipw_scoring")
    # Row 0 pools to logits (−450, 0): score f = 450, q ≈ 0.97 against T = 0 (wrong); row 1 pools to
    # (0.5, 0.5): f = 0, q = 1/2, predicted 0 = T (right); row 2 is padding.
    logits = jnp.asarray([[[0.0, 0.0], [-900.0, 0.0]], [[0.5, 0.5], [9.0, 9.0]], [[1.0, 2.0], [3.0, 4.0]]],
                         jnp.float32)
    segment_ids = jnp.asarray([[1, 1], [1, 0], [0, 0]], jnp.int32)
    labels = jnp.asarray([0, 0, 7], jnp.int32)  # a padding row's label is never read
    loss, metrics = objective(_FixedLogits(logits), _batch(labels, segment_ids), jax.random.key(0))
    scores = jnp.asarray([450.0, 0.0], jnp.float32)
    want = ipw.canonical_scoring_loss(scores, jnp.zeros(2, jnp.float32), clip=ipw.OBJECTIVE_CLIP)
    np.testing.assert_allclose(loss, jnp.mean(want), rtol=1e-5)
    np.testing.assert_allclose(metrics["loss_sum"], jnp.sum(want), rtol=1e-5)
    assert float(metrics["weight"]) == 2.0 and float(metrics["correct"]) == 1.0
    traced = jax.jit(lambda b: objective(_FixedLogits(logits), b, jax.random.key(0))[0])
    np.testing.assert_allclose(traced(_batch(labels, segment_ids)), loss, rtol=1e-5)
    assert np.isnan(float(traced(_batch(jnp.asarray([1, 2, 0], jnp.int32), segment_ids))))  # T = 2 on a row


def test_objective_bad_labels_raise_naming_them():
    objective = OBJECTIVES.get("ipw_scoring")
    model, segment_ids = _FixedLogits(jnp.zeros((2, 1, 2))), jnp.ones((2, 1), jnp.int32)
    with pytest.raises(ValueError, match=r"batch\['labels'\] must be 0 or 1"):
        objective(model, _batch(jnp.asarray([0, 3], jnp.int32), segment_ids), jax.random.key(0))
    with pytest.raises(ValueError, match="needs batch fields .*missing \\['labels'\\]"):
        objective(model, {"inputs": segment_ids, "positions": segment_ids, "segment_ids": segment_ids},
                  jax.random.key(0))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ipw.scoring_loss(jnp.asarray([0.2, 0.0]), jnp.asarray([1.0, 0.0])), r"probs .* \(0, 1\).*0\.0"),
        (lambda: ipw.scoring_loss(jnp.asarray([0.2, 1.0]), 1.0), r"probs .*1\.0"),
        (lambda: ipw.scoring_loss(jnp.asarray([1.5]), 1.0, clip=0.01), r"probs .*\[0, 1\].*1\.5"),
        (lambda: ipw.scoring_loss(jnp.asarray([jnp.nan]), 1.0), "probs"),
        (lambda: ipw.scoring_loss(jnp.asarray([1, 0]), 1.0), "probs must be a floating-point array"),
        (lambda: ipw.scoring_loss(jnp.asarray([0.2, 0.3]), jnp.asarray([1.0, 2.0])), r"labels .* 0 or 1.*2\.0"),
        (lambda: ipw.scoring_loss(jnp.asarray([0.2]), jnp.asarray([0.5])), r"labels .*0\.5"),
        (lambda: ipw.canonical_scoring_loss(jnp.asarray([0.2]), jnp.asarray([-1.0])), "labels"),
        (lambda: ipw.sigmoid_scoring_loss(jnp.asarray([0.2]), jnp.asarray([3])), "labels"),
        (lambda: ipw.scoring_loss(jnp.asarray([0.2, 0.3]), jnp.zeros(3)), "labels must broadcast"),
        (lambda: ipw.scoring_loss(jnp.asarray([0.2]), 1.0, clip=0.5), "clip"),
        (lambda: ipw.scoring_loss(jnp.asarray([0.2]), 1.0, clip=-0.1), "clip"),
        (lambda: ipw.scoring_loss(jnp.asarray([0.2]), 1.0, rule="hinge"), "rule must be"),
        (lambda: ipw.IPWRule(treated_scale=0.0), "treated_scale"),
        (lambda: ipw.IPWRule(control_scale=float("inf")), "control_scale"),
        (lambda: ipw.inverse_link(jnp.asarray([1, 2])), "scores must be a floating-point array"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_float32_inverse_link_and_clipped_loss_stay_finite_at_extreme_scores():
    with jax.enable_x64(False):
        scores = jnp.asarray([-1e12, -1e6, -3.0, 0.0, 3.0, 1e6, 1e12], jnp.float32)
        q = ipw.inverse_link(scores)
        assert q.dtype == jnp.float32 and np.all((np.asarray(q) >= 0) & (np.asarray(q) <= 1))
        assert np.all(np.diff(np.asarray(q)) >= 0)
        grads = jax.jit(jax.grad(lambda f: jnp.sum(ipw.canonical_scoring_loss(f, jnp.ones_like(f), clip=1e-3))))(
            scores)
        assert np.all(np.isfinite(np.asarray(grads)))
