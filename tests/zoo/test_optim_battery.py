"""Conformance battery for every registered optimizer (in the spirit of optax's contrib/_common_test.py).

Each optimizer is built by its registry factory from a small OptimConfig and checked for: convergence on
a quadratic and on a small MLP, state dtypes that follow the params (float32 and bfloat16), one trace
under jit, `optax.inject_hyperparams`, and state shardings that stay those of the
params under an 8-device mesh. Updates are called with `value=` (the loss), which Polyak-type
optimizers need and the others ignore (`optax.with_extra_args_support`).

optax's own Adam bias correction (`decay ** count` with a Python float and an int32) fails under the
strict dtype promotion of tests/conftest.py, so the battery runs under standard promotion and a
separate test checks strict promotion, expected to fail for the optax-only registrations adam/adamw.

The module runs under XLA's cheap pipeline (`fast_compile`): its programs are tiny and compile far longer than
they run. The `optax.MultiSteps` comparison, which needs the default pipeline's rounding, is in
test_optim_multisteps.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from optim_cases import (
    DEFAULT_LR,
    LEARNING_RATES,
    NAMES,
    NOT_STRICT_CLEAN,
    build,
    mlp_loss,
    params_tree,
    quadratic,
    standard_promotion,
    update,
)

from icml26zoo.registry import OPTIMIZERS

pytestmark = pytest.mark.usefixtures("fast_compile")


@pytest.fixture(autouse=True)
def standard_promotion_but_in_the_strict_test(request):
    if request.node.originalname == "test_strict_dtype_promotion":  # keeps conftest's strict setting
        yield
        return
    with standard_promotion():
        yield


def _train(name, loss_fn, num_steps):
    lr = LEARNING_RATES.get(name, DEFAULT_LR)
    tx, _ = build(name, optax.cosine_decay_schedule(lr, num_steps))
    params = params_tree()

    def step(carry, _):
        params, state = carry
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = update(tx, grads, state, params, loss)
        return (optax.apply_updates(params, updates), state), loss

    (params, _), _ = jax.jit(lambda p: jax.lax.scan(step, (p, tx.init(p)), None, length=num_steps))(params)
    return float(loss_fn(params_tree())), float(loss_fn(params))


@pytest.mark.parametrize("name", NAMES)
def test_converges_on_aquadratic(name):
    initial, final = _train(name, quadratic, 200)
    assert final < 1e-2 * initial, (initial, final)


@pytest.mark.parametrize("name", NAMES)
def test_converges_on_a_small_mlp(name):
    initial, final = _train(name, mlp_loss, 200)
    assert final < 0.3 * initial, (initial, final)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("name", NAMES)
def test_state_and_update_dtypes_follow_theparams_tree(name, dtype):
    tx, _ = build(name)
    params = params_tree(dtype)
    grads = jax.grad(quadratic)(params)
    updates, state = update(tx, grads, tx.init(params), params, quadratic(params))
    shapes = {p.shape for p in jax.tree.leaves(params)}
    per_param = [x for x in jax.tree.leaves(state) if x.shape in shapes]
    assert all(x.dtype == dtype for x in per_param), [x.dtype for x in per_param]
    assert all(u.dtype == dtype for u in jax.tree.leaves(updates))


@pytest.mark.parametrize("name", NAMES)
def test_jit_traces_once(name):
    tx, _ = build(name)
    traces = []

    @jax.jit
    def step(params, state):
        traces.append(1)  # runs only while tracing
        loss, grads = jax.value_and_grad(quadratic)(params)
        updates, state = update(tx, grads, state, params, loss)
        return optax.apply_updates(params, updates), state

    params = params_tree()
    state = tx.init(params)
    for _ in range(3):
        params, state = step(params, state)
    assert len(traces) == 1


@pytest.mark.parametrize("name", NAMES)
def test_inject_hyperparams_learning_rate(name):
    factory = OPTIMIZERS.get(name)
    _, cfg = build(name)
    plain = factory(cfg.learning_rate, cfg)
    injected = optax.inject_hyperparams(factory)(learning_rate=cfg.learning_rate, cfg=cfg)
    params = params_tree()
    grads, loss = jax.grad(quadratic)(params), quadratic(params)
    expected, _ = jax.jit(lambda s: update(plain, grads, s, params, loss))(plain.init(params))
    state = injected.init(params)
    got, _ = jax.jit(lambda s: update(injected, grads, s, params, loss))(state)
    # An injected learning rate is a traced array where the plain one is a folded constant, so XLA may
    # round a product differently: allow 2 float32 ulps.
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2 * 2**-23, atol=0), got, expected)
    state.hyperparams["learning_rate"] = jnp.zeros([], jnp.float32)
    zero, _ = jax.jit(lambda s: update(injected, grads, s, params, loss))(state)
    assert all(float(jnp.max(jnp.abs(u))) == 0.0 for u in jax.tree.leaves(zero))


@pytest.mark.parametrize("name", NAMES)
def test_state_keeps_the_param_shardings_under_a_mesh(name):
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    specs = {"w": P("data", None), "b": P(), "v": P(None, "data")}
    shardings = {k: NamedSharding(mesh, s) for k, s in specs.items()}
    params = jax.device_put(params_tree(), shardings)
    tx, _ = build(name)

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(quadratic)(params)
        updates, state = update(tx, grads, state, params, loss)
        return optax.apply_updates(params, updates), state

    state = jax.jit(tx.init)(params)
    for _ in range(2):
        params, state = step(params, state)
    by_shape = {params[k].shape: shardings[k] for k in params}
    for leaf in jax.tree.leaves(state):
        if leaf.shape in by_shape:
            assert leaf.sharding.is_equivalent_to(by_shape[leaf.shape], leaf.ndim), (leaf.shape, leaf.sharding)
    for k in params:
        assert params[k].sharding.is_equivalent_to(shardings[k], params[k].ndim)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="optax Adam bias correction under strict "
                                                "promotion")) if n in NOT_STRICT_CLEAN else n for n in NAMES],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_strict_dtype_promotion(name, dtype):
    tx, _ = build(name)
    params = params_tree(dtype)
    updates, _ = update(tx, jax.grad(quadratic)(params), tx.init(params), params, quadratic(params))
    assert all(u.dtype == dtype for u in jax.tree.leaves(updates))


def test_decay_mask_selects_weight_matrices_by_name():
    from flax import nnx

    from icml26zoo import ModelConfig
    from icml26zoo.models import build_model
    from icml26zoo.optim import decay_mask

    model = build_model(ModelConfig(d_model=32, num_layers=2, num_heads=2, num_kv_heads=1), rngs=nnx.Rngs(0))
    params = nnx.to_pure_dict(nnx.split(model, nnx.Param)[1])
    flags = {
        jax.tree_util.keystr(path): flag
        for path, flag in jax.tree_util.tree_leaves_with_path(decay_mask(params))
    }
    assert flags["['layers']['mlp']['up']['kernel']"]
    assert flags["['embed']['embedding']"]
    # Stacked [L, D] norm scales are two-dimensional yet must not be decayed.
    assert not flags["['layers']['mixer_residual']['norm']['scale']"]
    assert not flags["['final_norm']['scale']"]
