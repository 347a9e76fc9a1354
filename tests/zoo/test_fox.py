"""The FoX mixer: float64 references, reductions (gate "none" = attention), gate extremes and variants,
token shift at segment boundaries, decode numerics, options. The model-level checks (decode = forward,
packed = padded, causality, ...) run in tests/zoo/test_conformance.py for every CONFORMANCE_OPTIONS entry.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mixer_helpers as mh
import numpy as np
import pytest
from flax import nnx
from mixer_helpers import F32, SEGMENTS, B, T

from icml26zoo.kernels.forgetting_attention.decode import cached_forgetting_attention
from icml26zoo.mixers.attention import Attention
from icml26zoo.mixers.fox import ForgettingAttention
from icml26zoo.mixers.fox_parts import pro_mlp_dim, token_shift
from icml26zoo.registry import MIXERS

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = mh.small_config(mixer="fox")
_mixer = functools.partial(mh.build_mixer, ForgettingAttention, CFG)
_inputs = functools.partial(mh.random_inputs, CFG.d_model)


def _w(linear) -> np.ndarray:
    return np.asarray(linear.kernel[...], np.float64)


def _reference(mixer: ForgettingAttention, x, segment_ids) -> np.ndarray:
    """Materialized FoX (gate "full", no Pro flags, no RoPE) in float64 NumPy with GQA and segments."""
    x = np.asarray(x, np.float64)
    h, hkv, dh = CFG.num_heads, CFG.num_kv_heads, CFG.resolved_head_dim
    q = (x @ _w(mixer.q_proj)).reshape(B, T, h, dh)
    k = (x @ _w(mixer.k_proj)).reshape(B, T, hkv, dh)
    v = (x @ _w(mixer.v_proj)).reshape(B, T, hkv, dh)
    z = x @ _w(mixer.fgate_proj) + np.asarray(mixer.fgate_proj.bias[...], np.float64)
    cum = np.cumsum(-np.logaddexp(0.0, -z), axis=1)  # Λ in float64, where differencing is harmless
    probs = mh.decayed_softmax_reference(q, k, cum, segment_ids)
    out = np.zeros((B, T, h, dh))
    for b in range(B):
        for head in range(h):
            out[b, :, head] = probs[b, head] @ v[b, :, head // (h // hkv)]
    return out.reshape(B, T, h * dh) @ _w(mixer.o_proj)


def _set_gate(mixer: ForgettingAttention, bias) -> None:
    """Data-independent full gate: zero weights, the given per-head pre-activations as the bias."""
    mixer.fgate_proj.kernel[...] = jnp.zeros_like(mixer.fgate_proj.kernel[...])
    mixer.fgate_proj.bias[...] = jnp.asarray(bias, jnp.float32)


def test_registered():
    assert MIXERS.get("fox") is ForgettingAttention


def test_full_gate_matches_float64_reference_with_gqa_and_segments():
    mixer = _mixer()
    x, positions = _inputs(1)
    y, cache = mh.apply_mixer(mixer, x, jnp.asarray(SEGMENTS), positions)
    assert cache is None
    np.testing.assert_allclose(y, _reference(mixer, x, SEGMENTS), **F32)


@pytest.mark.parametrize("rope", [False, True])
def test_gate_none_equals_baseline_attention(rope):
    """FoX with all gates at 1 is softmax attention. The baseline always applies RoPE; at position 0 RoPE is
    the identity."""
    fox = _mixer(("gate", "none"), ("rope", rope))
    attention = Attention(CFG, rngs=nnx.Rngs(1))
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        getattr(attention, name).kernel[...] = getattr(fox, name).kernel[...]
    x, positions = _inputs(2)
    attention_positions = positions if rope else jnp.zeros_like(positions)
    segments = jnp.asarray(SEGMENTS)
    expected, _ = mh.apply_mixer(attention, x, segments, attention_positions)
    np.testing.assert_allclose(mh.apply_mixer(fox, x, segments, positions)[0], expected, **F32)


def test_extreme_gate_preactivations_give_exact_finite_log_gates():
    mixer = _mixer()
    _set_gate(mixer, [1e4, -1e4, 1e4, -1e4])
    x, _ = _inputs(3)
    log_f = mixer.log_forget_gate(x)
    assert log_f.dtype == jnp.float32 and log_f.shape == (B, T, CFG.num_heads)
    # log σ(1e4) rounds to exactly 0 and log σ(−1e4) is −1e4: the log of a float32 sigmoid would give −inf.
    np.testing.assert_array_equal(log_f, jnp.broadcast_to(jnp.asarray([0.0, -1e4, 0.0, -1e4]), log_f.shape))
    gate = jnp.exp(log_f)
    assert bool(jnp.all((gate >= 0) & (gate <= 1)))
    # Pre-activations in [−15, 15] keep f strictly inside (0, 1) in float32 (1 − σ(15) ≈ 3e-7 > 2⁻²⁴).
    _set_gate(mixer, jax.random.uniform(jax.random.key(4), (CFG.num_heads,), minval=-15.0, maxval=15.0))
    moderate = jnp.exp(mixer.log_forget_gate(x))
    assert bool(jnp.all((moderate > 0) & (moderate < 1)))


def test_strong_gates_attend_to_the_current_token_only_with_finite_gradients():
    """log f = −1e4 makes every earlier key's weight underflow to exactly 0: y_t = o_proj(v_t)."""
    mixer = _mixer()
    _set_gate(mixer, [-1e4] * CFG.num_heads)
    x, positions = _inputs(5)
    y, _ = mh.apply_mixer(mixer, x, None, positions)
    v = mixer.v_proj(x).reshape(B, T, CFG.num_kv_heads, 1, -1)
    v = jnp.broadcast_to(v, (*v.shape[:3], CFG.num_heads // CFG.num_kv_heads, v.shape[-1]))
    np.testing.assert_allclose(y, mixer.o_proj(v.reshape(B, T, -1)), **F32)

    def loss(mixer, x):
        return jnp.sum(jnp.sin(mixer(x, segment_ids=None, positions=positions)[0]))

    grads = nnx.jit(nnx.grad(loss, argnums=(0, 1)))(mixer, x)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))


