"""The FP8-logit option on every softmax-family mixer (attention, goat, fox, fix, circulation; issue 18 item 3).

For each mixer, ONE compiled program runs the fp32 mixer, the "spectral" FP8 mixer and a "static" FP8 mixer
with a naive amax scale calibrated on x (same parameters) on one batch of packed rows: B rows of x and B rows of
the planted large-logit transient 4x (q·k logits 16x), plus the shared overflow counter
`fp8_scaling.logit_stats` on the same q, k, per half.

The FP8 tolerance. E4M3 keeps 3 mantissa bits, so rounding s·S moves it by at most half a step: 2⁻⁴|s·S| for
normal numbers and 2⁻¹⁰ for subnormals (spacing 2⁻⁹). After dividing by s every logit moves by at most
ε = 2⁻⁴ max|S| + 2⁻¹⁰ / min_h s_h (the gate sums and biases are added in float32, unchanged). A softmax row
whose logits each move by at most ε changes every weight by a factor within e^{±2ε}, so Σ_j |ΔP_ij| ≤ e^{2ε} − 1
and a convex combination of values (per channel, also after FiX's decays D ≤ 1) moves by at most
(e^{2ε} − 1)·max|v|. Attention, GOAT, FoX and circulation (β = 1) then apply o_proj alone:
|Δy| ≤ (e^{2ε} − 1)·max|v|·max_c Σ_i |W_o,ic|.
FiX's mandatory RMSNorm is not Lipschitz near 0, so FiX is checked before it (u) and its y only loosely.
A float32 allowance of 1e-5 covers the fp32 path's different summation order (jax.nn / the fused op's XLA path).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.kernels.helpers import attention_mask
from icml26zoo.kernels.value_forget_attention import value_forget_attention
from icml26zoo.layers import fp8_scaling as f8
from icml26zoo.layers.projections import project_heads
from icml26zoo.mixers.attention import Attention
from icml26zoo.mixers.circulation import CirculationAttention
from icml26zoo.mixers.fix import FineGrainedForgettingAttention
from icml26zoo.mixers.fox import ForgettingAttention
from icml26zoo.mixers.goat import GOATAttention
from icml26zoo.models import ModelConfig

pytestmark = pytest.mark.usefixtures("fast_compile")

D, H, HKV, DH, T, B = 16, 4, 2, 8, 16, 2
CFG = ModelConfig(vocab_size=64, d_model=D, num_layers=1, num_heads=H, num_kv_heads=HKV, head_dim=DH, max_seq_len=T)
HALF = T // 2
# Two packed segments per row; positions restart at each.
SEGMENTS = jnp.broadcast_to(jnp.repeat(jnp.arange(1, 3, dtype=jnp.int32), HALF), (B, T))
POSITIONS = jnp.broadcast_to(jnp.tile(jnp.arange(HALF, dtype=jnp.int32), 2), (B, T))
BIG = 4.0  # the planted transient: inputs 4x, q·k logits 16x the calibration's



def _circulation_qkv(mixer, x, positions):
    """Circulation's logits (c₁ q·k + c₂ k·q)/√Dh as one q̃·k̃ (its single-kernel form, K grouped to H heads)."""
    heads, kv_heads, head_dim = mixer.num_heads, mixer.num_kv_heads, mixer.head_dim
    q, v = project_heads(x, mixer.q_proj, heads, head_dim), project_heads(x, mixer.v_proj, kv_heads, head_dim)
    k = mixer._group(project_heads(x, mixer.k_proj, kv_heads, head_dim))
    c1, c2 = (1 + mixer.options.alpha) / 2, (1 - mixer.options.alpha) / 2
    return jnp.concatenate([c1 * q, c2 * k], -1), jnp.concatenate([k, q], -1), v, head_dim**-0.5


# name -> (class, options exercising its paths, (mixer, x, positions) -> (q, k, v, logit_scale)).
MIXERS = {
    "attention": (Attention, (("position", "alibi"), ("sink", "plus_one")),
                  lambda m, x, p: (*m._project_qkv(x, p), None)),
    "goat": (GOATAttention, (("pos_rank", 2),), lambda m, x, p: (*m.augmented_qkv(x, p), 1.0)),
    "fox": (ForgettingAttention, (("rope", True), ("token_shift", True)),
            lambda m, x, p: (*m._project_qkv(x, None, p, None)[:3], None)),
    "fix": (FineGrainedForgettingAttention, (), lambda m, x, p: (*m._project_qkv(x, p), None)),
    "circulation": (CirculationAttention, (("alpha", 1.5),), _circulation_qkv),
}


def _build(name, extra=(), seed=0):
    cls, options, _ = MIXERS[name]
    return cls(dataclasses.replace(CFG, mixer_options=(*options, *extra)), rngs=nnx.Rngs(seed))


def _variant(name, exact, extra):
    """The mixer built with `extra` options (abstractly: no second random init) carrying exact's parameters."""
    mixer = nnx.eval_shape(lambda: _build(name, extra))
    nnx.update(mixer, nnx.state(exact))
    return mixer


