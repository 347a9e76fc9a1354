"""The FiX mixer (a reconstruction, docs/papers.md): a float64 reference, reductions (unit value
gates = RMSNorm of softmax attention; scalar gate on = FoX with its output norm; uniform channel gates vs
FoX, invariant 8), gate ranges and bounds, decode = forward for both caches, pruning below the length,
options. The model-level checks run in tests/zoo/test_conformance.py for every CONFORMANCE_OPTIONS entry.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import mixer_helpers as mh
import numpy as np
import pytest
from flax import nnx
from mixer_helpers import F32, SEGMENTS, B, T

from icml26zoo.kernels.forgetting_attention import forgetting_attention
from icml26zoo.kernels.value_forget_attention import value_forget_attention
from icml26zoo.mixers.fix import FineGrainedForgettingAttention
from icml26zoo.mixers.fox import ForgettingAttention
from icml26zoo.registry import MIXERS

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = mh.small_config(mixer="fix")
H, HKV, DH = CFG.num_heads, CFG.num_kv_heads, CFG.resolved_head_dim
_mixer = functools.partial(mh.build_mixer, FineGrainedForgettingAttention, CFG)
_inputs = functools.partial(mh.random_inputs, CFG.d_model)


def _w(linear) -> np.ndarray:
    return np.asarray(linear.kernel[...], np.float64)


def _b(linear) -> np.ndarray:
    return np.asarray(linear.bias[...], np.float64)


def _log_sigmoid(z):
    return -np.logaddexp(0.0, -z)


def _reference_gates(mixer, x):
    """float64 log value gates [B, T, H, Dh] and scalar log gates [B, T, H] (or None) from the parameters."""
    opts = mixer.options
    z = (x @ _w(mixer.vgate_down) @ _w(mixer.vgate_up) + _b(mixer.vgate_up)).reshape(*x.shape[:2], H, DH)
    if opts.vgate == "low_rank":
        log_v = _log_sigmoid(z)
    else:
        log_v = -np.exp(np.asarray(mixer.vgate_a_log[...], np.float64))[:, None] * np.logaddexp(0.0, z)
    if opts.vgate_min is not None:
        log_v = -opts.vgate_min * np.expm1(log_v / -opts.vgate_min)
    log_f = _log_sigmoid(x @ _w(mixer.fgate_proj) + _b(mixer.fgate_proj)) if opts.scalar_gate else None
    return log_v, log_f


def _reference(mixer, x, segment_ids) -> np.ndarray:
    """The FiX mixer (no RoPE) materialized in float64 NumPy: direct pairwise form with GQA and segments."""
    x = np.asarray(x, np.float64)
    batch, length = x.shape[:2]
    q = (x @ _w(mixer.q_proj)).reshape(batch, length, H, DH)
    k = (x @ _w(mixer.k_proj)).reshape(batch, length, HKV, DH)
    v = (x @ _w(mixer.v_proj)).reshape(batch, length, HKV, DH)
    log_v, log_f = _reference_gates(mixer, x)
    cum_v = np.cumsum(log_v, axis=1)  # Λ in float64, where differencing is harmless
    cum_f = np.zeros((batch, length, H)) if log_f is None else np.cumsum(log_f, axis=1)
    probs = mh.decayed_softmax_reference(q, k, cum_f, segment_ids)
    u = np.zeros((batch, length, H, DH))
    for b in range(batch):
        mask = mh.segment_causal_mask(segment_ids[b])
        for head in range(H):
            decay = np.exp(np.where(mask[..., None], cum_v[b, :, None, head] - cum_v[b, None, :, head], -np.inf))
            u[b, :, head] = np.einsum("ij,ijc,jc->ic", probs[b, head], decay, v[b, :, head // (H // HKV)])
    o = u / np.sqrt(np.mean(u**2, axis=-1, keepdims=True) + 1e-6) * np.asarray(mixer.out_norm.scale[...])
    o = o.reshape(batch, length, H * DH)
    if mixer.out_gate is not None:
        o = o / (1.0 + np.exp(-(x @ _w(mixer.out_gate))))
    return o @ _w(mixer.o_proj)


def _set_value_gate(mixer, pre_activation) -> None:
    """Data-independent value gates: zero up-projection, the given pre-activations [H·Dh] (or scalar) as bias."""
    mixer.vgate_up.kernel[...] = jnp.zeros_like(mixer.vgate_up.kernel[...])
    mixer.vgate_up.bias[...] = jnp.broadcast_to(jnp.asarray(pre_activation, jnp.float32), (H * DH,))


def _copy(source, target, *names) -> None:
    for name in names:
        src, dst = getattr(source, name), getattr(target, name)
        for leaf in ("kernel", "bias", "scale"):
            if getattr(src, leaf, None) is not None:
                getattr(dst, leaf)[...] = getattr(src, leaf)[...]


def test_registered():
    assert MIXERS.get("fix") is FineGrainedForgettingAttention


@pytest.mark.parametrize(
    "options",
    [(), (("vgate", "mamba"), ("vgate_min", -0.5), ("scalar_gate", False)), (("output_gate", False),)],
    ids=["default", "mamba-bounded-no-scalar-gate", "no-output-gate"],
)
def test_matches_float64_reference_with_gqa_and_segments(options):
    mixer = _mixer(*options)
    # Stronger, data-dependent gates than at init, so that the decays and the bound matter.
    mixer.vgate_up.kernel[...] = 30.0 * mixer.vgate_up.kernel[...]
    mixer.vgate_up.bias[...] = mixer.vgate_up.bias[...] - 3.0
    x, positions = _inputs(1)
    y, cache = mh.apply_mixer(mixer, x, jnp.asarray(SEGMENTS), positions)
    assert cache is None
    np.testing.assert_allclose(y, _reference(mixer, x, SEGMENTS), **F32)


@pytest.mark.parametrize("vgate, saturating_bias", [("low_rank", 1e4), ("mamba", -1e4)])
def test_unit_value_gates_without_scalar_gate_are_rmsnorm_of_softmax_attention(vgate, saturating_bias):
    """Unit gates give RMSNorm of softmax attention: log f ≡ 0 exactly (log σ(1e4) = 0, softplus(−1e4) = 0),
    no scalar gate."""
    mixer = _mixer(("vgate", vgate), ("scalar_gate", False), ("rope", True))
    _set_value_gate(mixer, saturating_bias)
    mixer.out_norm.scale[...] = jax.random.uniform(jax.random.key(2), (H, DH), minval=0.5, maxval=1.5)
    x, positions = _inputs(3)
    np.testing.assert_array_equal(mixer.log_value_gate(x), 0.0)
    q, k, v = mixer._project_qkv(x, positions)
    attention = jax.nn.dot_product_attention(q, k, v, is_causal=True)  # GQA: query head h reads h // 2
    normed = attention * jax.lax.rsqrt(jnp.mean(attention**2, axis=-1, keepdims=True) + 1e-6)
    gated = (normed * mixer.out_norm.scale[...]).reshape(B, T, H * DH) * jax.nn.sigmoid(mixer.out_gate(x))
    np.testing.assert_allclose(mh.apply_mixer(mixer, x, None, positions)[0], mixer.o_proj(gated), **F32)


def _fox_with_output_norm(fix, **fox_options) -> ForgettingAttention:
    """A FoX mixer (full gate, output norm and gate) holding the FiX mixer's shared weights."""
    cfg = dataclasses.replace(
        CFG, mixer="fox", mixer_options=(("output_norm", True), ("output_gate", True), *fox_options.items())
    )
    fox = ForgettingAttention(cfg, rngs=nnx.Rngs(9))
    _copy(fix, fox, "q_proj", "k_proj", "v_proj", "o_proj", "out_gate", "out_norm")
    if fix.fgate_proj is not None:
        _copy(fix, fox, "fgate_proj")
    return fox


