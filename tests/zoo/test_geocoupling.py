"""GeoCoupling (icml26zoo.bio.geocoupling; invariants 1-7): the monotone curve with exact endpoints, sync
times equal a single-time baseline bitwise, random coupling's marginals, the path cost's invariances, the DP
recovering a valley, the GP interpolating, the sampler's endpoints and a structure-first schedule; the denoiser
sees both times; the fold-and-label toy's labels and metrics; the upper level on a synthetic surface; bad input
named. Test 8 (the paper's claim on the toy) is the experiment's, reported on docs/papers/geocoupling.md."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from icml26zoo.bio import geocoupling as geo
from icml26zoo.bio import geocoupling_toy as toy
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.registry import OBJECTIVES

pytestmark = pytest.mark.usefixtures("fast_compile")


def _valley(points):
    """A loss surface [2, P] with a valley along t_s = t_x² (both modalities)."""
    value = 1.0 + 50.0 * (points[:, 1] - points[:, 0] ** 2) ** 2
    return jnp.stack([value, value])


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(name="geocoupling_denoiser", d_model=16, num_layers=1, num_heads=2, mlp_dim=32, max_seq_len=12,
                      model_options=(("num_tokens", 4), ("time_features", 8), ("rbf_centres", 4)))
    return build_model(cfg, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def data():
    points, tokens, _ = toy.fold_and_label(3, np.random.default_rng(0))
    return jnp.asarray(points), jnp.asarray(tokens), jnp.ones(tokens.shape, jnp.float32)


def test_curve_is_monotone_with_exact_endpoints_and_constant_logits_give_the_diagonal():
    tau = jnp.linspace(0.0, 1.0, 257)
    logits = jax.random.normal(jax.random.key(0), (2, 16)) * 3.0
    times = np.asarray(geo.CouplingCurve(logits)(tau))
    assert np.all(np.diff(times, axis=0) >= 0)
    assert np.all(times[0] == 0.0) and np.all(times[-1] == 1.0)
    diagonal = np.asarray(geo.CouplingCurve.diagonal(16)(tau))
    np.testing.assert_allclose(diagonal, np.stack([tau, tau], 1), atol=1e-6)
    # fit_path through a structure-leading path: the fitted curve stays on it and its knots sum to 2τ.
    path = np.stack([np.linspace(0, 1, 50), np.linspace(0, 1, 50) ** 2], 1)
    fitted = geo.CouplingCurve.fit_path(path, 16)(tau)
    np.testing.assert_allclose(fitted[:, 1], fitted[:, 0] ** 2, atol=5e-3)
    np.testing.assert_allclose(fitted.sum(axis=1), 2 * tau, atol=1e-5)


def test_sync_times_give_bitwise_the_loss_of_a_single_time_baseline(model, data):
    x1, s1, mask = data
    batch = {"points": x1, "targets": s1[..., None].astype(jnp.float32), "weights": mask,
             "features": jnp.zeros(x1.shape[:2] + (0,))}
    options = OBJECTIVES.get("geocoupling_codesign").options_class(train_times="sync")
    rng = jax.random.key(3)

    def coupled(model):
        return OBJECTIVES.get("geocoupling_codesign")(model, batch, rng, options)[0]

    def single_time(model):
        # One time t per row drives both modalities (the synchronous baseline, written out here).
        time_key, corrupt_key = jax.random.split(rng)
        t = jax.random.uniform(time_key, (x1.shape[0],), minval=options.min_t, maxval=1.0 - options.min_t)
        noise_key, mask_key = jax.random.split(corrupt_key)
        x0 = geo.CoDesignInterpolant(4).prior(noise_key, mask)
        x_t = jnp.where((mask > 0)[..., None], (1.0 - t[:, None, None]) * x0 + t[:, None, None] * x1, 0.0)
        s_t = jnp.where((jax.random.uniform(mask_key, s1.shape) >= t[:, None]) | (mask <= 0), 4, s1)
        times = jnp.stack([t, t], axis=1)
        x_hat, logits = model(x_t, s_t.astype(jnp.int32), times, mask)
        count = jnp.maximum(jnp.sum(mask, axis=1), 1.0)
        l_x = jnp.sum(mask * jnp.sum(jnp.square(x_hat - x1), -1), 1) / count
        ce = -jnp.take_along_axis(jax.nn.log_softmax(logits), s1[..., None], axis=-1)[..., 0]
        l_s = jnp.sum(mask * (s_t == 4).astype(jnp.float32) * ce, 1) / count
        w_x = jnp.minimum(1.0 / jnp.maximum(jnp.square(1.0 - t), 1e-6), 20.0)
        w_s = jnp.minimum(1.0 / jnp.maximum(1.0 - t, 1e-6), 20.0)
        losses = jnp.stack([w_x * l_x, w_s * l_s], 1).sum(1)
        return jnp.sum(losses) / x1.shape[0]

    assert jax.jit(coupled)(model) == jax.jit(single_time)(model)


def test_random_coupling_is_uniform_and_independent_and_folding_pins_times():
    cfg = geo.GeoCouplingConfig(train_times="random", min_t=0.01)
    t = np.asarray(geo.sample_times(jax.random.key(0), 4000, cfg))
    for column in (0, 1):
        assert stats.kstest(t[:, column], stats.uniform(0.01, 0.98).cdf).pvalue > 0.01
    assert abs(np.corrcoef(t.T)[0, 1]) < 0.05
    folded = geo.sample_times(jax.random.key(1), 64, geo.GeoCouplingConfig(train_times="random", p_forward_fold=1.0))
    assert np.all(np.asarray(folded)[:, 1] == 1.0)
    inverse = geo.sample_times(jax.random.key(1), 64, geo.GeoCouplingConfig(train_times="random", p_inverse_fold=1.0))
    assert np.all(np.asarray(inverse)[:, 0] == 1.0)
    # Band times without random mixing: within `band` of the curve (the diagonal), inside [min_t, 1 − min_t].
    band = np.asarray(geo.sample_times(jax.random.key(2), 512, geo.GeoCouplingConfig(train_times="band", p_rand=0.0)))
    assert np.all(np.abs(band[:, 0] - band[:, 1]) / np.sqrt(2) <= 0.05 + 1e-6)
    assert band.min() >= 1e-3 and band.max() <= 1 - 1e-3 and np.std(band[:, 0] - band[:, 1]) > 0.01


def test_path_cost_is_a_line_integral():
    curve = geo.CouplingCurve(jax.random.normal(jax.random.key(1), (2, 16)))
    cost = geo.path_cost(curve, _valley, points=512)
    reparameterised = geo.path_cost(lambda tau: curve(tau**3), _valley, points=512)
    assert abs(float(cost - reparameterised)) <= 1e-3 * float(cost)
    diagonal = geo.path_cost(geo.CouplingCurve.diagonal(), _valley, points=512)
    tau = np.linspace(0.0, 1.0, 20001)
    one_d = np.trapezoid(2 * (1.0 + 50.0 * (tau - tau**2) ** 2), tau)
    np.testing.assert_allclose(float(diagonal), one_d, rtol=1e-4)
    for monotone in (curve, geo.CouplingCurve.diagonal()):
        np.testing.assert_allclose(float(geo.path_cost(monotone, lambda p: jnp.full((2, len(p)), 0.7))), 1.4, rtol=1e-5)


def test_dp_recovers_a_valley_within_one_cell_and_the_jittable_dp_matches_the_reference():
    size = 16
    axis = np.linspace(0.0, 1.0, size)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    cost = np.asarray(_valley(jnp.asarray(grid))).T.reshape(size, size, 2).astype(np.float32)
    path, total = geo.geodesic_dp_reference(cost, 3)
    assert tuple(path[0]) == (0, 0) and tuple(path[-1]) == (size - 1, size - 1)
    assert np.all(np.diff(path, axis=0) >= 0)
    assert np.all(np.abs(path[:, 1] - (path[:, 0] / (size - 1)) ** 2 * (size - 1)) <= 1.0 + 1e-9)
    jitted, length, jit_total = jax.jit(geo.geodesic_dp, static_argnums=(1, 2))(cost, 3, "line_integral")
    np.testing.assert_array_equal(np.asarray(jitted)[: int(length)], path)
    assert np.all(np.asarray(jitted)[int(length):] == size - 1)
    np.testing.assert_allclose(float(jit_total), total, rtol=1e-5)
    budgeted, _ = geo.geodesic_dp_reference(cost, 3, "budgeted_sum")
    assert tuple(budgeted[-1]) == (size - 1, size - 1)


def test_gp_interpolates_noise_free_observations_with_nonnegative_variance():
    x = np.random.default_rng(0).uniform(size=(25, 2))
    y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2
    gp = geo.GPSurface.fit(x, y, lengthscales=(0.3, 0.3), noise=0.0, jitter=1e-6)
    assert np.max(np.abs(gp.posterior_mean(x) - y)) <= 1e-4
    probe = np.random.default_rng(1).uniform(size=(50, 2))
    assert np.all(gp.posterior_variance(probe) >= 0) and np.all(gp.posterior_variance(x) < 1e-4)
    fitted = geo.GPSurface.fit(x, y + 0.01 * np.random.default_rng(2).normal(size=25))  # hyperparameter search
    assert np.max(np.abs(fitted.posterior_mean(probe) - (np.sin(3 * probe[:, 0]) + probe[:, 1] ** 2))) < 0.2


def test_sampler_ends_at_data_and_a_structure_first_curve_keeps_the_sequence_masked(model):
    steps, mask = 8, jnp.ones((2, 12), jnp.float32)
    half = jnp.full((8,), 0.0), jnp.full((8,), -1e9)
    structure_first = jnp.stack([jnp.concatenate(half), jnp.concatenate(half[::-1])])
    times = geo.CouplingCurve(structure_first)(jnp.linspace(0, 1, steps + 1))
    assert np.all(np.asarray(times[-1]) == 1.0) and np.all(np.asarray(times[: steps // 2 + 1, 1]) == 0.0)
    run = jax.jit(lambda logits: geo.sample(model, logits, jax.random.key(0), steps, mask))
    for logits in (structure_first, jnp.zeros((2, 16))):
        x, s, masked = run(logits)
        assert np.all(np.asarray(s) < 4) and np.isfinite(np.asarray(x)).all()
    _, _, masked = run(structure_first)
    assert np.all(np.asarray(masked)[: steps // 2 + 1] == 1.0)
    # Once t_s moves (Δt_s = 1/4 per step), residues are revealed: 24 stay masked with probability 0.75^24.
    assert float(masked[steps // 2 + 1]) < 1.0


def test_denoiser_embeds_both_times_and_loss_surface_uses_common_random_numbers(model, data):
    x1, s1, mask = data
    x_t, s_t = geo.CoDesignInterpolant(4).corrupt(jax.random.key(0), x1, s1, jnp.full((3, 2), 0.5), mask)
    base = model(x_t, s_t, jnp.full((3, 2), 0.5), mask)
    moved = model(x_t, s_t, jnp.array([[0.5, 0.9]] * 3), mask)
    assert not np.allclose(base[0], moved[0]) and not np.allclose(base[1], moved[1])
    points = jnp.array([[0.2, 0.3], [0.2, 0.3], [0.8, 0.1]])
    surface = geo.loss_surface(model, x1, s1, mask, points, jax.random.key(1))
    assert surface.shape == (2, 3) and np.all(np.asarray(surface) <= 20.0)
    np.testing.assert_array_equal(surface[:, 0], surface[:, 1])  # same point, same random numbers


def test_upper_level_moves_the_curve_to_a_structure_first_valley():
    cfg = geo.GeoCouplingConfig(grid=16)
    points = geo.design_points(6, cfg.min_t)
    # Sequence loss is cheap once structure is denoised: a valley along t_s = t_x².
    losses = np.asarray(_valley(jnp.asarray(points)))
    curve, found = geo.geodesic_update(points, losses, cfg)
    times = np.asarray(curve(jnp.linspace(0, 1, 101)))
    assert np.mean(times[:, 0] >= times[:, 1]) >= 0.8 and found["grid"].shape == (16, 16, 2)


def test_fold_and_label_labels_and_metrics():
    np.testing.assert_array_equal(toy.labels(toy.templates())[3], np.full(12, 2))  # ring: two neighbours each
    points, tokens, fold = toy.fold_and_label(16, np.random.default_rng(1))
    result = toy.metrics(points, tokens)
    assert result["consistency"] == 1.0 and result["validity"] == 1.0 and result["diversity"] > 0.5
    assert np.all(toy.nearest_template(points)[0] == fold)
    shuffled = toy.metrics(np.random.default_rng(2).normal(size=(16, 12, 3)) * 2, tokens)
    assert shuffled["validity"] == 0.0 and shuffled["diversity"] == 0.0


@pytest.mark.parametrize(("build", "message"), [
    (lambda: geo.CouplingCurve(jnp.zeros((2, 1))), r"knots must be an integer >= 2, got 1"),
    (lambda: geo.GeoCouplingConfig(knots=1), r"knots"),
    (lambda: geo.GeoCouplingConfig(min_t=0.5), r"min_t"),
    (lambda: geo.GeoCouplingConfig(min_t=0.0), r"min_t"),
    (lambda: geo.GeoCouplingConfig(p_rand=1.5), r"p_rand"),
    (lambda: geo.GeoCouplingConfig(p_forward_fold=-0.1), r"p_forward_fold"),
    (lambda: geo.GeoCouplingConfig(train_times="diagonal"), r"train_times"),
    (lambda: toy.metrics(np.full((1, 12, 3), np.nan), np.zeros((1, 12))), r"points must be finite"),
    (lambda: geo.CoDesignInterpolant(4).corrupt(jax.random.key(0), jnp.full((1, 12, 3), jnp.nan),
                                                jnp.zeros((1, 12), jnp.int32), jnp.zeros((1, 2)), jnp.ones((1, 12))),
     r"x1 must be finite"),
    (lambda: geo.geodesic_dp_reference(np.zeros((4, 5, 2), np.float32)), r"cost must be a square grid"),
])
def test_bad_input_is_a_value_error_naming_the_argument(build, message):
    with pytest.raises(ValueError, match=message):
        build()