def _naive_scale(name, exact, x):
    """The delayed (amax) scale, calibrated on the logits of x: right for x, blind to the 4x transient."""
    def amax(x):
        q, k, _, logit_scale = MIXERS[name][2](exact, x, POSITIONS)
        logits = f8.qk_logits(q, k, logit_scale)
        return f8.amax_scale(jnp.where(attention_mask(T, None), logits, 0.0), headroom=0.8)

    return float(jax.jit(amax)(x))


def _fix_cores(exact, spectral, x, positions, segments):
    """FiX's u before the output norm: the FP8 path's and the fp32 op's (reference implementation)."""
    q, k, v = exact._project_qkv(x, positions)
    gates = exact.log_value_gate(x), exact.log_scalar_gate(x)
    fp8 = spectral._attend_fp8(x, q, k, v, *gates, segments)
    fp32 = value_forget_attention(q, k, v, gates[0], log_fgate=gates[1], segment_ids=segments,
                                  implementation="reference")
    return fp8, fp32


@pytest.fixture(scope="module", params=list(MIXERS))
def run(request):
    """Builds one mixer's three variants and runs them in one compiled program on a batch of 2B packed rows:
    the first B rows hold x, the last B the transient 4x (so the spectral scale sees the transient's ρ)."""
    name = request.param
    x = jax.random.normal(jax.random.key(3), (B, T, D))
    exact = _build(name)
    spectral = _variant(name, exact, (("fp8_logits", "spectral"),))
    static = _variant(name, exact, (("fp8_logits", "static"), ("fp8_scale", _naive_scale(name, exact, x))))
    adapter, segments = MIXERS[name][2], jnp.concatenate([SEGMENTS, SEGMENTS])
    positions, mask = jnp.concatenate([POSITIONS, POSITIONS]), attention_mask(T, segments)

    @jax.jit
    def compute(x):
        both = jnp.concatenate([x, BIG * x])
        out = {name: mixer(both, segment_ids=segments, positions=positions)[0]
               for name, mixer in (("exact", exact), ("spectral", spectral), ("static", static))}
        q, k, v, logit_scale = adapter(exact, both, positions)
        for mode, mixer in (("spectral", spectral), ("static", static)):
            scales = mixer.fp8_scales(both, positions) if name == "goat" else mixer.fp8_scales(both)
            out[f"scales_{mode}"] = scales
            for tag, rows in (("x", slice(0, B)), ("big", slice(B, 2 * B))):
                out[f"stats_{mode}_{tag}"] = f8.logit_stats(q[rows], k[rows], mask[rows], scales,
                                                             logit_scale=logit_scale)
        out["max_v"] = jnp.max(jnp.abs(v[:B]))
        if name == "fix":
            out["u_fp8"], out["u_fp32"] = _fix_cores(exact, spectral, both, positions, segments)
        return out

    return name, exact, jax.tree.map(np.asarray, compute(x))


def test_fp8_logits_match_fp32_within_the_e4m3_bound_at_the_spectral_scale(run):
    name, exact, out = run
    stats, scales = out["stats_spectral_x"], out["scales_spectral"]
    eps = 2.0**-4 * float(stats["max_abs_logit"]) + 2.0**-10 / float(scales.min())
    assert int(stats["overflows"]) == 0
    assert 0 < float(stats["max_abs_error"]) <= eps * (1 + 1e-5)  # the cast rounds, within half a step
    spread = math.expm1(2 * eps) * float(out["max_v"])
    got, want = out["spectral"][:B], out["exact"][:B]
    if name == "fix":
        assert float(np.max(np.abs(out["u_fp8"][:B] - out["u_fp32"][:B]))) <= spread + 1e-5
        assert np.max(np.abs(got - want)) <= 0.1 * np.max(np.abs(want))
    else:
        o_cols = float(np.max(np.sum(np.abs(np.asarray(exact.o_proj.kernel[...])), axis=0)))
        assert float(np.max(np.abs(got - want))) <= spread * o_cols + 1e-5
    assert np.any(got != want)  # the FP8 path really ran


def test_a_naive_scale_overflows_on_the_transient_where_the_spectral_scale_does_not(run):
    _, _, out = run
    # The amax scale fits the logits it was calibrated on: no overflow, finite outputs on those rows ...
    assert int(out["stats_static_x"]["overflows"]) == 0
    assert np.all(np.isfinite(out["static"][:B]))
    # ... but the 16x logits of the transient overflow it, and the E4M3 cast makes the mixer's output NaN.
    assert int(out["stats_static_big"]["overflows"]) > 0
    assert np.any(np.isnan(out["static"][B:]))
    # The spectral scale comes from the weights and this call's token norms: no overflow, finite output,
    # and the transient's logits use a fair part of the range (headroom u = 0.8 at most).
    safe = out["stats_spectral_big"]
    assert int(safe["overflows"]) == 0
    assert np.all(np.isfinite(out["spectral"]))
    assert 0.05 < float(safe["utilization"]) <= 0.8 * (1 + 1e-5)


@pytest.mark.parametrize("name", list(MIXERS))
@pytest.mark.parametrize(
    ("option", "value"),
    [("fp8_logits", "e5m2"), ("fp8_scale", 0.0), ("fp8_scale", math.inf), ("fp8_headroom", 1.5)],
)
def test_bad_fp8_option_values_raise_naming_the_field(name, option, value):
    with pytest.raises(ValueError, match=f"{name} mixer option '{option}'"):
        _build(name, ((option, value),))