def test_scalar_gate_with_unit_value_gates_equals_fox_with_output_norm():
    """FiX's scalar gate is FoX's gate: with value gates ≡ 1 the mixer is FoX-Pro's norm + gate output."""
    fix = _mixer()
    _set_value_gate(fix, 1e4)
    fix.fgate_proj.bias[...] = jnp.asarray([-3.0, -1.0, 0.0, 2.0])
    fox = _fox_with_output_norm(fix)
    x, positions = _inputs(4)
    segments = jnp.asarray(SEGMENTS)
    np.testing.assert_allclose(
        mh.apply_mixer(fix, x, segments, positions)[0], mh.apply_mixer(fox, x, segments, positions)[0], **F32
    )


def test_uniform_channel_gates_differ_from_fox_in_the_op_but_not_after_the_norm():
    """FiX is not FoX before the norm (docs/numerics.md), for the op: with one gate f per head for all channels, FiX's
    u_i = Σ_j P_ij f^{i−j} v_j is FoX's output times Z_i = Σ_j P_ij f^{i−j} < 1 (FoX renormalizes over the
    decayed weights), so u ≠ o. Z_i is one positive scalar per row and head, so the mandatory RMSNorm
    removes it: the mixers agree up to the norm's ε (made negligible here by large values)."""
    log_f = jnp.log(jnp.asarray([0.3, 0.6, 0.8, 0.95], jnp.float32))
    fix = _mixer(("scalar_gate", False))
    _set_value_gate(fix, jnp.repeat(log_f - jnp.log1p(-jnp.exp(log_f)), DH))  # σ(b) = f per head
    fix.v_proj.kernel[...] = 100.0 * fix.v_proj.kernel[...]
    fox = _fox_with_output_norm(fix, gate="bias_only")
    fox.fgate_bias[...] = log_f - jnp.log1p(-jnp.exp(log_f))
    x, positions = _inputs(5)
    np.testing.assert_allclose(fix.log_value_gate(x), jnp.broadcast_to(jnp.repeat(log_f, DH).reshape(H, DH),
                                                                        (B, T, H, DH)), **F32)

    q, k, v = fix._project_qkv(x, positions)
    log_gates = jnp.broadcast_to(log_f, (B, T, H))
    u = jax.jit(value_forget_attention)(q, k, v, jnp.broadcast_to(log_gates[..., None], (B, T, H, DH)))
    o = jax.jit(forgetting_attention)(q, k, v, log_gates)
    p = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((T, T), bool)), jnp.einsum(
        "bihd,bjhd->bhij", q, jnp.repeat(k, H // HKV, axis=2)) / np.sqrt(DH), -jnp.inf), axis=-1)
    lag = jnp.maximum(jnp.arange(T)[:, None] - jnp.arange(T)[None, :], 0).astype(jnp.float32)
    z = jnp.sum(p * jnp.exp(lag * log_f[:, None, None]), axis=-1)  # [B, H, T]: Z_i = Σ_j P_ij f^{i−j}
    np.testing.assert_allclose(u, o * jnp.moveaxis(z, 1, 2)[..., None], **F32)
    assert float(jnp.max(jnp.abs(u - o))) > 0.1 * float(jnp.max(jnp.abs(o)))

    y_fix, y_fox = mh.apply_mixer(fix, x, None, positions)[0], mh.apply_mixer(fox, x, None, positions)[0]
    np.testing.assert_allclose(y_fix, y_fox, **F32)
    # FoX without its (Pro) output norm keeps the renormalized scale: a different mixer.
    plain_fox = ForgettingAttention(
        dataclasses.replace(CFG, mixer="fox", mixer_options=(("gate", "bias_only"),)), rngs=nnx.Rngs(9)
    )
    _copy(fix, plain_fox, "q_proj", "k_proj", "v_proj", "o_proj")
    plain_fox.fgate_bias[...] = fox.fgate_bias[...]
    assert float(jnp.max(jnp.abs(mh.apply_mixer(plain_fox, x, None, positions)[0] - y_fix))) > 1e-2


@pytest.mark.parametrize("vgate", ["low_rank", "mamba"])
def test_initial_gates_span_the_long_decay_range(vgate):
    """At x = 0 the value gates are their biases: decay times from about 10 to about 1000 tokens."""
    mixer = _mixer(("vgate", vgate))
    log_f = np.asarray(mixer.log_value_gate(jnp.zeros((1, 1, CFG.d_model))))[0, 0]  # [H, Dh]
    if vgate == "low_rank":
        np.testing.assert_allclose(np.exp(log_f[:, [0, -1]]), np.broadcast_to([0.9, 0.999], (H, 2)), rtol=1e-6)
    else:
        np.testing.assert_allclose(-log_f[:, [0, -1]], np.broadcast_to([1e-3, 1e-1], (H, 2)), rtol=1e-5)
    assert np.all(np.diff(log_f, axis=-1) != 0) and np.all(log_f < 0)


@pytest.mark.parametrize("vgate", ["low_rank", "mamba"])
def test_gates_are_nonpositive_bounded_and_finite_under_extreme_inputs(vgate):
    sign = 1.0 if vgate == "low_rank" else -1.0  # the pre-activation that means "forget"
    bounded, free = _mixer(("vgate", vgate), ("vgate_min", -5.0)), _mixer(("vgate", vgate))
    for mixer in (bounded, free):
        extremes = jnp.linspace(-sign * 1e4, sign * 1e4, H * DH // 2)
        _set_value_gate(mixer, jnp.concatenate([extremes, jnp.linspace(-6.0, 6.0, H * DH // 2)]))
    x, positions = _inputs(6)
    log_b, log_u = bounded.log_value_gate(x), free.log_value_gate(x)
    assert log_b.dtype == log_u.dtype == jnp.float32 and log_b.shape == (B, T, H, DH)
    assert float(log_u.max()) <= 0.0 and float(log_u.min()) <= -1e3 and bool(jnp.all(jnp.isfinite(log_u)))
    assert float(log_b.max()) <= 0.0 and float(log_b.min()) >= -5.0 and float(log_b.min()) == -5.0
    # Slope 1 at 0: weak decays pass almost unchanged through the bound (|Δ| ≤ g²/(2·5)).
    weak = (log_u > -0.1) & (log_u < 0)
    assert bool(jnp.any(weak))
    np.testing.assert_allclose(log_b[weak], log_u[weak], atol=1e-3, rtol=0)

    def loss(mixer, x):
        return jnp.sum(jnp.sin(mixer(x, segment_ids=None, positions=positions)[0]))

    grads = nnx.jit(nnx.grad(loss, argnums=(0, 1)))(bounded, x)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))


def _decode_in_chunks(mixer, x, positions, chunks, max_len=32):
    y, cache = mh.decode_in_chunks(mixer, x, positions, mixer.init_cache(B, max_len, x.dtype), chunks)
    assert sum(chunks) == x.shape[1] and bool(jnp.all(cache["length"] == sum(chunks)))
    return y, cache


@pytest.mark.parametrize("cache", ["decayed", "pruned"])
def test_decode_in_chunks_equals_forward_under_strong_gates(cache):
    """Chunked prefill and single steps (T' = 8, 1, 1, 8, 1, 5) against the full forward, with RoPE and the
    scalar gate. Value gates near log f ≈ −3: the pruned cache drops tokens after about 5 steps.

    A pruned token leaves the softmax denominator too, which rescales u_i by a positive scalar per row and
    head; the output RMSNorm removes that only up to its ε (the RMSNorm-ε pitfall): with unit-scale values
    and strongly decayed u the pruned outputs move by ~1.5e-4. Large values (×100) make ε negligible, so
    the test isolates the dropped numerator terms (each < prune_eps)."""
    mixer = _mixer(("cache", cache), ("rope", True))
    mixer.vgate_up.kernel[...] = 10.0 * mixer.vgate_up.kernel[...]
    mixer.vgate_up.bias[...] = jnp.full((H * DH,), -3.0)
    mixer.v_proj.kernel[...] = 100.0 * mixer.v_proj.kernel[...]
    x, positions = _inputs(8, length=24)
    expected, _ = mh.apply_mixer(mixer, x, None, positions)
    decoded, state = _decode_in_chunks(mixer, x, positions, (8, 1, 1, 8, 1, 5))
    np.testing.assert_allclose(decoded, expected, **F32)
    assert state["v"].dtype == jnp.float32 and int(state["evicted"].max()) == 0
    kept = int(state["valid"].sum(axis=1).max())
    assert kept < 24 if cache == "pruned" else kept == 24


def test_pruned_cache_smaller_than_the_sequence_matches_when_gates_forget_fast():
    """log f ≈ −8 per step in every channel: a token's values fall below ε = 1e-6 after two steps and its
    slot is reused, so 6 slots serve 24 tokens without evicting anything still remembered; the 10-token
    prefill is split by the op into pieces of at most 6. Values ×100 keep
    the output norm's ε negligible (see the test above)."""
    mixer = _mixer(("cache", "pruned"), ("cache_capacity", 6))
    _set_value_gate(mixer, -8.0)
    mixer.v_proj.kernel[...] = 100.0 * mixer.v_proj.kernel[...]
    x, positions = _inputs(9, length=24)
    expected, _ = mh.apply_mixer(mixer, x, None, positions)
    decoded, state = _decode_in_chunks(mixer, x, positions, (10, 1, 2, 3, 1, 1, 3, 2, 1))
    assert state["k"].shape[1] == 6 and int(state["evicted"].max()) == 0
    np.testing.assert_allclose(decoded, expected, **F32)


def test_decode_in_bfloat16_keeps_float32_decayed_values():
    mixer = _mixer(compute_dtype="bfloat16")
    x, positions = _inputs(10, length=12, dtype=jnp.bfloat16)
    expected, _ = mh.apply_mixer(mixer, x, None, positions)
    decoded, state = _decode_in_chunks(mixer, x, positions, (5, 1, 6))
    assert decoded.dtype == jnp.bfloat16 and state["v"].dtype == jnp.float32 and state["k"].dtype == jnp.bfloat16
    np.testing.assert_allclose(decoded.astype(jnp.float32), expected.astype(jnp.float32), atol=5e-2, rtol=5e-2)


def test_implementation_option_selects_the_op_path():
    mh.assert_reference_matches_default(_mixer, *_inputs(7))


def test_parameters_follow_the_options():
    default, plain = _mixer(), _mixer(("vgate", "mamba"), ("scalar_gate", False), ("output_gate", False))
    assert default.vgate_down.kernel.shape == (CFG.d_model, 16) and default.vgate_up.kernel.shape == (16, H * DH)
    assert default.fgate_proj.kernel.shape == (CFG.d_model, H) and default.out_gate.kernel.shape == (32, H * DH)
    assert default.vgate_a_log is None and default.out_norm.scale.shape == (H, DH)
    assert plain.fgate_proj is None and plain.out_gate is None and plain.vgate_a_log.shape == (H,)
    assert _mixer(("vgate_rank", 4)).vgate_down.kernel.shape == (CFG.d_model, 4)


@pytest.mark.parametrize(
    "options, match",
    [
        ((("vgate", "full"),), "'vgate'"),
        ((("vgate_rank", 0),), "fix mixer option 'vgate_rank' must be an integer >= 1, got 0"),
        ((("vgate_rank", 2.0),), "'vgate_rank'"),
        ((("vgate_min", 1.0),), r"'vgate_min' must be a number in \(-inf, 0\), got 1.0"),
        ((("vgate_min", float("-inf")),), "'vgate_min'"),
        ((("scalar_gate", 1),), "'scalar_gate'"),
        ((("rope", "no"),), "'rope'"),
        ((("output_gate", None),), "'output_gate'"),
        ((("implementation", "cuda"),), "'implementation'"),
        ((("cache", "paged"),), "'cache'"),
        ((("prune_eps", 0.0),), r"'prune_eps' must be a number in \(0, 1\), got 0.0"),
        ((("cache", "pruned"), ("cache_capacity", 0)), "'cache_capacity' must be an integer >= 1, got 0"),
        ((("cache_capacity", 8),), "'cache_capacity'.*cache='pruned'"),
        ((("cache", "decayed"), ("prune_eps", 1e-3)), "'prune_eps'.*cache='pruned'"),
        ((("gate", "full"),), "unknown fix mixer option 'gate'"),
    ],
)
def test_bad_options_raise_naming_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        _mixer(*options)