def test_gate_of_one_equals_gate_none():
    """log σ(1e4) = 0 exactly, so a saturated full gate reduces to plain causal attention."""
    gated, plain = _mixer(), _mixer(("gate", "none"))
    _set_gate(gated, [1e4] * CFG.num_heads)
    x, positions = _inputs(6)
    np.testing.assert_allclose(
        mh.apply_mixer(gated, x, None, positions)[0], mh.apply_mixer(plain, x, None, positions)[0], **F32
    )


def test_bias_only_gate_has_no_data_dependence_and_full_gate_has():
    x, _ = _inputs(7)
    other, _ = _inputs(8)
    bias_only, full = _mixer(("gate", "bias_only")), _mixer()
    jac = jax.jacrev(lambda x: bias_only.log_forget_gate(x))(x)
    assert float(jnp.abs(jac).max()) == 0.0
    np.testing.assert_array_equal(bias_only.log_forget_gate(x), bias_only.log_forget_gate(other))
    assert float(jnp.abs(jax.jacrev(lambda x: full.log_forget_gate(x))(x)).max()) > 0.0
    # The bias is a learned parameter: it gets a gradient through the mixer.
    positions = _inputs()[1]
    grads = nnx.grad(lambda m: jnp.sum(m(x, segment_ids=None, positions=positions)[0] ** 2))(bias_only)
    assert float(jnp.abs(grads.fgate_bias[...]).max()) > 0.0


def test_fixed_gate_follows_the_decay_schedule_without_parameters():
    """Invariant 6: −1/log f_h = τ_h, log-spaced over [decay_time_min, decay_time_max]; bias_only starts there."""
    options = (("decay_time_min", 3.0), ("decay_time_max", 300.0))
    fixed, bias_only = _mixer(("gate", "fixed"), *options), _mixer(("gate", "bias_only"), *options)
    x, _ = _inputs(9)
    log_f = fixed.log_forget_gate(x)
    np.testing.assert_allclose(-1.0 / log_f[0, 0], np.geomspace(3.0, 300.0, CFG.num_heads), rtol=1e-5)
    np.testing.assert_array_equal(log_f, bias_only.log_forget_gate(x))
    count = lambda m: sum(p.size for p in jax.tree.leaves(nnx.state(m, nnx.Param)))  # noqa: E731
    assert count(fixed) == count(_mixer(("gate", "none"))) == count(bias_only) - CFG.num_heads


