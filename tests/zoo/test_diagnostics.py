"""Massive-activation and attention-sink diagnostics (Sun et al., arXiv 2603.05498): capture fidelity, D1/D4
statistics, interventions, and the norm-placement switch."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.diagnostics import (
    attention_sinks,
    capture_forward,
    diagnose,
    implicit_parameter_test,
    sink_removal,
    spike_clamp,
)
from icml26zoo.mixers.base import conformance_options
from icml26zoo.models import ModelConfig, build_model, convert_layer_layout
from icml26zoo.registry import MIXERS

# Tiny models: compile time dominates, and every comparison is within one compile setting.
pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = ModelConfig(
    vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, mlp_dim=64, scan_layers=False
)
SPIKE_TOKEN, SPIKE_ROW, SPIKE_POS, SPIKE_CHANNEL, SPIKE_VALUE = 63, 1, 5, 7, 2000.0
I0 = 4


def _tokens() -> jax.Array:
    # Ordinary tokens avoid SPIKE_TOKEN, which appears exactly once, at (SPIKE_ROW, SPIKE_POS).
    tokens = jax.random.randint(jax.random.key(1), (2, 24), 0, SPIKE_TOKEN)
    return tokens.at[SPIKE_ROW, SPIKE_POS].set(SPIKE_TOKEN)


def _planted(cfg: ModelConfig = CFG) -> nnx.Module:
    """A model whose embedding writes SPIKE_VALUE into SPIKE_CHANNEL of SPIKE_TOKEN (a planted spike)."""
    model = build_model(cfg, rngs=nnx.Rngs(0))
    table = model.embed.embedding[...]
    model.embed.embedding[...] = table.at[SPIKE_TOKEN, SPIKE_CHANNEL].set(SPIKE_VALUE)
    return model


def test_capture_reproduces_logits_and_attention():
    model, tokens = _planted(), _tokens()
    cap = capture_forward(model, tokens)
    # Unrolled model: the captured run calls the same submodules with the same inputs -> bitwise equal.
    np.testing.assert_array_equal(np.asarray(cap["logits"]), np.asarray(model(tokens)))
    # Scanned model: converted to unrolled inside capture; scan vs loop may differ in the last bits only.
    scanned = convert_layer_layout(model, scan_layers=True)
    np.testing.assert_allclose(np.asarray(capture_forward(scanned, tokens)["logits"]),
                               np.asarray(scanned(tokens)), rtol=1e-5, atol=1e-5)
    probs = np.asarray(cap["probs"])
    assert probs.shape == (2, 2, 4, 24, 24)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert np.all(probs[..., np.triu_indices(24, k=1)[0], np.triu_indices(24, k=1)[1]] == 0.0)
    # The recomputed P is the fused kernel's: o_proj(P @ V) equals the mixer's actual output.
    layer = model.layers[0]
    heads = cap["head_out"][0].reshape(2, 24, -1)
    np.testing.assert_allclose(np.asarray(layer.mixer.o_proj(heads)), np.asarray(cap["mixer_out"][0]),
                               rtol=1e-4, atol=1e-5)
    # Increments add up to the stream's change across each block.
    np.testing.assert_allclose(np.asarray(cap["hidden"][1:] - cap["hidden"][:-1]),
                               np.asarray(cap["attn_delta"] + cap["mlp_delta"]), atol=1e-3)


def test_d1_finds_planted_spike_and_its_life_cycle():
    tokens = _tokens()
    result = diagnose(_planted(), tokens, i0=I0)
    d1 = result["massive"]
    # Every stream (embedding output and both block outputs) carries the spike at the planted place.
    assert d1["flagged"][:, 0].all() and d1["flagged"][:, 1:].sum() == 0
    for key, want in (("top_row", SPIKE_ROW), ("top_pos", SPIKE_POS), ("top_channel", SPIKE_CHANNEL),
                      ("top_token", SPIKE_TOKEN)):
        np.testing.assert_array_equal(d1[key][:, 0], want)
    median0 = np.median(np.abs(np.asarray(capture_forward(_planted(), tokens)["hidden"][0])))
    np.testing.assert_allclose(d1["ratio"][0, 0], SPIKE_VALUE / median0, rtol=1e-5)
    assert d1["max_by_channel"][0, SPIKE_CHANNEL] == pytest.approx(SPIKE_VALUE)
    assert d1["max_by_token"][0, SPIKE_ROW].argmax() == SPIKE_POS
    d2 = result["life_cycle"]
    assert d2["entries"] == [(SPIKE_ROW, SPIKE_POS, SPIKE_CHANNEL)]
    np.testing.assert_allclose(d2["value"][0, 0], SPIKE_VALUE)
    np.testing.assert_allclose(np.diff(d2["value"][0]), d2["attn"][0] + d2["mlp"][0], rtol=1e-3, atol=1e-2)
    geo = result["spike_geometry"]
    assert (geo["spike_pos"] == SPIKE_POS)[:, SPIKE_ROW].all()
    # Pre-norm compresses the spike token into a near one-hot vector: almost all energy in its top channel.
    assert geo["top_m_energy"][:, SPIKE_ROW].min() > 0.99


def test_sink_mass_matches_hand_computation():
    rows = np.array([[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.2, 0.3, 0.5]])
    probs = np.stack([rows, np.eye(3)])[None, None]  # [L=1, B=1, H=2, 3, 3]
    out = attention_sinks(probs, i0=1, eps=0.3, top_k=3)
    # Head 0: a(0) = mean(0.6, 0.2); a(1) over queries 1, 2 = mean(0.4, 0.3); a(2) over query 2 = 0.5.
    np.testing.assert_allclose(out["key_mass"][0, 0], [0.4, 0.35, 0.5])
    np.testing.assert_allclose(out["first_token_mass"][0], [0.4, 0.0])
    np.testing.assert_array_equal(out["top_keys"][0, 0], [2, 0, 1])
    assert out["sink_rate"] == 0.5 and attention_sinks(probs, i0=1, eps=0.45)["sink_rate"] == 0.0
    # On a model: the first-token mass is the mean of P[:, :, :, i >= i0, 0] over rows and queries.
    model, tokens = _planted(), _tokens()
    p = np.asarray(capture_forward(model, tokens)["probs"])
    got = diagnose(model, tokens, i0=I0)["sinks"]["first_token_mass"]
    np.testing.assert_allclose(got, p[:, :, :, I0:, 0].mean(axis=(1, 3)), rtol=1e-6)


def test_interventions():
    model, tokens = _planted(), _tokens()
    out = spike_clamp(model, tokens, layer=0, mode="zero", i0=I0)
    assert out["entries"] == [(SPIKE_ROW, SPIKE_POS, SPIKE_CHANNEL)]
    before, after = out["before"], out["after"]
    assert before["max_ratio"][0] == after["max_ratio"][0]  # the stream before the clamp is untouched
    assert before["max_ratio"][1:].min() > 1e3 and after["max_ratio"][1:].max() < 1e2
    assert after["max_abs"][1:].max() < 0.01 * before["max_abs"][1:].min()
    assert not np.allclose(before["first_token_mass"][1], after["first_token_mass"][1])
    # I2: without the first key no query i >= i0 puts mass on it; head outputs change.
    out = sink_removal(model, tokens, i0=I0)
    assert out["before"]["first_token_mass"].min() > 0 and np.all(out["after"]["first_token_mass"] == 0.0)
    assert out["after"]["sink_rate"] == 0.0 and len(out["heads"]) == 8
    assert not np.allclose(out["head_norm_before"], out["head_norm_after"])
    # I3 with the same prompt as calibration set is a no-op.
    row = tokens[:1]
    out = implicit_parameter_test(model, row, jnp.concatenate([row, row]), layer=1, pos=0, i0=I0)
    assert out["delta_loss"] == 0.0


def test_norm_placement_switch_changes_statistics():
    tokens = _tokens()
    pre = diagnose(_planted(CFG), tokens, i0=I0)
    post = diagnose(_planted(dataclasses.replace(CFG, norm_placement="post")), tokens, i0=I0)
    # Same embedding (same seed and plant): identical spike in the first stream.
    np.testing.assert_allclose(pre["massive"]["max_ratio"][0], post["massive"]["max_ratio"][0], rtol=1e-6)
    # Pre-norm: the residual carries the spike through every layer untouched by norms.
    assert pre["massive"]["max_ratio"][-1] > 1e3 and pre["massive"]["flagged"][-1, 0]
    # Post-norm: each sublayer output is renormalized to RMS 1, so |h| <= sqrt(D) and the spike collapses.
    assert post["massive"]["max_ratio"][1:].max() < 50 and not post["massive"]["flagged"][1:].any()
    assert np.abs(pre["sinks"]["first_token_mass"] - post["sinks"]["first_token_mass"]).max() > 1e-3


def test_non_attention_mixer_reports_sinks_unavailable():
    cfg = dataclasses.replace(CFG, mixer="gated_deltanet")
    model, tokens = _planted(cfg), _tokens()
    result = diagnose(model, tokens, i0=I0)
    np.testing.assert_array_equal(result["logits"], np.asarray(model(tokens)))
    for key in ("sinks", "locality", "co_occurrence"):
        assert result[key]["available"] is False and "gated_deltanet" in result[key]["reason"]
    assert result["massive"]["flagged"][:, 0].all()
    np.testing.assert_array_equal(result["massive"]["top_pos"][:, 0], SPIKE_POS)
    with pytest.raises(ValueError, match="attention"):
        sink_removal(model, tokens, i0=I0)


SOFTMAX_MIXERS = ("attention", "fox", "fix", "goat", "circulation")


def _tiny(mixer: str, **overrides) -> ModelConfig:
    """One layer of `mixer` with its first conformance variant (the options its harness runs)."""
    options = conformance_options(MIXERS.get(mixer))[0]
    return dataclasses.replace(CFG, mixer=mixer, mixer_options=options, num_layers=1, **overrides)


@pytest.mark.parametrize("mixer", MIXERS.names())
def test_capture_runs_every_mixer_without_mlp(mixer: str):
    # Regression: mlp_dim=0 blocks have no MLP sublayer (the EDEN Mamba presets); capture used to assume one.
    model, tokens = build_model(_tiny(mixer, mlp_dim=0), rngs=nnx.Rngs(0)), _tokens()[:, :12]
    cap = capture_forward(model, tokens, materialize_attention=False)
    np.testing.assert_array_equal(np.asarray(cap["logits"]), np.asarray(model(tokens)))
    assert cap["mlp_in"] is None and cap["mlp_out"] is None and not np.asarray(cap["mlp_delta"]).any()
    np.testing.assert_allclose(np.asarray(cap["hidden"][1:] - cap["hidden"][:-1]), np.asarray(cap["attn_delta"]),
                               atol=1e-6)
    assert cap["has_attention"] == (mixer in SOFTMAX_MIXERS) and cap["probs"] is None


def _mixer_output_from_probs(mixer_name: str, mixer: nnx.Module, x: jax.Array, probs: jax.Array) -> jax.Array | None:
    """o_proj(P @ V) rebuilt from the captured probabilities, for mixers whose output is exactly that."""
    positions = jnp.broadcast_to(jnp.arange(x.shape[1], dtype=jnp.int32), x.shape[:2])
    if mixer_name == "fox":
        v = mixer._project_qkv(x, None, positions, None)[2]
    elif mixer_name == "goat":
        v = mixer.augmented_qkv(x, positions)[2]
    elif mixer_name in ("attention", "circulation"):
        v = mixer.v_proj(x).reshape(*x.shape[:2], mixer.num_kv_heads, mixer.head_dim)
    else:
        return None
    v = jnp.repeat(v.astype(jnp.float32), mixer.num_heads // mixer.num_kv_heads, axis=2)
    heads = jnp.einsum("bhij,bjhd->bihd", probs, v).astype(mixer.dtype)
    if mixer_name == "fox":
        return mixer._output(heads, x)
    return mixer.o_proj(heads.reshape(*x.shape[:2], -1))


@pytest.mark.parametrize("mixer", SOFTMAX_MIXERS)
def test_sink_statistics_for_every_softmax_mixer(mixer: str):
    model, tokens = build_model(_tiny(mixer), rngs=nnx.Rngs(0)), _tokens()[:, :12]
    result = diagnose(model, tokens, i0=I0)
    for key in ("sinks", "locality", "co_occurrence"):
        assert result[key]["available"] is True
    assert result["sinks"]["first_token_mass"].shape == (1, CFG.num_heads)
    assert np.isfinite(result["sinks"]["first_token_mass"]).all()
    cap = capture_forward(model, tokens)
    probs = np.asarray(cap["probs"])
    assert probs.shape == (1, 2, CFG.num_heads, 12, 12)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert np.all(probs[..., np.triu_indices(12, k=1)[0], np.triu_indices(12, k=1)[1]] == 0.0)
    # The probabilities are the forward's own: o_proj(P @ V) gives back the mixer's output.
    rebuilt = _mixer_output_from_probs(mixer, model.layers[0].mixer, cap["mixer_in"][0], cap["probs"][0])
    if rebuilt is not None:
        np.testing.assert_allclose(np.asarray(rebuilt), np.asarray(cap["mixer_out"][0]), rtol=1e-4, atol=1e-5)
    if mixer != "attention":
        with pytest.raises(ValueError, match="attention"):
            sink_removal(model, tokens, i0=I0)


def test_explicit_sink_slot_and_output_gate_in_capture_diagnose_and_sink_removal():
    options = (("output_gate", "head"), ("sink", "learnable"))
    model = _planted(dataclasses.replace(CFG, mixer_options=options))
    for layer in model.layers:
        layer.mixer.sink_logit[...] = jnp.asarray([-1.0, 0.5, 2.0, 3.0])
    tokens = _tokens()
    cap = capture_forward(model, tokens)
    np.testing.assert_array_equal(np.asarray(cap["logits"]), np.asarray(model(tokens)))
    probs, slot = np.asarray(cap["probs"]), np.asarray(cap["sink_probs"])
    assert probs.shape == (2, 2, 4, 24, 24) and slot.shape == (2, 2, 4, 24)
    # Rows sum to one including the sink slot, which takes visible mass.
    np.testing.assert_allclose(probs.sum(-1) + slot, 1.0, atol=1e-5)
    assert slot.min() > 0.0
    # The gated head outputs reproduce the mixer's output through o_proj.
    heads = cap["head_out"][0].reshape(2, 24, -1)
    np.testing.assert_allclose(np.asarray(model.layers[0].mixer.o_proj(heads)), np.asarray(cap["mixer_out"][0]),
                               rtol=1e-4, atol=1e-5)
    result = diagnose(model, tokens, i0=I0)
    np.testing.assert_allclose(result["sinks"]["slot_mass"], slot[..., I0:].mean(axis=(1, 3)), rtol=1e-6)
    # I2 removes the first real key, never the sink slot: the slot's mass grows.
    out = sink_removal(model, tokens, i0=I0)
    assert np.all(out["after"]["first_token_mass"] == 0.0)
    assert np.all(out["after"]["slot_mass"] > out["before"]["slot_mass"])
