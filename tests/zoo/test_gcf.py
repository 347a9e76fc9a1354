"""The GCF layer (icml26zoo.convex): the layer's invariants (Y-convexity with equality at the choice, soft → hard
within log J / β, the envelope gradient, midpoint convexity, an auction's IC / IR / payment), the official selection
formula on fixed inputs, the closed-form Gaussian optimal-transport map and weak duality, and bad input named."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.convex import (
    FiniteConvex,
    FitConfig,
    adaptive_temperature,
    fit,
    gaussian_ot_loss,
    menu_outcome,
    resolve_kernel,
    select,
)
from icml26zoo.convex import transport as ot

# Compiles dominate these small programs; nothing here compares bit-exactly against separately compiled code.
pytestmark = pytest.mark.usefixtures("fast_compile")

CALLABLE_KERNELS = {"smooth_callable": lambda x, y: jnp.sum(jnp.sin(x) * y) + jnp.sum(x * y)}


def layer(kernel="inner_product", sense="max", mode="hard", num=16, dim=3, **options):
    return FiniteConvex(num, dim, kernel=kernel, sense=sense, mode=mode, rngs=nnx.Rngs(0), **options)


def randomized(model, seed=1):
    model.intercepts[...] = jax.random.normal(jax.random.key(seed), model.intercepts.shape)
    return model


def points(num=64, dim=3, seed=2):
    return jax.random.normal(jax.random.key(seed), (num, dim))


@pytest.mark.parametrize("sense", ["max", "min"])
def test_value_bounds_every_option_with_equality_at_the_choice(sense):
    model = randomized(layer("negative_squared_distance", sense, default=(0.0, 0.0)))
    x = points()
    selection = model.select(x)
    y = jnp.concatenate([jnp.zeros((1, 3)), model.active_candidates()])
    b = jnp.concatenate([jnp.zeros(1), model.intercepts[...]])
    options = -jnp.sum(jnp.square(x[:, None] - y[None]), axis=-1) - b
    sign = 1.0 if sense == "max" else -1.0
    assert jnp.all(sign * (selection.value[:, None] - options) >= -1e-6)
    np.testing.assert_allclose(selection.value, options[jnp.arange(len(x)), selection.index], atol=1e-6)
    np.testing.assert_allclose(selection.choice, y[selection.index])


def test_soft_value_is_within_log_j_over_beta_of_the_max_and_converges():
    scores = 3.0 * jax.random.normal(jax.random.key(3), (32, 50))
    candidates = jax.random.normal(jax.random.key(4), (50, 2))
    exact = jnp.max(scores, axis=1)
    for temp in (0.5, 5.0, 50.0):
        soft = select(scores, candidates, mode="soft", temp=temp)
        beta = adaptive_temperature(scores, temp, 5000.0)[:, 0]
        gap = exact - soft.value
        assert jnp.all(gap >= -1e-5) and jnp.all(gap <= math.log(50) / beta + 1e-5)
    sharp = select(scores, candidates, mode="soft", temp=5000.0)
    np.testing.assert_allclose(sharp.value, exact, atol=2e-3)


@pytest.mark.parametrize("kernel", ["inner_product", "negative_squared_distance", "smooth_callable"])
def test_jax_grad_is_the_kernel_gradient_at_the_choice(kernel):
    model = randomized(layer(CALLABLE_KERNELS.get(kernel, kernel)))
    x = points()
    scores = resolve_kernel(model.kernel)(x, model.active_candidates()) - model.intercepts[...]
    top_two = jnp.sort(scores, axis=1)[:, -2:]
    away_from_ties = top_two[:, 1] - top_two[:, 0] > 1e-3  # ∇f is set-valued at a tie
    assert jnp.sum(away_from_ties) > 50
    grad = jax.grad(lambda inputs: jnp.sum(model(inputs)))(x)
    np.testing.assert_allclose(grad[away_from_ties], model.envelope_gradient(x)[away_from_ties], atol=1e-6)


def test_inner_product_layer_is_midpoint_convex():
    model = randomized(layer())
    x, x2 = points(seed=5), points(seed=6)
    assert jnp.all(model((x + x2) / 2) <= (model(x) + model(x2)) / 2 + 1e-6)


def test_menu_is_incentive_compatible_individually_rational_and_charges_its_price():
    menu = randomized(layer(num=24, dim=2, bounds=(0.0, 1.0), default=((0.0, 0.0), 0.0)))
    types = jax.random.uniform(jax.random.key(7), (128, 2))
    outcome = menu_outcome(menu, types)
    prices = jnp.concatenate([jnp.zeros(1), menu.intercepts[...]])
    chosen_prices = prices[menu.select(types).index]
    # IC: type i gains nothing by taking the item bought by any reported type k.
    misreport = types @ outcome.allocation.T - chosen_prices[None, :]
    assert jnp.all(misreport <= outcome.utility[:, None] + 1e-6)
    assert jnp.all(outcome.utility >= 0.0)  # IR through the default item (0, 0)
    np.testing.assert_allclose(outcome.payment, chosen_prices, atol=1e-6)
    np.testing.assert_allclose(outcome.payment, jnp.sum(types * outcome.allocation, 1) - outcome.utility, atol=1e-5)
    assert jnp.all((menu.active_candidates() >= 0.0) & (menu.active_candidates() <= 1.0))


def test_manelli_vincent_menu_earns_its_known_revenue():
    """The optimal two-good uniform menu (items at 2/3, the bundle at (4 − √2)/3) earns ≈ 0.549."""
    items = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    menu = layer(num=3, dim=2, candidates=items, default=((0.0, 0.0), 0.0))
    menu.intercepts[...] = jnp.array([2 / 3, 2 / 3, (4 - math.sqrt(2)) / 3])
    axis = (jnp.arange(400, dtype=jnp.float32) + 0.5) / 400
    types = jnp.stack(jnp.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    assert abs(float(jnp.mean(menu_outcome(menu, types).payment)) - 0.549) < 1e-3


def official_moded_max_soft(scores, candidates, temp, max_effective_temp):
    """The soft branch of `moded_max` in MoeenNehzati/gconvex tools/utils.py (commit
    85a5da444a146ea28945173e22e3d130163dae42), restated in float64 NumPy: span = clamp(max − min, ≥ 1e-3), β =
    clamp(temp / span, min = temp, max = max_effective_temp), w = softmax(β·s − max), value = Σ w·s, choice = w @ Y."""
    span = np.maximum(scores.max(1, keepdims=True) - scores.min(1, keepdims=True), 1e-3)
    beta = np.minimum(np.maximum(temp / span, temp), max_effective_temp)
    z = scores * beta
    w = np.exp(z - z.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    return (w * scores).sum(1), w @ candidates, beta[:, 0]


def test_selection_matches_the_official_formula_on_fixed_inputs():
    scores = np.array([[1.0, 5.0, 3.0], [0.0, 0.01, 0.002], [0.0, 0.0002, 0.0001], [-1.0, 0.3, 0.2]])
    candidates = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])
    # β by hand: span 4 → 5/4, raised to 5; span 0.01 → 500; span 2e-4 → 1e-3 floor → 5000, capped at 1000;
    # span 1.3 → 5/1.3, raised to 5.
    beta = adaptive_temperature(jnp.asarray(scores), 5.0, 1000.0)[:, 0]
    np.testing.assert_allclose(beta, [5.0, 500.0, 1000.0, 5.0], rtol=1e-5)
    value, choice, official_beta = official_moded_max_soft(scores, candidates, 5.0, 1000.0)
    np.testing.assert_allclose(beta, official_beta, rtol=1e-5)
    soft = select(jnp.asarray(scores), jnp.asarray(candidates), mode="soft", temp=5.0, max_effective_temp=1000.0)
    np.testing.assert_allclose(soft.value, value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(soft.choice, choice, rtol=1e-5, atol=1e-6)
    # min = −max(−s), as the official moded_min; STE: the hard value forward, the soft gradient backward.
    soft_min = select(jnp.asarray(scores), jnp.asarray(candidates), sense="min", mode="soft", temp=5.0)
    np.testing.assert_allclose(soft_min.value, -official_moded_max_soft(-scores, candidates, 5.0, 5000.0)[0], rtol=1e-5)
    ste = select(jnp.asarray(scores), jnp.asarray(candidates), mode="ste", temp=5.0, max_effective_temp=1000.0)
    np.testing.assert_allclose(ste.value, scores.max(1), rtol=1e-6)
    np.testing.assert_allclose(ste.choice, candidates[scores.argmax(1)])

    def total(mode):
        return lambda s: jnp.sum(select(s, jnp.asarray(candidates), mode=mode, temp=5.0).value)

    scores = jnp.asarray(scores)
    np.testing.assert_allclose(jax.grad(total("ste"))(scores), jax.grad(total("soft"))(scores))


def test_semi_discrete_dual_recovers_the_gaussian_monge_map():
    """μ = N(0, 1) → ν = N(1, 0.5²), quadratic cost: the map is x ↦ 1 + x/2 and W₂² = 1.25."""
    source, target, num = (0.0, 1.0), (1.0, 0.5), 100
    potential = FiniteConvex(num, 1, kernel="squared_distance", sense="min", mode="hard", trainable_candidates=False,
                             candidates=ot.gaussian_quantiles_1d(num, *target), rngs=nnx.Rngs(0))
    fit(potential, gaussian_ot_loss(source, 256, jnp.full((num,), 1.0 / num)),
        FitConfig(steps=300, learning_rate=0.1), seed=0)
    x = jnp.sort(source[0] + source[1] * jax.random.normal(jax.random.key(8), (400, 1)), axis=0)
    mapped = potential.select(x).choice[:, 0]
    assert jnp.all(jnp.diff(mapped) >= 0.0)  # monotone
    error = jnp.sqrt(jnp.mean(jnp.square(mapped - ot.gaussian_map_1d(x[:, 0], source, target))))
    assert error < 0.05
    np.testing.assert_allclose(mapped, x[:, 0] - 0.5 * potential.envelope_gradient(x)[:, 0], atol=1e-5)
    # Weak duality on samples: the transform over the sample (and a grid) makes dual ≤ the samples' optimal cost.
    y = target[0] + target[1] * jax.random.normal(jax.random.key(9), (400, 1))
    transform_points = jnp.concatenate([x, jnp.linspace(-5.0, 5.0, 201)[:, None]])
    dual = ot.kantorovich_dual(potential, x, y, transform_points)
    primal = ot.empirical_cost_1d(x[:, 0], y[:, 0])
    assert dual <= primal + 1e-5
    assert dual >= primal - 0.1  # and nearly tight: the learned potential is close to optimal


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="kernel must be one of"):
        layer("cosine")
    with pytest.raises(ValueError, match="sense must be one of"):
        layer(sense="maximum")
    with pytest.raises(ValueError, match="mode must be one of"):
        layer(mode="gumbel")
    with pytest.raises(ValueError, match="bounds must be a pair"):
        layer(bounds=(1.0, 0.0))
    with pytest.raises(ValueError, match="candidate_dim must equal dim"):
        layer(candidate_dim=2)
    with pytest.raises(ValueError, match=r"x must be a float array of shape \[B, n\]"):
        layer()(jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="default must be a pair"):
        layer(default=((0.0, 0.0), 0.0))
    with pytest.raises(ValueError, match="scores must have shape"):
        select(jnp.ones((4, 3)), jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="temp must be"):
        select(jnp.ones((4, 3)), jnp.ones((3, 2)), temp=0.0)
    with pytest.raises(ValueError, match="steps must be"):
        FitConfig(steps=0)
