"""DP-SGD (zoo/privacy/dpsgd.py): per-example gradients and clipping against loops, the privatised mean against
its definition for every registered noise, and the trainer's `optim.name="dp_sgd"` wiring."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.privacy import dpsgd, mechanisms
from icml26zoo.train.config import OptimConfig
from icml26zoo.train.optim import build_optimizer, custom_update

pytestmark = pytest.mark.usefixtures("fast_compile")


def _loss(params, batch):
    """Mean squared error of a linear model over the batch's rows: x [B, 3], y [B]."""
    return jnp.mean((batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2)


def _problem():
    x = jax.random.normal(jax.random.key(0), (6, 3))
    batch = {"x": x, "y": 5.0 * x @ jnp.array([1.0, -2.0, 3.0]) + 1.0}
    return {"w": jnp.zeros(3), "b": jnp.zeros(())}, batch


def test_per_example_grads_and_clipping_match_a_loop():
    params, batch = _problem()
    grads = dpsgd.per_example_grads(_loss, params, batch)
    for i in range(6):
        one = jax.grad(_loss)(params, {k: v[i:i + 1] for k, v in batch.items()})
        np.testing.assert_allclose(grads["w"][i], one["w"], rtol=1e-5)
        np.testing.assert_allclose(grads["b"][i], one["b"], rtol=1e-5)
    clipped, norms = dpsgd.clip_per_example(grads, 1.5)
    flat = np.concatenate([np.asarray(grads["w"]), np.asarray(grads["b"])[:, None]], axis=1)
    np.testing.assert_allclose(norms, np.linalg.norm(flat, axis=1), rtol=1e-5)
    flat_clipped = np.concatenate([np.asarray(clipped["w"]), np.asarray(clipped["b"])[:, None]], axis=1)
    expected = flat * np.minimum(1.0, 1.5 / np.linalg.norm(flat, axis=1))[:, None]
    np.testing.assert_allclose(flat_clipped, expected, rtol=1e-5)
    assert np.all(np.linalg.norm(flat, axis=1) > 1.5)  # every example was actually clipped


@pytest.mark.parametrize(("noise", "params"), [("gaussian", {"scale": 0.7}), ("sgg", {"scale": 0.7, "p": 1.5}),
                                               ("mog", {"scale": 0.4, "decay": 1.0, "radius": 2})])
def test_private_aggregate_is_the_clipped_mean_plus_scaled_noise(noise, params):
    model, batch = _problem()
    grads = dpsgd.per_example_grads(_loss, model, batch)
    tx = dpsgd.private_aggregate(2.0, noise, params, seed=3)
    state = tx.init(model)
    out, new_state = tx.update(grads, state)
    clipped, _ = dpsgd.clip_per_example(grads, 2.0)
    key = jax.random.split(jax.random.wrap_key_data(state.key))[0]
    noise_draw = 2.0 * mechanisms.noise_sampler(noise, **params)(key, 4)
    # ravel_pytree flattens the leaves in key order: b, then w.
    np.testing.assert_allclose(out["b"], (clipped["b"].sum(0) + noise_draw[0]) / 6, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["w"], (clipped["w"].sum(0) + noise_draw[1:]) / 6, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(new_state.key, state.key)  # fresh noise every step


def _config(**options):
    pairs = {"clip_norm": 1.0, "noise": "gaussian", "scale": 0.5, "seed": 7, **options}
    return OptimConfig(name="dp_sgd", learning_rate=0.1, warmup_steps=0, end_lr_fraction=1.0, grad_clip_norm=0.0,
                       options=tuple(pairs.items()))


def test_trainer_dp_sgd_takes_the_same_steps_as_the_transformation():
    cfg = _config(noise="sgg", p=1.0)
    tx, update = build_optimizer(cfg, 10), custom_update(cfg)
    reference = dpsgd.dp_sgd(0.1, clip_norm=1.0, noise="sgg", noise_params={"scale": 0.5, "p": 1.0, "a_ratio": 1.0},
                             seed=7)
    params, batch = _problem()
    ref_params, state, ref_state = params, tx.init(params), reference.init(params)
    # The trainer runs the update under standard promotion (optax mixes Python floats with int32 counts).
    with jax.numpy_dtype_promotion("standard"):
        step = jax.jit(lambda p, s: update(_loss, p, batch, s, tx))
        ref_step = jax.jit(lambda p, s: reference.update(dpsgd.per_example_grads(_loss, p, batch), s, p))
        for _ in range(5):
            loss, grads, updates, state = step(params, state)
            expected_loss, expected_grads = jax.value_and_grad(_loss)(params, batch)
            params = optax.apply_updates(params, updates)
            ref_updates, ref_state = ref_step(ref_params, ref_state)
            ref_params = optax.apply_updates(ref_params, ref_updates)
    np.testing.assert_allclose(params["w"], ref_params["w"], rtol=1e-5)
    np.testing.assert_allclose(params["b"], ref_params["b"], rtol=1e-5)
    # What the trainer logs: the batch loss and the mean unclipped gradient (not private).
    assert float(loss) == pytest.approx(float(expected_loss), rel=1e-5)
    np.testing.assert_allclose(grads["w"], expected_grads["w"], rtol=1e-4)


def test_dp_sgd_with_small_noise_learns():
    cfg = _config(scale=0.05, clip_norm=50.0)
    tx, update = build_optimizer(cfg, 200), custom_update(cfg)
    params, batch = _problem()
    state = tx.init(params)
    start = float(_loss(params, batch))
    with jax.numpy_dtype_promotion("standard"):
        step = jax.jit(lambda p, s: update(_loss, p, batch, s, tx))
        for _ in range(60):
            _, _, updates, state = step(params, state)
            params = optax.apply_updates(params, updates)
    assert float(_loss(params, batch)) < 0.05 * start


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: custom_update(OptimConfig(name="dp_sgd", grad_clip_norm=1.0)), "optim.grad_clip_norm must be 0"),
        (lambda: build_optimizer(_config(clip_norm=0.0), 10), "clip_norm must be a finite positive number, got 0.0"),
        (lambda: build_optimizer(_config(clip_norm=-1.0), 10), "clip_norm"),
        (lambda: build_optimizer(_config(noise="laplace"), 10), "option 'noise' must be one of"),
        (lambda: build_optimizer(_config(scale=0.0), 10), "scale must be a finite positive number, got 0.0"),
        (lambda: build_optimizer(_config(sigma=1.0), 10), "sigma"),
        (lambda: mechanisms.noise_sampler("gaussian", p=2.0), "does not take"),
        (lambda: dpsgd.private_aggregate(1.0, "staircase"), "noise must be one of"),
    ],
)
def test_bad_configuration_raises_naming_the_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()
