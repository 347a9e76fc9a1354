"""zoo.quant: the b-bit grid, the reductions between RTN / GPTQ / LDLQ / YAQA, their proxy losses, and the
model-level pipeline (Hessians from a tiny LM, quantized copy, output KL)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from icml26zoo import quant
from icml26zoo.models import ModelConfig, build_model

pytestmark = pytest.mark.usefixtures("fast_compile")


def _problem(seed, m=10, n=8):
    """A random layer W [m, n] and correlated SPD factors H_in [n, n], H_out [m, m]."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(m, n))
    x = rng.normal(size=(n, 3 * n)) * rng.uniform(0.2, 3.0, size=(n, 1))
    x[1] += x[0]
    g = rng.normal(size=(m, 3 * m)) * rng.uniform(0.2, 3.0, size=(m, 1))
    return w, x @ x.T / x.shape[1], g @ g.T / g.shape[1]


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_grid_levels_codes_and_steps(bits):
    w, _, _ = _problem(bits, m=6, n=40)
    levels = quant.grid_values(bits)
    assert len(levels) == 2**bits and np.allclose(levels, -levels[::-1]) and np.allclose(np.diff(levels), 1.0)
    for method in ("absmax", "mse"):
        steps = quant.row_steps(w, bits, method)
        rounded = quant.rtn_round(w, steps, bits)
        codes = quant.codes(w, steps, bits)
        assert codes.min() >= 0 and codes.max() < 2**bits
        np.testing.assert_allclose(rounded, levels[codes] * steps[:, None])
        inside = np.abs(w) <= (2**bits - 1) / 2 * steps[:, None]
        assert np.all(np.abs(rounded - w)[inside] <= steps[:, None].repeat(w.shape[1], 1)[inside] / 2 + 1e-12)
        if method == "absmax":
            assert np.all(inside)  # the outermost level sits at max|w_i|: nothing clips
            absmax_error = np.sum((rounded - w) ** 2, axis=1)
    mse_error = np.sum((quant.rtn_round(w, quant.row_steps(w, bits), bits) - w) ** 2, axis=1)
    assert np.all(mse_error <= absmax_error + 1e-12)


@pytest.mark.parametrize("bits", [1, 5, 8, 0, True, 2.0, "2"])
def test_unsupported_bit_widths_raise_naming_bits(bits):
    w = np.ones((2, 3))
    with pytest.raises(ValueError, match="bits must be one of"):
        quant.row_steps(w, bits)
    with pytest.raises(ValueError, match="bits must be one of"):
        quant.quantize_weight(w, "rtn", bits)


