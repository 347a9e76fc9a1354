"""Muon fine-tuning recipe (arXiv 2605.10468): routing, identity reduction to optax, update scale, metrics."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.optim import muon as mf
from icml26zoo.registry import OPTIMIZERS
from icml26zoo.train.config import OptimConfig


def _lm_params(scanned):
    """The parameter layout of zoo's DecoderLM (nnx.to_pure_dict), with 2 layers stacked or listed."""
    layer = lambda *lead: {
        "mixer": {"q_proj": {"kernel": jnp.ones((*lead, 8, 8))}, "o_proj": {"kernel": jnp.ones((*lead, 8, 8))}},
        "mlp": {"up": {"kernel": jnp.ones((*lead, 8, 16))}, "down": {"kernel": jnp.ones((*lead, 16, 8))}},
        "mlp_residual": {"norm": {"scale": jnp.ones((*lead, 8))}},
    }
    layers = layer(2) if scanned else {0: layer(), 1: layer()}
    return {"embed": {"embedding": jnp.ones((32, 8))}, "layers": layers,
            "final_norm": {"scale": jnp.ones(8)}, "head": jnp.ones((8, 32))}


@pytest.mark.parametrize("scanned", [True, False])
def test_routing_sends_embeddings_heads_and_vectors_to_adamw(scanned):
    labels = mf.muon_param_labels(_lm_params(scanned))
    assert labels["embed"]["embedding"] == "adamw" and labels["head"] == "adamw"
    assert labels["final_norm"]["scale"] == "adamw"
    layers = [labels["layers"]] if scanned else [labels["layers"][0], labels["layers"][1]]
    for layer in layers:
        assert layer["mlp_residual"]["norm"]["scale"] == "adamw"  # [L, D] stacked is 1-D per layer
        assert {layer["mixer"]["q_proj"]["kernel"], layer["mlp"]["down"]["kernel"]} == {"muon"}


def test_stacked_matrices_keep_the_layer_axis_as_a_batch_axis():
    dims = mf.muon_dimension_numbers(_lm_params(True))
    assert dims["layers"]["mlp"]["up"]["kernel"] == optax.contrib.MuonDimensionNumbers(1, 2)
    assert dims["embed"]["embedding"] is None


def test_identity_routing_equals_optax_muon_exactly():
    key = jax.random.PRNGKey(0)
    params = {"w1": jax.random.normal(key, (8, 16)), "w2": jax.random.normal(key, (16, 4)), "b": jnp.ones(4)}
    ours = mf.muon_finetune(0.02, weight_decay=0.1)
    ref = optax.contrib.muon(0.02, ns_coeffs=(3.4445, -4.775, 2.0315), beta=0.95, weight_decay=0.1,
                             adam_b2=0.95, adam_weight_decay=0.1, consistent_rms=0.2)
    ours_state, ref_state = ours.init(params), ref.init(params)
    for step in range(4):
        grads = jax.tree.map(lambda p, s=step: jax.random.normal(jax.random.PRNGKey(s), p.shape), params)
        u_ours, ours_state = jax.jit(ours.update)(grads, ours_state, params)
        with jax.numpy_dtype_promotion("standard"):  # optax's Adam branch is not strict-promotion clean
            u_ref, ref_state = jax.jit(ref.update)(grads, ref_state, params)
        jax.tree.map(np.testing.assert_array_equal, u_ours, u_ref)


def _adam_states(state):
    found = []
    jax.tree.map(lambda s: found.append(s) if isinstance(s, optax.ScaleByAdamState) else None, state,
                 is_leaf=lambda s: isinstance(s, optax.ScaleByAdamState))
    return found


def test_adamw_branch_holds_adam_moments_for_exactly_the_adamw_leaves():
    params = _lm_params(True)
    state = mf.muon_finetune(1e-3).init(params)
    (adam,) = _adam_states(state)
    labels = mf.muon_param_labels(params)
    has_moment = jax.tree.map(lambda m: isinstance(m, jax.Array), adam.mu,
                              is_leaf=lambda m: isinstance(m, optax.MaskedNode))
    assert jax.tree.map(lambda label: label == "adamw", labels) == has_moment


