"""MDN reproduction: bad inputs, and the design notes invariants 4 (nesting), 5 (exact write), 6
(non-expansiveness) and 7 (the spectral radius of MDN's 2x2 gated momentum transition is below 1). The SMOKE run,
its command line and resume are the experiment contract's (tests/repro/test_experiments.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.kernels.delta_rule.reference import gated_delta_rule
from icml26zoo.kernels.momentum_delta_rule.reference import momentum_delta_rule
from icml26zoo.mixers.mdn import MomentumDeltaNet, momentum_transition, transition_spectral_radius
from icml26zoo.repro import mdn
from icml26zoo.repro.mdn_parts import mqar_config

B, T, H, K, V = 2, 6, 2, 8, 4
ATOL = 2e-5  # float32 recurrences of a few steps


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mixers": ["mdn", "gla"]}, r"mixers: unknown name 'gla'; expected one of \['mdn'"),
    ({"mixers": []}, r"mixers must name at least one"),
    ({"pairs": [4, 0]}, r"pairs\[i\] must be an integer >= 1, got 0"),
    ({"pairs": [20]}, r"pairs: 20 pairs need p <= num_keys \(16\) and 4p - 1 <= budget.seq_len \(64\)"),
    ({"pairs": [4, 4]}, r"pairs must not repeat a value"),
    ({"num_keys": 40}, r"num_keys must be an integer in 1 .. 31 .*got 40"),
    ({"byte_corpus": "yes"}, r"byte_corpus must be True or False, got 'yes'"),
    ({"stability_at_init": None}, r"stability_at_init must be True or False, got None"),
    ({"implementation": "pallas"}, r"implementation must be one of \['reference', 'xla'\], got 'pallas'"),
    ({"stability_rows": 0}, r"stability_rows must be an integer >= 1, got 0"),
])
def test_bad_arguments_are_value_errors(tmp_path, kwargs, message):
    kwargs = {"num_keys": 16} | kwargs
    with pytest.raises(ValueError, match=message):
        mdn.run(tmp_path / "run", budget=mdn.QUICK, **kwargs)
    assert not (tmp_path / "run").exists()  # checked before anything is written


def test_presets_compared_have_matched_shapes():
    models = [load_preset(f"{m}_mqar").model for m in mdn.MIXERS]
    assert {(m.d_model, m.num_layers, m.num_heads, m.vocab_size) for m in models} == {(64, 2, 4, 64)}


# Invariant 7: the 2x2 input-free transition along k̂, A = [[α(1 − βη), −βμ], [ηα, μ]].


def admissible_grid(n: int = 24) -> tuple[np.ndarray, ...]:
    """A dense grid over the admissible gates, edges included: α, μ ∈ (0, 1), β ∈ [0, 1], η ∈ [0, 2]."""
    unit = np.concatenate([np.linspace(1e-4, 1 - 1e-4, n - 2), [1e-7, 1 - 1e-6]])
    alpha, mu, beta, eta = np.meshgrid(unit, unit, np.linspace(0, 1, n), np.linspace(0, 2, n), indexing="ij")
    return np.log(alpha), np.log(mu), beta, eta


def test_transition_matches_the_spec_matrix_and_its_eigenvalues():
    g, log_mu, beta, eta = (np.asarray(a, np.float32) for a in ([-0.3, -2.0], [-0.1, -1.0], [0.4, 1.0], [1.5, 0.2]))
    a = np.asarray(momentum_transition(g, log_mu, beta, eta))
    al, mu = np.exp(g), np.exp(log_mu)
    expected = np.stack([np.stack([al * (1 - beta * eta), -beta * mu], -1), np.stack([eta * al, mu], -1)], -2)
    np.testing.assert_allclose(a, expected, rtol=1e-6)
    eig = np.abs(np.linalg.eigvals(a.astype(np.float64))).max(-1)
    np.testing.assert_allclose(np.asarray(transition_spectral_radius(g, log_mu, beta, eta)), eig, rtol=1e-5)


def test_jury_conditions_hold_over_the_admissible_gates():
    """§1.1: |det| < 1, 1 − tr + det > 0 and 1 + tr + det > 0, hence radius < 1, with p = α k̂."""
    g, log_mu, beta, eta = admissible_grid()
    a = np.asarray(momentum_transition(g, log_mu, beta, eta), np.float64)
    tr, det = a[..., 0, 0] + a[..., 1, 1], np.linalg.det(a)
    assert np.all(np.abs(det) < 1) and np.all(1 - tr + det > 0) and np.all(1 + tr + det > 0)
    radius = np.abs(np.linalg.eigvals(a)).max(-1)
    assert radius.max() < 1
    closed_form = np.asarray(transition_spectral_radius(g, log_mu, beta, eta))
    # Near a repeated eigenvalue √(tr² − 4 det) turns float32 rounding ~1e-7 into ~3e-4.
    np.testing.assert_allclose(closed_form, radius, atol=1e-3)
    assert closed_form.max() < 1


def test_the_check_fails_without_the_decayed_prediction_key():
    """With p = k̂ (§1.1) 1 + tr + det = (1 + α)(1 + μ) − βη goes negative: the radius exceeds 1."""
    g, log_mu, beta, eta = (np.asarray([a], np.float32) for a in (np.log(0.05), np.log(0.05), 1.0, 1.9))
    assert float(transition_spectral_radius(g, log_mu, beta, eta, p_times_alpha=False)[0]) > 1
    assert float(transition_spectral_radius(g, log_mu, beta, eta)[0]) < 1


def test_gates_of_a_real_layer_give_radius_below_one():
    cfg = mqar_config("mdn", pairs=4, num_keys=16, data_dir="unused", implementation="reference").model
    layer = MomentumDeltaNet(cfg, rngs=nnx.Rngs(3))
    # A large input spreads the gates over their ranges (α and μ down to the floor, η near 0 and 2).
    x = 30.0 * jax.random.normal(jax.random.key(0), (4, 32, cfg.d_model))
    gates = layer.gates(x)
    assert float(jnp.min(gates["eta"])) < 0.2 and float(jnp.max(gates["eta"])) > 1.8
    radius = transition_spectral_radius(**gates)
    assert radius.shape == (4, 32, cfg.num_heads) and float(jnp.max(radius)) < 1


# Invariant 4 (nesting), against the kernels' float32 references.


def random_inputs(seed: int = 0) -> dict[str, jax.Array]:
    keys = jax.random.split(jax.random.key(seed), 8)
    unit = lambda a: a / jnp.linalg.norm(a, axis=-1, keepdims=True)  # noqa: E731
    return {
        "q": jax.random.normal(keys[0], (B, T, H, K)), "k": unit(jax.random.normal(keys[1], (B, T, H, K))),
        "v": jax.random.normal(keys[2], (B, T, H, V)), "g": -jax.random.uniform(keys[3], (B, T, H), maxval=2.0),
        "beta": jax.random.uniform(keys[4], (B, T, H)), "eta": jax.random.uniform(keys[5], (B, T, H), maxval=2.0),
        "log_mu": -jax.random.uniform(keys[6], (B, T, H), maxval=2.0),
        "s0": jax.random.normal(keys[7], (B, H, K, V)),
    }


def test_4b_gdn_is_kda_with_equal_key_dim_decays():
    x = random_inputs()
    o_gdn, s_gdn = gated_delta_rule(x["q"], x["k"], x["v"], beta=x["beta"], g=x["g"], initial_state=x["s0"])
    g_kda = jnp.broadcast_to(x["g"][..., None], (B, T, H, K))
    o_kda, s_kda = gated_delta_rule(x["q"], x["k"], x["v"], beta=x["beta"], g=g_kda, initial_state=x["s0"])
    np.testing.assert_allclose(o_kda, o_gdn, atol=ATOL)
    np.testing.assert_allclose(s_kda, s_gdn, atol=ATOL)
    # Unequal key-dim decays differ: the check can fail.
    o_other, _ = gated_delta_rule(x["q"], x["k"], x["v"], beta=x["beta"], g=g_kda * jnp.linspace(0.5, 1.5, K),
                                  initial_state=x["s0"])
    assert float(jnp.max(jnp.abs(o_other - o_gdn))) > 1e-2


def test_mdn_without_momentum_is_gdn_with_beta_eta():
    """Invariant 4, MDN bullet: μ → 0 (log μ = −60 here: the op wants it finite) gives GDN with β_GDN = βη."""
    x = random_inputs(1)
    p = jnp.exp(x["g"])[..., None] * x["k"]
    o, (s, _) = momentum_delta_rule(x["q"], x["k"], x["v"], p, g=x["g"], log_mu=jnp.full_like(x["g"], -60.0),
                                    beta=x["beta"], eta=x["eta"], initial_state=(x["s0"], jnp.zeros_like(x["s0"])))
    o_gdn, s_gdn = gated_delta_rule(x["q"], x["k"], x["v"], beta=x["beta"] * x["eta"], g=x["g"],
                                    initial_state=x["s0"])
    np.testing.assert_allclose(o, o_gdn, atol=ATOL)
    np.testing.assert_allclose(s, s_gdn, atol=ATOL)


def test_mdn_with_zero_beta_only_decays_the_state():
    """Invariant 4, last bullet: β ≡ 0 gives S_T = exp(Σ g) S_0 while M still accumulates."""
    x = random_inputs(2)
    p = jnp.exp(x["g"])[..., None] * x["k"]
    _, (s, m) = momentum_delta_rule(x["q"], x["k"], x["v"], p, g=x["g"], log_mu=x["log_mu"],
                                    beta=jnp.zeros_like(x["beta"]), eta=x["eta"],
                                    initial_state=(x["s0"], jnp.zeros_like(x["s0"])))
    decay = jnp.exp(jnp.sum(x["g"], axis=1))[..., None, None]  # [B, H, 1, 1]
    np.testing.assert_allclose(s, decay * x["s0"], atol=ATOL)
    assert float(jnp.min(jnp.linalg.norm(m, axis=(-2, -1)))) > 1e-3


# Invariant 5: exact write. β = 1, α = 1, ‖k‖ = 1: after the step S_tᵀ k_t = v_t.


def test_exact_write_of_the_delta_rule_and_of_mdn():
    x = random_inputs(3)
    ones, s_gdn = jnp.ones((B, 1, H)), x["s0"]
    s_mdn, m_mdn = x["s0"], jnp.zeros_like(x["s0"])
    for t in range(T):
        q, k, v = x["q"][:, t:t + 1], x["k"][:, t:t + 1], x["v"][:, t:t + 1]
        _, s_gdn = gated_delta_rule(q, k, v, beta=ones, g=jnp.zeros((B, 1, H)), initial_state=s_gdn)
        # MDN with η = 1, no momentum carried over (μ → 0), p = α k̂ = k̂.
        _, (s_mdn, m_mdn) = momentum_delta_rule(q, k, v, k, g=jnp.zeros((B, 1, H)), log_mu=jnp.full((B, 1, H), -60.0),
                                                beta=ones, eta=ones, initial_state=(s_mdn, m_mdn))
        for s in (s_gdn, s_mdn):
            np.testing.assert_allclose(jnp.einsum("bhkv,bhk->bhv", s, k[:, 0]), v[:, 0], atol=ATOL)
    # With β = 1/2 the write is only partial: the check can fail.
    _, s_half = gated_delta_rule(q, k, v, beta=ones / 2, initial_state=x["s0"])
    assert float(jnp.max(jnp.abs(jnp.einsum("bhkv,bhk->bhv", s_half, k[:, 0]) - v[:, 0]))) > 1e-2


# Invariant 6: non-expansiveness.


def test_householder_factor_is_non_expansive_for_beta_up_to_two():
    k = np.random.default_rng(0).normal(size=(64, K))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    outer = k[:, :, None] * k[:, None, :]
    for beta in np.linspace(0, 2, 9):
        assert np.linalg.norm(np.eye(K) - beta * outer, ord=2, axis=(-2, -1)).max() <= 1 + 1e-12
    assert np.linalg.norm(np.eye(K) - 2.1 * outer, ord=2, axis=(-2, -1)).min() > 1  # beyond 2 it expands


@pytest.mark.parametrize("decay", ["deltanet", "gdn", "kda"])
def test_input_free_state_norm_does_not_grow(decay):
    x = random_inputs(4)
    g = {"deltanet": None, "gdn": x["g"], "kda": -jax.random.uniform(jax.random.key(9), (B, T, H, K))}[decay]
    beta = 2.0 * x["beta"]  # β ∈ [0, 2] (allow_neg_eigval)
    s, norms = x["s0"], [float(jnp.linalg.norm(x["s0"]))]
    for t in range(T):
        step_g = None if g is None else g[:, t:t + 1]
        _, s = gated_delta_rule(x["q"][:, t:t + 1], x["k"][:, t:t + 1], jnp.zeros((B, 1, H, V)),
                                beta=beta[:, t:t + 1], g=step_g, initial_state=s)
        norms.append(float(jnp.linalg.norm(s)))
    assert all(later <= earlier * (1 + 1e-6) for earlier, later in zip(norms, norms[1:], strict=False))
    assert norms[-1] < norms[0]  # it does shrink (the keys are not all orthogonal to S)