def test_ldl_factor_is_unit_lower_and_reconstructs():
    _, h, _ = _problem(0)
    lower, d = quant.ldl_lower(h)
    np.testing.assert_allclose(lower @ np.diag(d) @ lower.T, h, atol=1e-10)
    assert np.allclose(np.diag(lower), 1.0) and np.allclose(np.triu(lower, 1), 0.0) and np.all(d > 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reductions_between_the_methods(seed):
    w, h_in, h_out = _problem(seed)
    steps = quant.row_steps(w, 2)
    rtn = quant.rtn_round(w, steps, 2)
    eye_in, eye_out = np.eye(w.shape[1]), np.eye(w.shape[0])
    np.testing.assert_array_equal(quant.ldlq_round(w, eye_in, steps, 2), rtn)
    np.testing.assert_array_equal(quant.gptq_round(w, eye_in, steps, 2), rtn)
    np.testing.assert_array_equal(quant.yaqa_round(w, eye_in, eye_out, steps, 2), rtn)
    # YAQA with H_out = I is LDLQ with H_in ...
    np.testing.assert_array_equal(quant.yaqa_round(w, h_in, eye_out, steps, 2), quant.ldlq_round(w, h_in, steps, 2))
    # ... and LDLQ (last column first) on reversed columns is GPTQ (first column first), code for code.
    reversed_ldlq = quant.ldlq_round(w[:, ::-1], h_in[::-1, ::-1], steps, 2)[:, ::-1]
    np.testing.assert_array_equal(reversed_ldlq, quant.gptq_round(w, h_in, steps, 2))
    assert not np.array_equal(quant.ldlq_round(w, h_in, steps, 2), rtn)  # the feedback does act


def test_error_feedback_lowers_the_proxy_losses_on_average():
    rtn_layer, gptq_layer, rtn_kron, ldlq_kron, yaqa_kron = [], [], [], [], []
    for seed in range(8):
        w, h_in, h_out = _problem(seed + 10, m=12, n=10)
        steps = quant.row_steps(w, 2)
        p_in, p_out = quant.prepare_hessian(h_in), quant.prepare_hessian(h_out)
        rtn = quant.rtn_round(w, steps, 2)
        gptq, ldlq = quant.gptq_round(w, h_in, steps, 2), quant.ldlq_round(w, h_in, steps, 2)
        yaqa = quant.yaqa_round(w, h_in, h_out, steps, 2)
        rtn_layer.append(quant.proxy_loss(w, rtn, p_in))
        gptq_layer.append(quant.proxy_loss(w, gptq, p_in))
        rtn_kron.append(quant.kron_proxy_loss(w, rtn, p_in, p_out))
        ldlq_kron.append(quant.kron_proxy_loss(w, ldlq, p_in, p_out))
        yaqa_kron.append(quant.kron_proxy_loss(w, yaqa, p_in, p_out))
    assert np.mean(gptq_layer) < np.mean(rtn_layer)
    assert np.mean(yaqa_kron) < np.mean(ldlq_kron) and np.mean(yaqa_kron) < np.mean(rtn_kron)


def test_bad_rounding_inputs_raise():
    w, h_in, h_out = _problem(0)
    steps = quant.row_steps(w, 2)
    with pytest.raises(ValueError, match="h_in must have shape"):
        quant.ldlq_round(w, h_out, steps, 2)
    with pytest.raises(ValueError, match="h_out must have shape"):
        quant.yaqa_round(w, h_in, h_in, steps, 2)
    with pytest.raises(ValueError, match="steps must be"):
        quant.rtn_round(w, steps[:-1], 2)
    with pytest.raises(ValueError, match="method must be one of"):
        quant.quantize_weight(w, "awq", 2)
    with pytest.raises(ValueError, match=r"\(H_in, H_out\)"):
        quant.quantize_weight(w, "yaqa", 2, h_in)


def _cosine_to_exact(x, g, h_in, h_out):
    """cos(E[(g gᵀ) ⊗ (x xᵀ)], H_out ⊗ H_in) in the Van Loan rearrangement R = E[vec(g gᵀ) vec(x xᵀ)ᵀ]."""
    rearranged = np.einsum("ti,tj,tk,tl->ijkl", g, g, x, x).reshape(g.shape[1] ** 2, x.shape[1] ** 2) / len(x)
    inner = h_out.reshape(-1) @ rearranged @ h_in.reshape(-1)
    return inner / (np.linalg.norm(rearranged) * np.linalg.norm(h_out) * np.linalg.norm(h_in)), rearranged


def test_sketch_a_power_steps_approach_the_nearest_kronecker_product():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 5)) * rng.uniform(0.3, 2.0, size=5)
    g = rng.normal(size=(200, 4)) * (1 + np.abs(x[:, :1]))  # g's scale depends on x: F is not a Kronecker product
    cosines = [_cosine_to_exact(x, g, *quant.sketch_a_from_tokens(x, g, k))[0] for k in (1, 2, 3)]
    assert cosines[0] <= cosines[1] + 1e-12 <= cosines[2] + 2e-12
    cosine, rearranged = _cosine_to_exact(x, g, *quant.sketch_a_from_tokens(x, g, 40))
    singular = np.linalg.svd(rearranged, compute_uv=False)
    np.testing.assert_allclose(cosine, singular[0] / np.linalg.norm(singular), rtol=1e-8)
    assert cosine < 1 - 1e-4  # and it is an approximation
    with pytest.raises(ValueError, match="iterations"):
        quant.sketch_a_from_tokens(x, g, 0)


CFG = ModelConfig(vocab_size=32, d_model=16, num_layers=2, num_heads=2, num_kv_heads=1, mlp_dim=32, max_seq_len=16)


@pytest.fixture(scope="module")
def tiny():
    model = build_model(CFG, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(1), (3, 12), 0, CFG.vocab_size)
    batches = [{"inputs": tokens}]
    moments = quant.input_moments(model, batches)
    sketch = quant.kl_sketch_b(model, batches, jax.random.key(2))
    return model, tokens, batches, moments, sketch


