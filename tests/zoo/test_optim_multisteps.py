"""`optax.MultiSteps` over every registered optimizer: two accumulated micro-steps equal one step on their mean
gradient. Apart from the battery (test_optim_battery.py) because the comparison is tight (rtol 1e-6) and holds
under XLA's default pipeline only, which that module turns off."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optim_cases import NAMES, build, mlp_loss, params_tree, quadratic, standard_promotion, update

# The two mean gradients differ by float32 rounding (about 1 ulp). Most updates pass that on unchanged (rtol 1e-6);
# Muon's Newton-Schulz iteration amplifies it: on an AMD EPYC CPU one element of 128 came out 1.9e-6 relative
# (2.4e-7 absolute) apart, so Muon is held to rtol 1e-5, atol 1e-6.
TOLERANCES = {"muon": {"rtol": 1e-5, "atol": 1e-6}}
TIGHT = {"rtol": 1e-6, "atol": 1e-7}


@pytest.fixture(autouse=True)
def promotion():
    with standard_promotion():
        yield


@pytest.mark.parametrize("name", NAMES)
def test_multisteps_equals_one_step_on_the_mean_gradient(name):
    tx, _ = build(name)
    params = params_tree()
    g1 = jax.grad(quadratic)(params)
    g2 = jax.grad(mlp_loss)(params)
    loss = quadratic(params)
    # MultiSteps.update is called directly: MultiSteps is not a GradientTransformationExtraArgs (nor is
    # its .gradient_transformation()), so with_extra_args_support would drop the Polyak step's `value=`.
    multi = optax.MultiSteps(tx, every_k_schedule=2)
    state = multi.init(params)
    skipped, state = multi.update(g1, state, params, value=loss)
    assert all(float(jnp.max(jnp.abs(u))) == 0.0 for u in jax.tree.leaves(skipped))
    emitted, _ = multi.update(g2, state, params, value=loss)
    mean = jax.tree.map(lambda a, b: (a + b) / 2, g1, g2)
    expected, _ = update(tx, mean, tx.init(params), params, loss)
    # MultiSteps keeps a running mean (acc + (g − acc)/n): equal to (g1 + g2)/2 up to float32 rounding.
    tolerance = TOLERANCES.get(name, TIGHT)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, **tolerance), emitted, expected)
