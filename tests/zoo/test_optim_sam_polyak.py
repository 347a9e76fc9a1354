"""SAM-Polyak (arXiv 2606.01827): ρ = 0 reduction to optax SPS+, step bounds, convergence, two-pass cost; plain SAM
(the registered `sam` baseline): ρ = 0 equals its base SGD, the step matches a direct reference, shared perturbation."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.optim import sam as sp
from icml26zoo.train.config import OptimConfig


def _least_squares(num=64, dim=10, seed=0):
    """Interpolating least squares (f* = 0): X [num, dim], y = X w* [num]."""
    kx, kw = jax.random.split(jax.random.PRNGKey(seed))
    x = jax.random.normal(kx, (num, dim))
    return x, x @ jax.random.normal(kw, (dim,))


def _loss(params, batch):
    x, y = batch
    residual = x @ params["w"] + params["b"] - y
    return 0.5 * jnp.mean(residual * residual)


def _zeros(dim=10):
    return {"w": jnp.zeros(dim), "b": jnp.zeros([])}


def _minibatch(data, step, size=16):
    idx = jax.random.choice(jax.random.PRNGKey(step), data[0].shape[0], (size,), replace=False)
    return data[0][idx], data[1][idx]


def test_rho_zero_ascent_point_is_theta():
    data, params = _least_squares(), {"w": jnp.linspace(-1.0, 1.0, 10), "b": jnp.asarray(0.3)}
    two_pass = sp.sam_polyak_grads(_loss, params, data, rho=0.0)
    value, grad = jax.value_and_grad(_loss)(params, data)
    assert all(not np.any(np.asarray(d)) for d in jax.tree.leaves(two_pass.perturbation))
    np.testing.assert_array_equal(two_pass.value, value)
    jax.tree.map(np.testing.assert_array_equal, two_pass.grad, grad)


def test_rho_zero_step_is_optax_polyak_sgd_sps_plus():
    # Fed the same (g, f) as optax.polyak_sgd(variant="sps+") and a zero perturbation (ρ = 0), the
    # SAM-Polyak update is optax's, bit for bit, along a 25-step stochastic trajectory.
    data = _least_squares()
    ours_tx = sp.sam_polyak(0.7, f_min=0.01, eps=1e-12)
    ref_tx = optax.polyak_sgd(max_learning_rate=0.7, f_min=0.01, eps=1e-12, variant="sps+")
    params = _zeros()
    ours_state, ref_state = ours_tx.init(params), ref_tx.init(params)
    for t in range(25):
        value, grad = jax.value_and_grad(_loss)(params, _minibatch(data, t))
        zero = jax.tree.map(jnp.zeros_like, params)
        ours, ours_state = ours_tx.update(grad, ours_state, params, value=value, perturbation=zero)
        ref, ref_state = ref_tx.update(grad, ref_state, params, value=value)
        jax.tree.map(np.testing.assert_array_equal, ours, ref)
        params = optax.apply_updates(params, ref)


@pytest.mark.parametrize("normalize", [True, False])
def test_step_size_stays_in_zero_to_cap(normalize):
    data, cap = _least_squares(), 0.3
    tx = sp.scale_by_sam_polyak(f_min=0.0, max_learning_rate=cap)
    params = _zeros()
    for t in range(10):
        two_pass = sp.sam_polyak_grads(_loss, params, _minibatch(data, t), rho=0.5, normalize=normalize)
        scaled, _ = tx.update(two_pass.grad, tx.init(params), value=two_pass.value,
                              perturbation=two_pass.perturbation)
        gamma = float(jnp.linalg.norm(scaled["w"]) / jnp.linalg.norm(two_pass.grad["w"]))
        assert 0.0 <= gamma <= cap * (1 + 1e-6)
        params = jax.tree.map(lambda p, u: p - u, params, scaled)


def test_zero_step_when_the_gap_is_negative_and_no_nan_for_zero_gradient():
    tx = sp.scale_by_sam_polyak(f_min=1.0, max_learning_rate=5.0)
    grad = {"w": jnp.ones(3)}
    scaled, _ = tx.update(grad, tx.init(grad), value=jnp.asarray(0.5), perturbation=None)
    np.testing.assert_array_equal(scaled["w"], 0.0)  # f − f* < 0: clamped to a zero step
    zero = {"w": jnp.zeros(3)}
    scaled, _ = tx.update(zero, tx.init(zero), value=jnp.asarray(2.0), perturbation={"w": jnp.zeros(3)})
    np.testing.assert_array_equal(scaled["w"], 0.0)
    # A large ascent inner product ⟨g, e − θ⟩ also clamps the step to zero.
    scaled, _ = tx.update(grad, tx.init(grad), value=jnp.asarray(2.0), perturbation={"w": jnp.ones(3)})
    np.testing.assert_array_equal(scaled["w"], 0.0)


def test_deterministic_sam_polyak_converges_geometrically_on_a_quadratic():
    diag = jnp.linspace(1.0, 20.0, 12)
    target = jnp.linspace(-1.0, 1.0, 12)
    loss = lambda p, _: 0.5 * jnp.sum(diag * (p["w"] - target) ** 2)
    tx = sp.sam_polyak(jnp.inf)  # deterministic: full loss, no cap, c = 1
    params, state, dist = {"w": jnp.zeros(12)}, tx.init({"w": jnp.zeros(12)}), []
    # USAM with ρ ≤ 1/L (L = 20) converges linearly to θ*; normalised SAM only to a ρ-neighbourhood.
    step = jax.jit(lambda p, s: sp.sam_polyak_step(loss, tx, p, None, s, rho=0.02, normalize=False))
    for _ in range(100):
        params, state, _ = step(params, state)
        dist.append(float(jnp.linalg.norm(params["w"] - target)))
    # Before the float32 floor (~1e-7, reached near step 120): a steady log-linear decrease.
    log_dist = np.log(np.asarray(dist)[[19, 49, 79]])
    assert np.all(np.diff(log_dist) < -2.0), log_dist  # > e² per 30 steps


def _stochastic_run(normalize, rho=0.05, steps=300):
    kx, kw = jax.random.split(jax.random.PRNGKey(1))
    x = jax.random.normal(kx, (128, 20))
    w_star = jax.random.normal(kw, (20,))
    data = (x, x @ w_star)
    tx = sp.sam_polyak(1.0)
    params = {"w": jnp.zeros(20), "b": jnp.zeros([])}
    state = tx.init(params)
    step = jax.jit(lambda p, s, b: sp.sam_polyak_step(_loss, tx, p, b, s, rho=rho, normalize=normalize))
    initial = float(_loss(params, data))
    for t in range(steps):
        params, state, metrics = step(params, state, _minibatch(data, t, 32))
    return float(_loss(params, data)) / initial, float(jnp.linalg.norm(params["w"] - w_star)), metrics


def test_stochastic_usam_interpolates_least_squares_without_tuning():
    relative_loss, _, _ = _stochastic_run(normalize=False)
    assert relative_loss < 1e-10


def test_stochastic_sam_reaches_the_rho_neighbourhood_then_the_clamp_stops_it():
    # Normalised SAM keeps ‖e − θ‖ = ρ, so near θ* the term ⟨g, e − θ⟩ exceeds f(e) and the clamp gives
    # zero steps (a known pitfall): the iterate stalls within about ρ of the interpolating solution.
    relative_loss, distance, metrics = _stochastic_run(normalize=True)
    assert distance < 2 * 0.05 and relative_loss < 1e-3
    assert float(metrics["step_size"]) == 0.0


def test_one_batch_and_exactly_two_passes():
    calls = []

    def loss(params, batch):
        calls.append(batch)
        return jnp.sum(batch["scale"] * params["w"] ** 2)

    batch = {"scale": jnp.arange(1.0, 4.0)}
    tx = sp.sam_polyak(1.0)
    params = {"w": jnp.ones(3)}
    new_params, _, metrics = sp.sam_polyak_step(loss, tx, params, batch, tx.init(params), rho=0.1)
    assert len(calls) == 2 and all(b is batch for b in calls)
    # value and loss must be those of this batch: f(θ) = Σ scale·w² = 6.
    assert float(metrics["loss"]) == pytest.approx(6.0)
    assert float(metrics["sam_loss"]) > 6.0  # the ascent point has the higher loss


def test_inject_hyperparams_and_registry_factory():
    data = _least_squares()
    tx = optax.inject_hyperparams(sp.sam_polyak, static_args=("mask",))(learning_rate=0.5, c=2.0)
    params = _zeros()
    state = tx.init(params)
    params, state, _ = jax.jit(lambda p, s: sp.sam_polyak_step(_loss, tx, p, data, s))(params, state)
    assert float(state.hyperparams["c"]) == 2.0 and float(_loss(params, data)) < float(_loss(_zeros(), data))
    cfg = OptimConfig(name="sam_polyak", options=(("rho", 0.1),))
    assert sp.rho_from_config(cfg) == 0.1


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: sp.sam_polyak(-1.0), "learning_rate"),
        (lambda: sp.scale_by_sam_polyak(c=0.0), "c"),
        (lambda: sp.sam_polyak(1.0, weight_decay=-1.0), "weight_decay"),
        (lambda: sp.sam_polyak_grads(_loss, _zeros(), _least_squares(), rho=-0.1), "rho"),
        (lambda: sp.rho_from_config(OptimConfig(options=(("rho", -0.05),))), "rho"),
    ],
)
def test_bad_hyperparameters_raise_naming_the_argument(build, name):
    with pytest.raises(ValueError, match=name):
        build()


def _registered(name, **fields):
    """The registered optimizer `name` (factory at a constant learning rate) and its declared update."""
    from icml26zoo.registry import OPTIMIZERS

    cfg = OptimConfig(name=name, **fields)
    make_update = OPTIMIZERS.update(name)
    return OPTIMIZERS.get(name)(cfg.learning_rate, cfg), None if make_update is None else make_update(cfg)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sam_with_rho_zero_is_the_base_sgd_step(momentum):
    # Through the trainer's hook: registered `sam` at ρ = 0 against the registered `sgd` (same momentum and
    # decoupled decay) under the trainer's default single-gradient update, bit for bit over a trajectory.
    from icml26zoo.train.step import default_update

    data, fields = _least_squares(), {"learning_rate": 0.05, "weight_decay": 0.1}
    sam_tx, sam_update = _registered("sam", options=(("rho", 0.0), ("momentum", momentum)), **fields)
    sgd_tx, sgd_update = _registered("sgd", b1=momentum, **fields)
    assert sgd_update is None and sam_update is not None
    params = {"w": jnp.linspace(-1.0, 1.0, 10), "b": jnp.asarray(0.3)}
    sam_state, sgd_state = sam_tx.init(params), sgd_tx.init(params)
    for t in range(5):
        batch = _minibatch(data, t)
        sam_loss, _, ours, sam_state = sam_update(_loss, params, batch, sam_state, sam_tx)
        sgd_loss, _, ref, sgd_state = default_update(_loss, params, batch, sgd_state, sgd_tx)
        assert float(sam_loss) == float(sgd_loss)
        jax.tree.map(np.testing.assert_array_equal, ours, ref)
        params = optax.apply_updates(params, ref)


def test_sam_step_is_the_gradient_at_the_normalised_ascent_point():
    # Direct reference in numpy: e = w + ρ g/‖g‖ over the whole parameter vector, w' = w − η ∇f(e).
    x, y = _least_squares()
    xa = np.concatenate([np.asarray(x, np.float64), np.ones((x.shape[0], 1))], axis=1)  # bias as a column
    w0 = np.concatenate([np.linspace(-1.0, 1.0, 10), [0.3]])
    grad = lambda w: xa.T @ (xa @ w - np.asarray(y, np.float64)) / xa.shape[0]
    rho, lr = 0.2, 0.1
    g = grad(w0)
    expected = w0 - lr * grad(w0 + rho * g / np.linalg.norm(g))
    tx = sp.sam_sgd(lr)
    params = {"w": jnp.asarray(w0[:10], jnp.float32), "b": jnp.asarray(w0[10], jnp.float32)}
    new, _, metrics = sp.sam_step(_loss, tx, params, (x, y), tx.init(params), rho=rho)
    got = np.concatenate([np.asarray(new["w"]), [float(new["b"])]])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, w0 - lr * g, atol=1e-4)  # the ascent point matters at this ρ
    assert float(metrics["sam_loss"]) > float(metrics["loss"])


def test_registered_sam_shares_the_perturbation_code_and_takes_two_passes(monkeypatch):
    # Plain SAM must call the one SAM perturbation (sam_polyak_grads), not a copy of it.
    calls, passes = [], []
    original = sp.sam_polyak_grads
    monkeypatch.setattr(sp, "sam_polyak_grads", lambda *a, **k: calls.append(a[3]) or original(*a, **k))

    def loss(params, batch):
        passes.append(batch)
        return _loss(params, batch)

    tx, update = _registered("sam", learning_rate=0.1, options=(("rho", 0.07),))
    params = _zeros()
    update(loss, params, _least_squares(), tx.init(params), tx)
    assert calls == [0.07] and len(passes) == 2


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: sp.sam_sgd(0.0), "learning_rate"),
        (lambda: sp.sam_sgd(-0.1), "learning_rate"),
        (lambda: sp.sam_sgd(float("inf")), "learning_rate"),
        (lambda: sp.sam_sgd(0.1, momentum=1.0), "momentum"),
        (lambda: sp.sam_sgd(0.1, weight_decay=-1.0), "weight_decay"),
        (lambda: sp.sam_options(OptimConfig(name="sam", options=(("rho", -0.05),))), "rho"),
        (lambda: sp.sam_options(OptimConfig(name="sam", options=(("radius", 0.05),))), "radius"),
        (lambda: _registered("sam", options=(("rho", -1.0),)), "rho"),
        (lambda: _registered("samm"), "samm"),
        (lambda: sp.two_pass_update(-0.1, polyak=False), "rho"),
    ],
)
def test_bad_sam_hyperparameters_raise_naming_the_field(build, name):
    with pytest.raises(ValueError, match=name):
        build()


def test_sam_sgd_accepts_a_warmup_schedule_starting_at_zero():
    tx = sp.sam_sgd(optax.linear_schedule(0.0, 0.1, 10))
    params = _zeros()
    updates, _ = tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
    np.testing.assert_array_equal(updates["w"], 0.0)