def test_update_rms_and_singular_values_match_the_paper_scaling():
    lr, shape = 0.1, (128, 512)
    grad = {"w": jax.random.normal(jax.random.PRNGKey(1), shape)}
    tx = mf.muon_finetune(lr)
    update, _ = jax.jit(tx.update)(grad, tx.init(grad), grad)
    rms = float(jnp.sqrt(jnp.mean(update["w"] ** 2)))
    assert 0.17 * lr <= rms <= 0.2 * lr  # measured 0.173 × lr for a 128×512 random gradient
    sigma = np.linalg.svd(np.asarray(update["w"]) / (lr * 0.2 * np.sqrt(max(shape))), compute_uv=False)
    assert sigma.min() >= 0.5 and sigma.max() <= 1.5


def test_registered_factory_and_inject_hyperparams():
    cfg = OptimConfig(name="muon", options=(("consistent_rms", 0.2), ("muon_beta", 0.9)))
    tx = optax.inject_hyperparams(OPTIMIZERS.get("muon"))(learning_rate=0.01, cfg=cfg)
    params = _lm_params(False)
    state = tx.init(params)
    state.hyperparams["learning_rate"] = jnp.zeros([], jnp.float32)
    updates, _ = jax.jit(tx.update)(jax.tree.map(jnp.ones_like, params), state, params)
    assert all(float(jnp.max(jnp.abs(u))) == 0.0 for u in jax.tree.leaves(updates))


def test_update_strength_metrics():
    rank_one = jnp.outer(jnp.arange(1.0, 5.0), jnp.ones(3))
    metrics = mf.update_strength(rank_one)
    assert float(metrics["stable_rank"]) == pytest.approx(1.0, rel=1e-5)
    assert float(metrics["spectral_entropy"]) == pytest.approx(0.0, abs=1e-5)
    identity = mf.update_strength(jnp.eye(4))
    assert float(identity["stable_rank"]) == pytest.approx(4.0, rel=1e-5)
    assert float(identity["spectral_entropy"]) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"learning_rate": -1e-3}, "learning_rate"), ({"weight_decay": -0.1}, "weight_decay"),
     ({"beta": 1.0}, "beta"), ({"consistent_rms": -0.2}, "consistent_rms")],
)
def test_bad_hyperparameters_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        mf.muon_finetune(**({"learning_rate": 1e-3} | kwargs))


def _reference_orthogonalize(g: np.ndarray, triples, norm_scale: float, dtype) -> np.ndarray:
    """Newton–Schulz as the repository writes it: X = G / (s‖G‖_F), wide orientation, X ← aX + (bA + cA²)X."""
    x = jnp.asarray(g, dtype)
    x = x / (norm_scale * jnp.linalg.norm(x.astype(jnp.float32)).astype(dtype))
    wide = x.shape[0] <= x.shape[1]
    x = x if wide else x.T
    for a, b, c in triples:
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return np.asarray((x if wide else x.T).astype(jnp.float32))


def _first_update(ns_coeffs: str, ns_dtype: str, g: jax.Array, lr: float = 0.1) -> np.ndarray:
    """The first-step Muon update of one [m, n] matrix, divided by −lr·0.2·sqrt(max(m, n)): the NS output.
    On step 1 the bias-corrected Nesterov momentum is a positive multiple of G, and NS is scale-invariant."""
    params = {"w": jnp.zeros(g.shape, jnp.float32)}
    tx = mf.muon_finetune(lr, ns_coeffs=ns_coeffs, ns_dtype=ns_dtype, eps=1e-12)
    updates, _ = tx.update({"w": g}, tx.init(params), params)
    return np.asarray(updates["w"]) / (-lr * 0.2 * np.sqrt(max(g.shape)))