def test_token_shift_function_mixes_previous_token_and_resets_at_segment_starts():
    h = jax.random.normal(jax.random.key(10), (B, T, 2, 3))
    alpha = jax.random.uniform(jax.random.key(11), (B, T, 2))
    out = np.asarray(token_shift(h, alpha, segment_ids=jnp.asarray(SEGMENTS)))
    h, a = np.asarray(h, np.float64), np.asarray(alpha, np.float64)[..., None]
    before = np.concatenate([np.zeros_like(h[:, :1]), h[:, :-1]], axis=1)
    starts = np.concatenate([np.ones((B, 1), bool), SEGMENTS[:, 1:] != SEGMENTS[:, :-1]], axis=1)
    before[starts] = 0.0
    np.testing.assert_allclose(out, a * before + (1 - a) * h, **F32)
    previous = jax.random.normal(jax.random.key(12), (B, 2, 3))
    carried = token_shift(jnp.asarray(h[:, :1], jnp.float32), jnp.asarray(a[:, :1, :, 0], jnp.float32),
                          previous=previous)
    np.testing.assert_allclose(carried[:, 0], a[:, 0] * np.asarray(previous) + (1 - a[:, 0]) * h[:, 0], **F32)


@pytest.mark.parametrize(
    "gate_options",
    # The full gate runs on the reference op here: the blocked xla/pallas backward turns dΛ into d log f
    # with a reverse cumsum over the whole row, which leaves ~1e-9 of rounding across segment starts
    # (reported to the kernel's owner); this test isolates the mixer's own code, the shift included.
    [(("gate", "none"),), (("implementation", "reference"),)],
    ids=["gate-none", "gate-full-reference-op"],
)
def test_token_shift_never_crosses_a_segment_boundary(gate_options):
    """With token_shift on, no output depends on an input of another segment (exact zero Jacobian)."""
    mixer = _mixer(("token_shift", True), *gate_options)
    x, positions = _inputs(13)
    segments = jnp.asarray(SEGMENTS)
    graphdef, state = nnx.split(mixer)

    def forward(x):
        return nnx.merge(graphdef, state)(x, segment_ids=segments, positions=positions)[0]

    jac = jax.jit(jax.jacrev(forward))(x)  # [B, T, D, B, T, D]
    influence = np.asarray(jnp.abs(jnp.einsum("bidbje->bij", jac)))  # same row, summed |.| over features
    other_segment = SEGMENTS[:, :, None] != SEGMENTS[:, None, :]
    assert influence[other_segment].max() == 0.0


def test_decode_suffix_sums_match_float64_under_strong_gates():
    """The decode bias is a suffix sum of cached log-gates: accurate where Λ_p − Λ_j of a float32 prefix
    sum is not (docs/numerics.md rule 3: |Λ| ≈ 4e4 here, whose float32 spacing is 4e-3)."""
    length, num_new, h, d = 4096, 32, 2, 16
    keys = jax.random.split(jax.random.key(14), 4)
    q = 2.0 * jax.random.normal(keys[0], (1, num_new, h, d))
    k, v = jax.random.normal(keys[1], (1, length, 1, d)), jax.random.normal(keys[2], (1, length, 1, d))
    log_f = jax.random.uniform(keys[3], (1, length, h), minval=-20.0, maxval=0.0)
    index = length - num_new
    out = cached_forgetting_attention(q, k, v, log_f, jnp.asarray(index, jnp.int32))
    q64, k64, v64, a64 = (np.asarray(t, np.float64) for t in (q, k, v, log_f))
    expected = np.zeros(out.shape)
    for i in range(num_new):
        p = index + i
        tail = np.concatenate([np.cumsum(a64[0, 1 : p + 1][::-1], axis=0)[::-1], np.zeros((1, h))])  # Σ_{j<l≤p}
        s = np.einsum("hd,jd->hj", q64[0, i], k64[0, : p + 1, 0]) / np.sqrt(d) + tail.T
        w = np.exp(s - s.max(-1, keepdims=True))
        expected[0, i] = (w / w.sum(-1, keepdims=True)) @ v64[0, : p + 1, 0]
    np.testing.assert_allclose(out, expected, **F32)


def test_pro_decode_in_chunks_equals_forward_under_strong_gates():
    mixer = _mixer(("pro", True), ("rope", True))
    mixer.fgate_proj.bias[...] = jnp.asarray([-4.0, -1.0, 2.0, 6.0])
    x, positions = _inputs(15, length=24)
    expected, _ = mh.apply_mixer(mixer, x, None, positions)
    cache, outputs, start = mixer.init_cache(B, 32, jnp.float32), [], 0
    for size in (7, 1, 1, 9, 1, 5):
        y, cache = mh.apply_mixer(mixer, x[:, start : start + size], None, positions[:, start : start + size], cache)
        outputs.append(y)
        start += size
    assert int(cache["index"]) == 24
    np.testing.assert_allclose(jnp.concatenate(outputs, axis=1), expected, **F32)


