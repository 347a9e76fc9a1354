"""Unit tests of zoo/layers against NumPy formulas."""

from __future__ import annotations

import dataclasses
import inspect
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26zoo.layers import (
    NORM_PLACEMENTS,
    Embedding,
    GatedRMSNorm,
    HeadRMSNorm,
    Residual,
    RMSNorm,
    SwiGLU,
    apply_rope,
    rope_inverse_frequencies,
)
from icml26zoo.layers.mlp import GeluMLP, build_mlp
from icml26zoo.layers.norms import DyT
from icml26zoo.layers.options import build_options
from icml26zoo.models import config
from icml26zoo.registry import MIXERS, OPTIMIZERS
from icml26zoo.train.config import OptimConfig

pytestmark = pytest.mark.usefixtures("fast_compile")

F32 = {"atol": 1e-5, "rtol": 1e-5}
BF16 = {"atol": 2e-2, "rtol": 2e-2}


def _normal(seed: int, shape, dtype=jnp.float32) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


def _rms_reference(x: np.ndarray, scale: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * scale


def test_rmsnorm_matches_numpy_formula():
    norm = RMSNorm(16, eps=1e-6)
    norm.scale[...] = _normal(1, (16,))
    x = 3.0 * _normal(0, (2, 5, 16))
    expected = _rms_reference(np.asarray(x), np.asarray(norm.scale[...]), 1e-6)
    np.testing.assert_allclose(norm(x), expected, **F32)


def test_rmsnorm_bfloat16_keeps_dtype_and_float32_statistics():
    norm = RMSNorm(64)
    # Large values: a bfloat16 sum of 64 squares near 1e4 each would lose the low digits.
    x = (100.0 * _normal(2, (4, 64))).astype(jnp.bfloat16)
    y = norm(x)
    assert y.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        y.astype(jnp.float32), _rms_reference(np.asarray(x, np.float32), 1.0, 1e-6), **BF16
    )


def test_rmsnorm_rejects_wrong_width():
    with pytest.raises(ValueError, match=r"last dimension 8, got shape \(2, 7\)"):
        RMSNorm(8)(jnp.zeros((2, 7)))