def test_polar_express_coefficients_follow_the_repository_recipe():
    triples = mf.polar_express_coeffs(5)
    low = 1e-3
    for a, b, c in triples:  # each quintic maps [low, 2 - low] around 1 and grows low
        new_low = a * low + b * low**3 + c * low**5
        assert new_low > low
        low = new_low
    assert 0.8 < low <= 1.0  # after five steps the smallest singular value has been pulled close to 1
    first = mf.ns_coefficients("polar_express", 5)[0]
    s = mf.POLAR_EXPRESS_NORM_SAFETY
    np.testing.assert_allclose(first, (triples[0][0] / s, triples[0][1] / s**3, triples[0][2] / s**5))
    assert mf.ns_coefficients("standard", 5) == (3.4445, -4.775, 2.0315)


@pytest.mark.parametrize("shape", [(32, 96), (96, 32)])
def test_polar_express_update_equals_a_direct_reference(shape):
    g = jax.random.normal(jax.random.key(3), shape)
    got = _first_update("polar_express", "float32", g)
    want = _reference_orthogonalize(np.asarray(g), mf.polar_express_coeffs(5), mf.POLAR_EXPRESS_NORM_SAFETY,
                                    jnp.float32)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4)  # float32 rounding of 5 quintic steps
    standard = _first_update("standard", "float32", g)
    np.testing.assert_allclose(standard, _reference_orthogonalize(np.asarray(g), [(3.4445, -4.775, 2.0315)] * 5,
                                                                  1.0, jnp.float32), rtol=0, atol=2e-4)
    sigma = np.linalg.svd(got, compute_uv=False)
    sigma_standard = np.linalg.svd(standard, compute_uv=False)
    assert sigma.max() - sigma.min() < sigma_standard.max() - sigma_standard.min()  # a tighter polar factor


def test_bfloat16_newton_schulz_matches_a_bfloat16_reference():
    g = jax.random.normal(jax.random.key(4), (48, 80))
    got = _first_update("standard", "bfloat16", g)
    want = _reference_orthogonalize(np.asarray(g), [(3.4445, -4.775, 2.0315)] * 5, 1.0, jnp.bfloat16)
    exact = _first_update("standard", "float32", g)
    # bfloat16 keeps 8 bits of mantissa: the two bfloat16 computations round differently (momentum scaling),
    # but both sit much closer to each other than a float32 run would allow to go unnoticed.
    assert np.abs(got - want).max() < 0.05
    assert np.abs(got - exact).max() > 1e-3  # the option changes the orthogonalisation
    params = {"w": jnp.zeros((4, 6)), "scale": jnp.ones((6,))}
    tx = mf.muon_finetune(0.1, ns_dtype="bfloat16")
    updates, _ = tx.update({"w": jnp.ones((4, 6)), "scale": jnp.ones((6,))}, tx.init(params), params)
    assert updates["w"].dtype == jnp.float32 and updates["scale"].dtype == jnp.float32


@pytest.mark.parametrize("ns_dtype", ["float32", "bfloat16"])
def test_newton_schulz_matmuls_run_in_the_chosen_dtype(ns_dtype):
    """The option must reach Newton–Schulz itself, not only round the gradient: optax's momentum buffer (which NS
    orthogonalises) would otherwise take the float32 params' dtype again."""
    params = {"w": jnp.zeros((8, 12), jnp.float32)}
    tx = mf.muon_finetune(0.1, ns_dtype=ns_dtype)
    jaxpr = jax.make_jaxpr(tx.update)({"w": jnp.ones((8, 12))}, tx.init(params), params)
    dots = [eqn.outvars[0].aval.dtype for eqn in _equations(jaxpr.jaxpr) if eqn.primitive.name == "dot_general"]
    assert dots and set(dots) == {jnp.dtype(ns_dtype)}


def _equations(jaxpr):
    """Every equation of a jaxpr, descending into sub-jaxprs (loops, conditionals, pjit)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


@pytest.mark.parametrize(("kwargs", "name"), [({"ns_coeffs": "dion"}, "ns_coeffs"),
                                              ({"ns_dtype": "float16"}, "ns_dtype")])
def test_bad_orthogonalisation_options_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        mf.muon_finetune(0.1, **kwargs)
