"""Cubic-damped SGD / Adam and the adaptive-friction heavy ball (arXiv 2602.00334): exact reductions, bounds,
damping and friction behaviour, hyperparameters."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.optim import cubic_damping as cd
from icml26zoo.registry import OPTIMIZERS
from icml26zoo.train.config import OptimConfig

EPS32 = float(np.finfo(np.float32).eps)


def _params(key=0):
    k1, k2 = jax.random.split(jax.random.PRNGKey(key))
    return {"w": jax.random.normal(k1, (6, 5)), "b": jax.random.normal(k2, (5,))}


def _grads(step, params, scale=1.0):
    key = jax.random.fold_in(jax.random.PRNGKey(1), step)
    return jax.tree.map(lambda p: scale * jax.random.normal(key, p.shape, p.dtype), params)


def _run(tx, params, num_steps, scale=1.0, standard_promotion=False):
    """Applies `num_steps` random-gradient updates under jit; returns the params after each step."""
    update = jax.jit(tx.update)
    state, history = tx.init(params), []
    for step in range(num_steps):
        if standard_promotion:  # optax.adam's bias correction is not strict-promotion clean
            with jax.numpy_dtype_promotion("standard"):
                updates, state = update(_grads(step, params, scale), state, params)
        else:
            updates, state = update(_grads(step, params, scale), state, params)
        params = optax.apply_updates(params, updates)
        history.append(params)
    return history


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_zero_damping_is_optax_sgd_exactly(momentum):
    ours = _run(cd.cubic_damped_sgd(0.05, momentum=momentum, damping=0.0), _params(), 30)
    ref = _run(optax.sgd(0.05, momentum=momentum), _params(), 30)
    for a, b in zip(ours, ref, strict=True):
        jax.tree.map(np.testing.assert_array_equal, a, b)


def test_zero_damping_is_optax_adam_exactly():
    ours = _run(cd.cubic_damped_adam(0.01, b1=0.8, b2=0.99, damping=0.0), _params(), 30)
    ref = _run(optax.adam(0.01, b1=0.8, b2=0.99), _params(), 30, standard_promotion=True)
    for a, b in zip(ours, ref, strict=True):
        jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.mark.parametrize("damping", [0.01, 0.5, 4.0])
def test_velocity_and_step_are_bounded_even_for_huge_gradients(damping):
    lr, bound = 0.1, 1.0 / np.sqrt(damping)
    rounding = 1 + 4 * EPS32  # v' = ṽ·rsqrt(1 + cṽ²) may round onto the bound, never past it
    tx = cd.scale_by_cubic_damped_momentum(0.9, damping)
    state = tx.init(_params())
    for step in range(5):
        updates, state = tx.update(_grads(step, _params(), 1e6), state)
        assert all(np.all(np.abs(v) <= bound * rounding) for v in jax.tree.leaves(state.velocity))
    for tx in (cd.cubic_damped_sgd(lr, 0.9, damping), cd.cubic_damped_adam(lr, damping=damping)):
        history = [_params()] + _run(tx, _params(), 5, scale=1e6)
        for before, after in zip(history, history[1:], strict=False):
            steps = jax.tree.map(lambda a, b: np.abs(np.asarray(a) - np.asarray(b)), after, before)
            # The param update itself rounds in float32 at |x| ~ 1, so allow one ulp of x.
            assert all(np.all(s <= lr * bound * rounding + 4 * EPS32) for s in jax.tree.leaves(steps))


def test_damping_acts_elementwise():
    params = {"w": jax.random.normal(jax.random.PRNGKey(3), (12,))}
    grads = {"w": jax.random.normal(jax.random.PRNGKey(4), (12,)) * 50}
    perm = np.random.default_rng(0).permutation(12)
    for tx in (cd.cubic_damped_sgd(0.1, 0.9, 0.3), cd.cubic_damped_adam(0.1, damping=0.3)):
        u, _ = tx.update(grads, tx.init(params), params)
        u_perm, _ = tx.update({"w": grads["w"][perm]}, tx.init(params), {"w": params["w"][perm]})
        np.testing.assert_array_equal(u_perm["w"], u["w"][perm])


def _oscillation(damping, num_steps=60):
    """Heavy ball on f(x) = ½ λ x² at ηλ = 3.6 (edge 2(1 + μ) = 3.8), kicked with velocity 50."""
    lam, lr, momentum = 1.0, 3.6, 0.9
    tx = cd.cubic_damped_sgd(lr, momentum, damping)
    x = jnp.ones([])
    state = tx.init(x)
    state = (state[0]._replace(velocity=jnp.asarray(50.0)),) + tuple(state[1:])
    xs = []
    for _ in range(num_steps):
        u, state = tx.update(lam * x, state, x)
        x = x + u
        xs.append(float(x))
    return np.abs(np.asarray(xs))


def test_cubic_damping_shrinks_oscillations_near_the_stability_edge():
    plain, damped = _oscillation(0.0), _oscillation(0.05)
    assert damped[:10].max() < 0.5 * plain[:10].max()  # the kick is absorbed
    assert damped[-10:].max() < 0.1 * plain[-10:].max()  # and the tail decays faster


def test_strongly_convex_quadratic_converges_geometrically():
    diag = jnp.linspace(1.0, 10.0, 8)
    loss = lambda x: 0.5 * jnp.sum(diag * x * x)
    for tx in (cd.cubic_damped_sgd(0.05, 0.9, 0.5), cd.cubic_damped_adam(0.05, damping=0.5)):
        x, state, losses = jnp.ones(8), tx.init(jnp.ones(8)), []
        step = jax.jit(lambda x, s, tx=tx: tx.update(jax.grad(loss)(x), s, x))
        for _ in range(400):
            u, state = step(x, state)
            x = x + u
            losses.append(float(loss(x)))
        blocks = np.log(np.asarray(losses)[[99, 199, 299]])
        assert np.all(np.diff(blocks) < -2.0), blocks  # every 100 steps lose > e² in loss: log-linear


def test_bfloat16_params_with_float32_accumulator_under_strict_promotion():
    params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), _params())
    tx = cd.scale_by_cubic_damped_momentum(0.9, 0.5, accumulator_dtype=jnp.float32)
    u, state = tx.update(_grads(0, params), tx.init(params), params)
    assert all(v.dtype == jnp.float32 for v in jax.tree.leaves(state.velocity))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u))


@pytest.mark.parametrize(
    ("alias", "reference", "kwargs"),
    [(cd.cubic_damped_sgd, optax.sgd, {"momentum": 0.9}), (cd.cubic_damped_adam, optax.adam, {"b1": 0.8})],
)
def test_inject_hyperparams_matches_optax_and_controls_damping(alias, reference, kwargs):
    # Injected hyperparameters are float32 arrays (1 − b1 differs from the Python-float form in the
    # last bit), so the exact reference is optax's own alias injected the same way.
    params = _params()
    injected_tx = optax.inject_hyperparams(alias)(learning_rate=0.05, damping=0.0, **kwargs)
    ours = _run(injected_tx, params, 5)[-1]
    ref_tx = optax.inject_hyperparams(reference)(learning_rate=0.05, **kwargs)
    ref = _run(ref_tx, params, 5, standard_promotion=True)[-1]
    jax.tree.map(np.testing.assert_array_equal, ours, ref)
    state = injected_tx.init(params)
    state.hyperparams["damping"] = jnp.asarray(1e4, jnp.float32)
    u, _ = jax.jit(injected_tx.update)(_grads(0, params, 100.0), state, params)
    assert max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(u)) <= 0.05 * 1e-2 * (1 + 4 * EPS32)


def test_discrete_from_physical():
    momentum, damping = cd.discrete_from_physical(friction=1.0, cubic_friction=2.0, learning_rate=0.01)
    assert momentum == pytest.approx(0.9) and damping == pytest.approx(2 * 2.0 * 0.01**1.5)


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: cd.cubic_damped_sgd(-0.1), "learning_rate"),
        (lambda: cd.cubic_damped_sgd(0.1, damping=-1.0), "damping"),
        (lambda: cd.cubic_damped_sgd(0.1, momentum=1.0), "momentum"),
        (lambda: cd.cubic_damped_adam(lambda step: -0.1 + 0 * step), "learning_rate"),
        (lambda: cd.cubic_damped_adam(0.1, damping=float("nan")), "damping"),
        (lambda: cd.cubic_damped_adam(0.1, weight_decay=-0.1), "weight_decay"),
    ],
)
def test_bad_hyperparameters_raise_naming_the_argument(build, name):
    with pytest.raises(ValueError, match=name):
        build()


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_zero_coupling_adaptive_friction_is_optax_sgd_exactly(momentum):
    ours = _run(cd.adaptive_friction_sgd(0.05, momentum=momentum, coupling=0.0, temperature=0.3), _params(), 30)
    ref = _run(optax.sgd(0.05, momentum=momentum), _params(), 30)
    for a, b in zip(ours, ref, strict=True):
        jax.tree.map(np.testing.assert_array_equal, a, b)


def test_friction_grows_with_each_coordinates_kinetic_energy():
    # Four coordinates with momenta of increasing size: the friction after the step must order like ṽ²,
    # equal a·(ṽ² − τ) clipped at 0, and the velocity must be braked by e^{−ζ}.
    tx = cd.scale_by_adaptive_friction_momentum(momentum=0.5, coupling=0.02, temperature=2.0)
    velocity, grads = jnp.asarray([0.5, 2.0, 4.0, 8.0]), jnp.ones(4)
    state = tx.init(velocity)._replace(velocity=velocity)
    updates, state = tx.update(grads, state)
    v_tilde = 0.5 * np.asarray(velocity) + 1.0
    friction = np.asarray(state.friction)
    np.testing.assert_allclose(friction, np.maximum(0.0, 0.02 * (v_tilde**2 - 2.0)), rtol=1e-6)
    assert friction[0] == 0.0 and np.all(np.diff(friction) > 0)
    factor = np.asarray(cd.friction_factor(state))
    assert factor[0] == 1.0 and np.all(np.diff(factor) < 0)
    np.testing.assert_allclose(np.asarray(updates), factor * v_tilde, rtol=1e-6)


def test_adaptive_friction_bounds_the_velocity_even_for_huge_gradients():
    coupling = 0.5
    tx = cd.scale_by_adaptive_friction_momentum(0.9, coupling)
    state = tx.init(_params())
    for step in range(5):
        updates, state = tx.update(_grads(step, _params(), 1e3), state)
        bound = 1.0 / np.sqrt(2 * np.e * coupling)
        assert all(np.all(np.abs(u) <= bound * (1 + 4 * EPS32)) for u in jax.tree.leaves(updates))


def test_friction_drains_below_the_temperature_and_stays_non_negative():
    tx = cd.scale_by_adaptive_friction_momentum(momentum=0.9, coupling=0.01, temperature=100.0)
    state = tx.init(jnp.zeros(3))._replace(velocity=jnp.asarray([30.0, 30.0, 30.0]))
    _, state = tx.update(jnp.zeros(3), state)
    raised = np.asarray(state.friction)
    drained = []
    for _ in range(8):  # zero gradient: the braked velocity stays below √τ and the friction drains by aτ = 1
        _, state = tx.update(jnp.zeros(3), state)
        drained.append(float(state.friction[0]))
    assert np.all(raised > 5.0)  # 0.01 (27² − 100) = 6.29
    assert np.all(np.diff(drained[:5]) < -0.99) and drained[-1] == 0.0


def _kicked(tx, num_steps=60):
    """|x| of `tx` on ½ x² at ηλ = 3.6 (the heavy ball's edge is 2(1 + μ) = 3.8), kicked with velocity 50."""
    x = jnp.ones([])
    state = tx.init(x)
    state = (state[0]._replace(velocity=jnp.asarray(50.0)),) + tuple(state[1:])
    xs = []
    for _ in range(num_steps):
        u, state = tx.update(x, state, x)
        x = x + u
        xs.append(abs(float(x)))
    return np.asarray(xs)


def test_adaptive_friction_absorbs_a_kick_near_the_stability_edge():
    plain, adaptive = _kicked(cd.cubic_damped_sgd(3.6, 0.9)), _kicked(cd.adaptive_friction_sgd(3.6, 0.9, coupling=1e-3))
    assert adaptive[:10].max() < 0.5 * plain[:10].max()
    assert adaptive[-10:].max() < 0.1 * plain[-10:].max()


def test_lowering_the_momentum_instead_diverges_near_the_edge():
    # Why the friction brakes the velocity by a factor: the spec's alternative, momentum max(0, μ − ζ), puts
    # ηλ = 3.6 outside the heavy ball's stable range 2(1 + μ − ζ) once ζ > 0.8, and the same kick diverges.
    x, v, zeta = 1.0, 50.0, 0.0
    for _ in range(60):
        zeta = max(0.0, zeta + 1e-3 * v * v)
        v = max(0.0, 0.9 - zeta) * v + x
        x = x - 3.6 * v
    assert abs(x) > 1e3


def test_registered_adaptive_friction_reads_its_options():
    cfg = OptimConfig(name="adaptive_friction_sgd", learning_rate=0.05, weight_decay=0.0, b1=0.9,
                      options=(("coupling", 0.0),))
    ours = _run(OPTIMIZERS.get("adaptive_friction_sgd")(0.05, cfg), _params(), 5)[-1]
    ref = _run(optax.sgd(0.05, momentum=0.9), _params(), 5)[-1]
    jax.tree.map(np.testing.assert_array_equal, ours, ref)
    for options, name in ((("coupling", -1.0),), "coupling"), ((("temperature", -0.5),), "temperature"), (
            (("friction", 1.0),), "friction"):
        bad = OptimConfig(name="adaptive_friction_sgd", options=options)
        with pytest.raises(ValueError, match=name):
            OPTIMIZERS.get("adaptive_friction_sgd")(0.05, bad)


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: cd.adaptive_friction_sgd(0.1, coupling=-1e-3), "coupling"),
        (lambda: cd.adaptive_friction_sgd(0.1, temperature=float("nan")), "temperature"),
        (lambda: cd.adaptive_friction_sgd(0.1, momentum=-0.1), "momentum"),
        (lambda: cd.adaptive_friction_sgd(-0.1), "learning_rate"),
    ],
)
def test_bad_adaptive_friction_hyperparameters_raise_naming_the_argument(build, name):
    with pytest.raises(ValueError, match=name):
        build()