def _rope_numpy(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """Independent complex-number form: pairs (x_i, x_{i+D/2}) as complex numbers times e^{i·pos·freq}."""
    half = x.shape[-1] // 2
    freqs = theta ** (-np.arange(half) * 2.0 / x.shape[-1])
    z = (x[..., :half] + 1j * x[..., half:]) * np.exp(1j * positions[:, :, None, None] * freqs)
    return np.concatenate([z.real, z.imag], axis=-1)


def test_rope_matches_complex_rotation():
    x = _normal(3, (2, 6, 3, 8))
    positions = jnp.asarray([[0, 1, 2, 3, 4, 5], [7, 0, 1, 100, 2, 3]], jnp.int32)
    expected = _rope_numpy(np.asarray(x, np.float64), np.asarray(positions), 500.0)
    np.testing.assert_allclose(apply_rope(x, positions, theta=500.0), expected, **F32)


def test_rope_inverse_frequencies_use_theta():
    np.testing.assert_allclose(rope_inverse_frequencies(4, 100.0), [1.0, 0.1], **F32)


@settings(max_examples=20, deadline=None)
@given(
    m=st.integers(0, 200),
    n=st.integers(0, 200),
    shift=st.integers(0, 2000),
    theta=st.sampled_from([100.0, 10_000.0]),
)
def test_rope_dot_product_depends_only_on_position_difference(m, n, shift, theta):
    q, k = _normal(4, (1, 1, 1, 16)), _normal(5, (1, 1, 1, 16))

    def score(pq, pk):
        rq = apply_rope(q, jnp.asarray([[pq]], jnp.int32), theta=theta)
        rk = apply_rope(k, jnp.asarray([[pk]], jnp.int32), theta=theta)
        return float(jnp.sum(rq * rk))

    # float32 angles at position ~2000 carry about 2000 · 2^-24 ≈ 1e-4 rad of rounding error.
    np.testing.assert_allclose(score(m + shift, n + shift), score(m, n), atol=1e-3, rtol=1e-3)


def test_rope_rejects_bad_positions():
    with pytest.raises(ValueError, match=r"positions must be an integer array of shape \(2, 4\).*\(2, 5\)"):
        apply_rope(jnp.zeros((2, 4, 1, 8)), jnp.zeros((2, 5), jnp.int32), theta=1e4)
    with pytest.raises(ValueError, match=r"positions must be an integer array.*float32"):
        apply_rope(jnp.zeros((2, 4, 1, 8)), jnp.zeros((2, 4), jnp.float32), theta=1e4)


def test_swiglu_shapes_and_formula():
    mlp = SwiGLU(8, 24, rngs=nnx.Rngs(0))
    x = _normal(6, (2, 3, 8))
    y = mlp(x)
    chex.assert_shape(y, (2, 3, 8))
    chex.assert_shape(
        [mlp.gate.kernel[...], mlp.up.kernel[...], mlp.down.kernel[...]], [(8, 24), (8, 24), (24, 8)]
    )
    xs, g, u, d = (
        np.asarray(a, np.float64) for a in (x, mlp.gate.kernel[...], mlp.up.kernel[...], mlp.down.kernel[...])
    )
    gate = xs @ g
    expected = (gate / (1 + np.exp(-gate)) * (xs @ u)) @ d
    np.testing.assert_allclose(y, expected, **F32)


def test_swiglu_bfloat16_compute():
    mlp = SwiGLU(8, 16, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    assert mlp(_normal(7, (1, 2, 8))).dtype == jnp.bfloat16
    assert mlp.gate.kernel[...].dtype == jnp.float32


def test_embedding_lookup_and_tied_head():
    embed = Embedding(10, 4, rngs=nnx.Rngs(0))
    tokens = jnp.asarray([[1, 9, 1]], jnp.int32)
    table = np.asarray(embed.embedding[...])
    np.testing.assert_array_equal(embed(tokens), table[[[1, 9, 1]]])
    x = _normal(8, (1, 3, 4))
    logits = embed.attend(x)
    assert logits.dtype == jnp.float32
    np.testing.assert_allclose(logits, np.asarray(x) @ table.T, **F32)


def test_embedding_bfloat16_head_returns_float32():
    embed = Embedding(10, 4, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    assert embed(jnp.zeros((1, 2), jnp.int32)).dtype == jnp.bfloat16
    assert embed.attend(_normal(9, (1, 2, 4), jnp.bfloat16)).dtype == jnp.float32


def test_embedding_rejects_float_tokens():
    with pytest.raises(
        ValueError, match=r"tokens must be an integer array, got dtype float32 shape \(1, 2\)"
    ):
        Embedding(10, 4, rngs=nnx.Rngs(0))(jnp.zeros((1, 2)))


def test_norm_placements_match_config():
    assert NORM_PLACEMENTS == config.NORM_PLACEMENTS


@pytest.mark.parametrize("placement", NORM_PLACEMENTS)
def test_residual_placements(placement):
    residual = Residual(placement, 8)
    for i, norm in enumerate([residual.norm, residual.norm_out]):
        if norm is not None:  # distinct scales so that a swapped norm would show
            norm.scale[...] = 1.0 + _normal(10 + i, (8,))
    x = 4.0 * _normal(12, (2, 3, 8))

    def f(h):
        return jnp.tanh(2.0 * h) + 0.5, "aux"

    out, aux = residual(x, f)
    assert aux == "aux"

    def rms(h, n):
        return _rms_reference(np.asarray(h), np.asarray(n.scale[...]), 1e-6)

    def fn(h):
        return np.tanh(2.0 * np.asarray(h, np.float64)) + 0.5

    xs = np.asarray(x, np.float64)
    expected = {
        "pre": lambda: xs + fn(rms(x, residual.norm)),
        "post": lambda: rms(xs + fn(x), residual.norm),
        "sandwich": lambda: xs + rms(fn(rms(x, residual.norm)), residual.norm_out),
        "none": lambda: xs + fn(x),
    }[placement]()
    np.testing.assert_allclose(out, expected, **F32)
    n_norms = {"pre": 1, "post": 1, "sandwich": 2, "none": 0}[placement]
    assert len(jax.tree.leaves(nnx.state(residual, nnx.Param))) == n_norms


def test_residual_rejects_unknown_placement():
    with pytest.raises(ValueError, match=r"norm_placement must be one of .*'middle'"):
        Residual("middle", 8)


@pytest.mark.parametrize("name", MIXERS.names())
def test_every_mixer_rejects_a_misspelt_option(name):
    cfg = config.ModelConfig(
        vocab_size=32, d_model=16, num_layers=1, num_heads=2, max_seq_len=8, mixer=name,
        mixer_options=(("no_such_option", 1),),
    )
    with pytest.raises(ValueError, match=rf"unknown {name} mixer option 'no_such_option'; valid options: \["):
        MIXERS.get(name)(cfg, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("name", OPTIMIZERS.names())
def test_every_optimizer_rejects_a_misspelt_option(name):
    cfg = OptimConfig(name=name, options=(("no_such_option", 1),))
    with pytest.raises(ValueError, match=rf"unknown {name} optimizer option 'no_such_option'; valid options: \["):
        OPTIMIZERS.get(name)(0.01, cfg)


@dataclasses.dataclass(frozen=True)
class _Options:
    flag: bool = False
    size: int = 4
    scale: float = 1.0
    mode: str | None = None
    dims: tuple[int, ...] = (1,)


def test_build_options_applies_defaults_converts_lists_and_checks_types():
    opts = build_options(_Options, (("size", 8), ("dims", [2, 3]), ("scale", 2)), owner="toy")
    assert opts == _Options(size=8, dims=(2, 3), scale=2)
    for name, value, expected in [("flag", 1, "a bool"), ("size", True, "an integer"), ("scale", "x", "a number"),
                                  ("mode", 3, "a string or None"), ("dims", 3, "a tuple")]:
        with pytest.raises(ValueError, match=rf"toy option '{name}' must be {expected}, got {value!r}"):
            build_options(_Options, ((name, value),), owner="toy")
    with pytest.raises(ValueError, match=r"unknown toy option 'sizes'; valid options: \['dims', 'flag', 'mode'"):
        build_options(_Options, (("sizes", 1),), owner="toy")
    with pytest.raises(ValueError, match=r"unknown toy option 'flag'; valid options: \['dims', 'mode', 'scale'"):
        build_options(_Options, (("flag", True),), owner="toy", exclude=("flag",))


@pytest.mark.parametrize("name", ["circulation", "deltanet", "gated_deltanet", "kda", "hyena", "mamba", "mamba2",
                                  "mdn", "protot"])
def test_position_free_mixers_default_positions_to_none(name):
    assert inspect.signature(MIXERS.get(name).__call__).parameters["positions"].default is None


def test_head_and_gated_rmsnorm_match_numpy_formula():
    x, gate = _normal(0, (2, 3, 2, 8)), _normal(1, (2, 3, 2, 8))
    head = HeadRMSNorm(2, 8, eps=1e-6)
    head.scale[...] = _normal(2, (2, 8))
    np.testing.assert_allclose(head(x), _rms_reference(np.asarray(x), np.asarray(head.scale[...]), 1e-6), **F32)
    gated = GatedRMSNorm(8, eps=1e-5, activation="sigmoid")
    gated.scale[...] = _normal(3, (8,))
    expected = _rms_reference(np.asarray(x), np.asarray(gated.scale[...]), 1e-5) / (1 + np.exp(-np.asarray(gate)))
    np.testing.assert_allclose(gated(x, gate), expected, **F32)
    with pytest.raises(ValueError, match=r"activation must be one of \['silu', 'sigmoid'\], got 'relu'"):
        GatedRMSNorm(8, eps=1e-5, activation="relu")
    with pytest.raises(ValueError, match=r"x must end in \[H, Dh\]"):
        head(x[..., :4])


def test_dyt_matches_formula_and_rejects_bad_inputs():
    dyt = DyT(8, alpha_init=0.7)
    assert float(dyt.alpha[...]) == pytest.approx(0.7)
    dyt.weight[...] = _normal(20, (8,))
    dyt.bias[...] = _normal(21, (8,))
    x = 5.0 * _normal(22, (2, 3, 8))
    expected = np.tanh(0.7 * np.asarray(x, np.float64)) * np.asarray(dyt.weight[...]) + np.asarray(dyt.bias[...])
    np.testing.assert_allclose(dyt(x), expected, **F32)
    assert dyt(x.astype(jnp.bfloat16)).dtype == jnp.bfloat16
    with pytest.raises(ValueError, match=r"x must have last dimension 8"):
        dyt(jnp.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"alpha_init must be > 0, got 0.0"):
        DyT(8, alpha_init=0.0)


def test_gelu_mlp_matches_formula():
    mlp = GeluMLP(8, 32, rngs=nnx.Rngs(0))
    x = _normal(23, (2, 3, 8))
    xs, u, d = (np.asarray(a, np.float64) for a in (x, mlp.up.kernel[...], mlp.down.kernel[...]))
    hidden = xs @ u
    gelu = 0.5 * hidden * (1.0 + np.vectorize(math.erf)(hidden / math.sqrt(2.0)))
    np.testing.assert_allclose(mlp(x), gelu @ d, **F32)
    assert isinstance(build_mlp("swiglu", 8, 16, rngs=nnx.Rngs(0)), SwiGLU)
    with pytest.raises(ValueError, match=r"mlp activation must be one of \['swiglu', 'gelu'\], got 'relu'"):
        build_mlp("relu", 8, 16, rngs=nnx.Rngs(0))


def test_norm_and_mlp_activation_config_switches():
    base = config.ModelConfig(d_model=48)
    assert (base.norm, base.mlp_activation, base.resolved_mlp_dim) == ("rmsnorm", "swiglu", 128)
    gelu = dataclasses.replace(base, mlp_activation="gelu")
    assert gelu.resolved_mlp_dim == 4 * 48  # 2 * 4D * D = 3 * (8/3)D * D: SwiGLU's parameter count
    with pytest.raises(ValueError, match=r"norm must be one of \['rmsnorm', 'dyt'\], got 'layernorm'"):
        dataclasses.replace(base, norm="layernorm")
    with pytest.raises(ValueError, match=r"mlp_activation must be one of \['swiglu', 'gelu'\], got 'relu'"):
        dataclasses.replace(base, mlp_activation="relu")


@pytest.mark.parametrize("placement", ["pre", "sandwich"])
def test_block_uses_dyt_and_gelu_when_asked(placement):
    from icml26zoo.models.block import Block

    cfg = config.ModelConfig(d_model=16, num_heads=2, num_kv_heads=1, num_layers=1, norm_placement=placement,
                             norm="dyt", mlp_activation="gelu", scan_layers=False)
    block = Block(cfg, rngs=nnx.Rngs(0))
    norms = [block.mixer_residual.norm, block.mlp_residual.norm]
    if placement == "sandwich":
        norms += [block.mixer_residual.norm_out, block.mlp_residual.norm_out]
    assert all(isinstance(n, DyT) for n in norms)
    assert isinstance(block.mlp, GeluMLP)
    # pre: x + mlp(DyT(x)) on the mixer's output stream, checked through the block's own pieces.
    x = _normal(24, (1, 5, 16))
    positions = jnp.arange(5, dtype=jnp.int32)[None]
    out, _ = block(x, segment_ids=None, positions=positions)
    h, _ = block.mixer_residual(x, lambda a: block.mixer(a, segment_ids=None, positions=positions))
    if placement == "pre":
        np.testing.assert_allclose(out, h + block.mlp(block.mlp_residual.norm(h)), **F32)
    else:
        expected = h + block.mlp_residual.norm_out(block.mlp(block.mlp_residual.norm(h)))
        np.testing.assert_allclose(out, expected, **F32)


def test_dyt_also_replaces_the_final_norm_before_the_head():
    from icml26zoo.layers.norms import RMSNorm
    from icml26zoo.models import build_model

    cfg = config.ModelConfig(d_model=16, num_heads=2, num_kv_heads=1, num_layers=1, vocab_size=32)
    assert isinstance(build_model(cfg, rngs=nnx.Rngs(0)).final_norm, RMSNorm)
    dyt = build_model(dataclasses.replace(cfg, norm="dyt"), rngs=nnx.Rngs(0))
    assert isinstance(dyt.final_norm, DyT)
    assert dyt(jnp.arange(6, dtype=jnp.int32)[None]).shape == (1, 6, 32)