def test_hessians_of_a_tiny_lm(tiny):
    model, tokens, _, moments, sketch = tiny
    names = [site.name for site in quant.linear_sites(model)]
    assert len(names) == 2 * 7 and set(moments) == set(names) == set(sketch)
    # The tapped inputs of layer 0's q_proj are its pre-norm RMSNorm(embedding), recomputed here by hand.
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    x = np.asarray(params["embed"]["embedding"], np.float64)[np.asarray(tokens).reshape(-1)]
    gain = np.asarray(params["layers"]["mixer_residual"]["norm"]["scale"][0], np.float64)
    mixer_in = x / np.sqrt(np.mean(x**2, axis=1, keepdims=True) + CFG.norm_eps) * gain
    np.testing.assert_allclose(moments["layers.0.mixer.q_proj"], mixer_in.T @ mixer_in / len(mixer_in), atol=1e-5)
    for h_in, h_out in sketch.values():
        # Sketch B: mean G_bᵀG_b and mean G_b G_bᵀ are symmetric PSD with equal traces (mean ‖G_b‖_F²).
        for h in (h_in, h_out):
            np.testing.assert_allclose(h, h.T, atol=1e-8 * max(1.0, np.abs(h).max()))
            assert np.linalg.eigvalsh(h).min() >= -1e-6 * np.abs(h).max()
        np.testing.assert_allclose(np.trace(h_in), np.trace(h_out), rtol=1e-4)
    assert sketch["layers.0.mlp.down"][0].shape == (32, 32) and sketch["layers.0.mlp.down"][1].shape == (16, 16)
    # Per-token inputs x and output gradients g with the same sampled targets rebuild Sketch B: the gradient
    # of sequence b is Σ_t x_t g_tᵀ.
    _, batch_key = jax.random.split(jax.random.key(2))
    stats = quant.token_statistics(model, {"inputs": tokens}, batch_key)
    for name in ("layers.0.mixer.q_proj", "layers.1.mlp.down"):
        x, g = stats[name]
        grads = [x[b * 12:(b + 1) * 12].T @ g[b * 12:(b + 1) * 12] for b in range(3)]
        np.testing.assert_allclose(np.mean([gb @ gb.T for gb in grads], axis=0), sketch[name][0], atol=1e-6)
        np.testing.assert_allclose(np.mean([gb.T @ gb for gb in grads], axis=0), sketch[name][1], atol=1e-6)


def test_quantize_model_rounds_only_the_linear_kernels_and_costs_kl(tiny):
    model, _, batches, moments, sketch = tiny
    before = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    quantized = quant.quantize_model(model, "yaqa", 2, sketch)
    after = nnx.to_pure_dict(nnx.state(quantized, nnx.Param))
    np.testing.assert_array_equal(after["embed"]["embedding"], before["embed"]["embedding"])
    for site in quant.linear_sites(model):
        w_hat = np.asarray(quant.sites.read_kernel(after, site), np.float64).T
        w = np.asarray(quant.sites.read_kernel(before, site), np.float64).T
        steps = quant.row_steps(w, 2)
        np.testing.assert_allclose(w_hat / steps[:, None] - 0.5, np.round(w_hat / steps[:, None] - 0.5), atol=1e-4)
        assert len(np.unique(np.round(w_hat[0] / steps[0], 4))) <= 4
    np.testing.assert_array_equal(nnx.to_pure_dict(nnx.state(model, nnx.Param))["layers"]["mixer"]["q_proj"]["kernel"],
                                  before["layers"]["mixer"]["q_proj"]["kernel"])  # the original is untouched
    assert quant.output_kl(model, model, batches) == pytest.approx(0.0, abs=1e-6)
    assert quant.output_kl(model, quantized, batches) > 1e-4
    with pytest.raises(ValueError, match="bits must be one of"):
        quant.quantize_model(model, "ldlq", 5, moments)
    with pytest.raises(ValueError, match="hessians must be given"):
        quant.quantize_model(model, "gptq", 2)
    with pytest.raises(ValueError, match="no entry for site"):
        quant.quantize_model(model, "ldlq", 2, {"layers.0.mixer.q_proj": moments["layers.0.mixer.q_proj"]})