def test_pro_turns_on_all_flags_and_single_flags_override():
    pro = _mixer(("pro", True))
    h, hkv, dh, d = CFG.num_heads, CFG.num_kv_heads, CFG.resolved_head_dim, CFG.d_model
    assert pro.q_norm.scale.shape == pro.out_norm.scale.shape == (h, dh) and pro.k_norm.scale.shape == (hkv, dh)
    assert pro.k_shift.kernel.shape == pro.v_shift.kernel.shape == (d, hkv)
    assert pro.out_gate.kernel.shape == (d, h * dh)
    partial = _mixer(("pro", True), ("qk_norm", False), ("output_gate", False))
    assert partial.q_norm is None and partial.out_gate is None and partial.out_norm is not None
    plain = _mixer(("output_norm", True))
    assert plain.out_norm is not None and plain.k_shift is None and plain.q_norm is None


def test_pro_mlp_dim_follows_the_spec_formula():
    # 256·ceil((2/3)·ratio·d/256): FoX's 125M model (d=768) has 1792 with the Pro ratio, 2048 with Llama's 4.
    assert pro_mlp_dim(768) == 1792 and pro_mlp_dim(768, hidden_ratio=4) == 2048
    assert pro_mlp_dim(64, multiple_of=8) == 152 and pro_mlp_dim(64, hidden_ratio=4.0, multiple_of=8) == 176
    assert pro_mlp_dim(96, hidden_ratio=3, multiple_of=64) == 192  # exactly 3 units: no ceiling bump
    for kwargs, match in [({"hidden_ratio": 0}, "hidden_ratio"), ({"hidden_ratio": float("nan")}, "hidden_ratio"),
                          ({"multiple_of": 0}, "multiple_of"), ({"hidden_ratio": True}, "hidden_ratio")]:
        with pytest.raises(ValueError, match=match):
            pro_mlp_dim(64, **kwargs)
    with pytest.raises(ValueError, match="d_model"):
        pro_mlp_dim(0)


def test_fox_pro_preset_uses_the_pro_ratio_and_matches_the_plain_block_in_size():
    import dataclasses

    from icml26zoo.configs import load_preset
    from icml26zoo.models import build_model, count_params

    pro, plain = load_preset("fox_pro_tiny").model, load_preset("fox_tiny").model
    assert dict(pro.mixer_options) == {"pro": True} and pro.mlp_dim == 152
    plain = dataclasses.replace(plain, mlp_dim=pro_mlp_dim(plain.d_model, hidden_ratio=4, multiple_of=8))

    def count(cfg):
        return count_params(nnx.eval_shape(lambda: build_model(cfg, rngs=nnx.Rngs(0))))

    # The smaller MLP pays for the Pro projections (within 3%); with ratio 4 Pro would be ~8% larger.
    assert abs(count(pro) / count(plain) - 1) < 0.03
    assert count(dataclasses.replace(pro, mlp_dim=plain.mlp_dim)) / count(plain) > 1.05


def test_implementation_option_selects_the_op_path():
    mh.assert_reference_matches_default(_mixer, *_inputs(16))


@pytest.mark.parametrize(
    "options, match",
    [
        ((("gate", "sometimes"),), "'gate'"),
        ((("rope", 1),), "'rope'"),
        ((("pro", "yes"),), "'pro'"),
        ((("token_shift", None),), "'token_shift'"),
        ((("implementation", "cuda"),), "'implementation'"),
        ((("decay_time_min", -1.0),), "'decay_time_min'"),
        ((("decay_time_min", 10.0), ("decay_time_max", 5.0)), "'decay_time_min'.*'decay_time_max'"),
        ((("gates", "full"),), "unknown fox mixer option 'gates'"),
    ],
)
def test_bad_options_raise_naming_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        _mixer(*options)


def test_bfloat16_forward_is_finite_with_strong_gates():
    mixer = _mixer(("pro", True), compute_dtype="bfloat16")
    _set_gate(mixer, [-1e4, -5.0, 0.0, 1e4])
    x, positions = _inputs(17, dtype=jnp.bfloat16)
    y, _ = mh.apply_mixer(mixer, x, jnp.asarray(SEGMENTS), positions)
    assert y.dtype == jnp.bfloat16 and y.shape == (B, T, CFG.d_model)
    assert bool(jnp.all(jnp.isfinite(y.astype(jnp.float32))))
    assert mixer.log_forget_gate(x).dtype == jnp.float32
