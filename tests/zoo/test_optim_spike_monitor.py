"""Adam loss-spike monitor (arXiv 2506.04805): exact curvature cases, HVP, power iteration, a flagged spike."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.optim import spike_monitor as sm


def _adam_state(mu, nu, count):
    return optax.ScaleByAdamState(count=jnp.asarray(count, jnp.int32), mu=mu, nu=nu)


def test_one_dimensional_quadratic_curvatures_are_exact():
    a, theta, nu, eps = 3.0, jnp.asarray([0.7]), jnp.asarray([0.2]), 1e-8
    loss = lambda p: 0.5 * a * jnp.sum(p["x"] ** 2)
    grads = {"x": a * theta}
    state = _adam_state({"x": jnp.zeros(1)}, {"x": nu}, 4)
    direction, precond = sm.adam_direction(grads, state, b1=0.0, b2=0.9, eps=eps)
    curvature, slope = sm.directional_curvature(loss, {"x": theta}, grads, direction)
    v_hat = (0.9 * nu + 0.1 * grads["x"] ** 2) / (1 - 0.9**5)
    expected = a / (jnp.sqrt(v_hat) + eps)
    np.testing.assert_allclose(curvature / slope, expected, rtol=1e-6)
    lam_max, _ = sm.preconditioned_sharpness(loss, {"x": theta}, precond, key=jax.random.PRNGKey(0), num_iters=3)
    np.testing.assert_allclose(lam_max, expected[0], rtol=1e-6)


def test_diagonal_quadratic_directional_curvature():
    h = jnp.asarray([0.5, 2.0, 8.0])
    theta = jnp.asarray([1.0, -0.5, 0.25])
    loss = lambda p: 0.5 * jnp.sum(h * p["x"] ** 2)
    grads = {"x": h * theta}
    state = _adam_state({"x": jnp.zeros(3)}, {"x": jnp.asarray([0.3, 1.0, 2.0])}, 9)
    direction, precond = sm.adam_direction(grads, state, b1=0.0, b2=0.99, eps=1e-8)
    curvature, slope = sm.directional_curvature(loss, {"x": theta}, grads, direction)
    p, g = precond["x"], grads["x"]
    np.testing.assert_allclose(curvature / slope, jnp.sum(p**2 * h * g**2) / jnp.sum(p * g**2), rtol=1e-6)


def test_power_iteration_matches_eigvalsh_of_the_preconditioned_hessian():
    q, _ = jnp.linalg.qr(jax.random.normal(jax.random.PRNGKey(1), (6, 6)))
    hess = (q * jnp.asarray([0.1, 0.3, 0.6, 1.0, 2.0, 5.0])) @ q.T
    loss = lambda p: 0.5 * p["x"] @ hess @ p["x"]
    precond = {"x": jnp.asarray([0.5, 1.0, 2.0, 1.5, 0.8, 1.2])}
    lam, _ = sm.preconditioned_sharpness(loss, {"x": jnp.ones(6)}, precond, key=jax.random.PRNGKey(2),
                                         num_iters=200)
    root = jnp.sqrt(precond["x"])
    expected = jnp.linalg.eigvalsh(root[:, None] * hess * root[None, :])[-1]
    np.testing.assert_allclose(lam, expected, rtol=1e-4)


def test_hvp_equals_the_dense_hessian_on_a_small_model():
    x = jax.random.normal(jax.random.PRNGKey(3), (16, 3))
    loss = lambda p: jnp.mean(jnp.tanh(x @ p["w"]) ** 2) + 0.1 * jnp.sum(p["w"] ** 4)
    params = {"w": jax.random.normal(jax.random.PRNGKey(4), (3, 2))}
    vector = {"w": jax.random.normal(jax.random.PRNGKey(5), (3, 2))}
    dense = jax.hessian(lambda w: loss({"w": w}))(params["w"]).reshape(6, 6)
    hvp = sm.hessian_vector_product(loss, params, vector)["w"].reshape(6)
    np.testing.assert_allclose(hvp, dense @ vector["w"].reshape(6), rtol=1e-5, atol=1e-6)


H = jnp.asarray([1.0, 4.0, 16.0, 0.25])


def _quadratic(p):
    return 0.5 * jnp.sum(H * p["x"] ** 2)


def _run(num_steps=330, jump_at=300, low=0.01, high=1.0, monitor=True):
    """Adam (β1 = 0.9) on a diagonal quadratic, learning rate jumping 100× at `jump_at`."""
    with jax.numpy_dtype_promotion("standard"):  # optax's Adam is not strict-promotion clean
        opt = optax.inject_hyperparams(optax.adam)(learning_rate=low, b1=0.9, b2=0.999)
        params = {"x": jnp.asarray([1.0, -1.0, 0.5, 2.0])}
        state = opt.init(params)

        @jax.jit
        def step(params, state):
            loss, grads = jax.value_and_grad(_quadratic)(params)
            metrics = {}
            if monitor:
                metrics = sm.spike_diagnostics(_quadratic, params, grads, state, b1=0.9, b2=0.999, eps=1e-8,
                                               learning_rate=state.hyperparams["learning_rate"])
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state, loss, metrics

        losses, flags, trajectory = [], [], []
        for t in range(num_steps):
            if t == jump_at:
                state.hyperparams["learning_rate"] = jnp.asarray(high, jnp.float32)
            params, state, loss, metrics = step(params, state)
            losses.append(float(loss))
            flags.append(float(metrics.get("spike_predicted", np.nan)))
            trajectory.append(params)
    return np.asarray(losses), np.asarray(flags), trajectory


def test_a_learning_rate_jump_spikes_the_loss_and_the_monitor_flags_it_first():
    losses, flags, _ = _run()
    jump = 300
    rises = losses[1:] > losses[:-1]  # rises[t]: the update taken at step t raised the loss
    assert not rises[:jump].any() and not flags[:jump].any()  # steady descent, no false alarms
    assert losses[jump:].max() > 5 * losses[jump]  # the jump causes a spike
    onset = jump + int(np.argmax(rises[jump:]))
    first_flag = jump + int(np.argmax(flags[jump:] > 0))
    assert first_flag <= onset  # lead time ≥ 0
    # On a quadratic the one-step model is exact: the flag predicts every rise and nothing else.
    np.testing.assert_array_equal(flags[:-1] > 0, rises)


def test_the_monitor_is_read_only():
    _, _, with_monitor = _run(num_steps=305, monitor=True)
    _, _, without = _run(num_steps=305, monitor=False)
    for a, b in zip(with_monitor, without, strict=True):
        np.testing.assert_array_equal(a["x"], b["x"])


def test_missing_adam_state_is_a_clear_error():
    with pytest.raises(ValueError, match="ScaleByAdamState"):
        sm.find_adam_state(optax.sgd(0.1).init({"x": jnp.ones(2)}))


def test_power_iteration_warm_started_on_the_top_eigenvector_needs_one_iteration():
    hess = jnp.diag(jnp.asarray([1.0, 3.0, 0.5]))
    loss = lambda p: 0.5 * p["x"] @ hess @ p["x"]
    precond = {"x": jnp.asarray([2.0, 1.0, 1.0])}  # P^{1/2} H P^{1/2} = diag(2, 3, 0.5): top vector e_2
    init = {"x": jnp.asarray([0.0, 1.0, 0.0])}
    lam, top = sm.preconditioned_sharpness(loss, {"x": jnp.ones(3)}, precond, key=jax.random.PRNGKey(0),
                                           num_iters=1, init=init)
    np.testing.assert_allclose(lam, 3.0, rtol=1e-6)
    np.testing.assert_allclose(top["x"], init["x"], atol=1e-7)
    cold, _ = sm.preconditioned_sharpness(loss, {"x": jnp.ones(3)}, precond, key=jax.random.PRNGKey(0), num_iters=1)
    assert abs(float(cold) - 3.0) > 1e-3  # a random start is not there after one iteration
