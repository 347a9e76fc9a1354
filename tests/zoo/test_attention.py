"""The attention mixer against a materialized float64 NumPy softmax attention (GQA, segments, cache)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.layers.alibi import alibi_slopes
from icml26zoo.mixers.attention import Attention, decode_mask, training_mask
from icml26zoo.models import ModelConfig
from icml26zoo.registry import MIXERS

pytestmark = pytest.mark.usefixtures("fast_compile")

F32 = {"atol": 1e-5, "rtol": 1e-5}
CFG = ModelConfig(
    vocab_size=64, d_model=24, num_layers=1, num_heads=6, num_kv_heads=2, head_dim=8, max_seq_len=16
)
B, T = 2, 9


def _rope(x, positions, theta):
    half = x.shape[-1] // 2
    freqs = theta ** (-np.arange(half) * 2.0 / x.shape[-1])
    angle = positions[:, :, None, None] * freqs
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate(
        [x1 * np.cos(angle) - x2 * np.sin(angle), x2 * np.cos(angle) + x1 * np.sin(angle)], -1
    )


def _alibi_slopes(h):
    # ALiBi's geometric slopes 2^(-8i/h), i = 1..h, for a power-of-two head count (here h = 4).
    return 2.0 ** (-8.0 * np.arange(1, h + 1) / h)


def _reference(
    mixer: Attention, x, positions, segment_ids, position="rope", cfg=CFG, sink_logit=None, gate=None
) -> np.ndarray:
    """Materialized causal softmax attention in float64 with GQA and segment masking; RoPE, ALiBi or none.

    sink_logit [H]: an extra key column with that logit and a zero value; gate "head"/"channel": multiply
    each head's output by sigmoid(x @ gate_proj).
    """
    w = {
        name: np.asarray(getattr(mixer, name).kernel[...], np.float64)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj")
    }
    x = np.asarray(x, np.float64)
    b, t, _ = x.shape
    h, hkv, dh = cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
    q = (x @ w["q_proj"]).reshape(b, t, h, dh)
    k = (x @ w["k_proj"]).reshape(b, t, hkv, dh)
    if position == "rope":
        q, k = _rope(q, positions, cfg.rope_theta), _rope(k, positions, cfg.rope_theta)
    v = (x @ w["v_proj"]).reshape(b, t, hkv, dh)
    kv_head = np.arange(h) // (h // hkv)  # query head -> kv head
    scores = np.einsum("bthd,bshd->bhts", q, k[:, :, kv_head]) / np.sqrt(dh)
    if position == "alibi":
        distance = positions[:, :, None] - positions[:, None, :]
        scores = scores - _alibi_slopes(h)[None, :, None, None] * distance[:, None]
    allowed = np.tril(np.ones((t, t), bool))[None] & (segment_ids[:, :, None] == segment_ids[:, None, :])
    scores = np.where(allowed[:, None], scores, -np.inf)
    if sink_logit is not None:
        sink_column = np.broadcast_to(np.asarray(sink_logit, np.float64)[None, :, None, None], (b, h, t, 1))
        scores = np.concatenate([scores, sink_column], axis=-1)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.einsum("bhts,bshd->bthd", probs[..., :t], v[:, :, kv_head])
    if gate is not None:
        logits = x @ np.asarray(mixer.gate_proj.kernel[...], np.float64)
        out = out / (1.0 + np.exp(-logits.reshape(b, t, h, -1)))
    return out.reshape(b, t, h * dh) @ w["o_proj"]


@jax.jit
def _apply(mixer, x, segment_ids, positions, cache=None):
    """The mixer under jit (a module is a pytree): one compile per shape instead of per eager op."""
    return mixer(x, segment_ids=segment_ids, positions=positions, cache=cache)


@pytest.fixture(scope="module")
def mixer() -> Attention:
    return Attention(CFG, rngs=nnx.Rngs(0))


def _inputs(seed=0):
    x = jax.random.normal(jax.random.key(seed), (B, T, CFG.d_model))
    segment_ids = np.asarray([[1, 1, 1, 1, 2, 2, 2, 2, 2], [3, 3, 3, 3, 3, 3, 3, 0, 0]], np.int32)
    positions = np.asarray([[0, 1, 2, 3, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6, 0, 1]], np.int32)
    return x, segment_ids, positions


def test_registered():
    assert MIXERS.get("attention") is Attention


def test_matches_reference_with_gqa_and_segments(mixer):
    x, segment_ids, positions = _inputs()
    y, cache = _apply(mixer, x, jnp.asarray(segment_ids), jnp.asarray(positions))
    assert cache is None
    np.testing.assert_allclose(y, _reference(mixer, x, positions, segment_ids), **F32)


def test_matches_reference_without_segments(mixer):
    x, _, _ = _inputs(1)
    positions = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
    y, _ = _apply(mixer, x, None, jnp.asarray(positions))
    np.testing.assert_allclose(y, _reference(mixer, x, positions, np.ones((B, T), np.int32)), **F32)


def test_cached_decoding_in_chunks_matches_reference(mixer):
    x, _, _ = _inputs(2)
    positions = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
    cache = mixer.init_cache(B, 12, jnp.float32)
    outputs = []
    for start, stop in ((0, 4), (4, 5), (5, 9)):
        y, cache = _apply(mixer, x[:, start:stop], None, jnp.asarray(positions[:, start:stop]), cache)
        outputs.append(y)
    assert int(cache["index"]) == T
    np.testing.assert_array_equal(cache["k"][:, T:], 0.0)  # slots past the index stay untouched
    expected = _reference(mixer, x, positions, np.ones((B, T), np.int32))
    np.testing.assert_allclose(jnp.concatenate(outputs, axis=1), expected, **F32)


def test_qk_norm_option_adds_norms_and_stays_causal():
    cfg = ModelConfig(**{**CFG.__dict__, "mixer_options": (("qk_norm", True),)})
    mixer = Attention(cfg, rngs=nnx.Rngs(0))
    assert mixer.q_norm is not None and mixer.k_norm is not None
    x, _, _ = _inputs(3)
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    y, _ = mixer(x, segment_ids=None, positions=positions)
    y_cut, _ = mixer(x.at[:, 5:].set(0.0), segment_ids=None, positions=positions)
    np.testing.assert_allclose(y_cut[:, :5], y[:, :5], **F32)


@pytest.mark.parametrize("position", ["alibi", "none"])
def test_alibi_and_no_position_match_the_reference_in_training_and_decoding(position):
    cfg = ModelConfig(**{**CFG.__dict__, "num_heads": 4, "head_dim": 6, "mixer_options": (("position", position),)})
    mixer = Attention(cfg, rngs=nnx.Rngs(1))
    x = jax.random.normal(jax.random.key(4), (B, T, cfg.d_model))
    _, segment_ids, positions = _inputs()
    reference = functools.partial(_reference, mixer, position=position, cfg=cfg)
    y, _ = _apply(mixer, x, jnp.asarray(segment_ids), jnp.asarray(positions))
    np.testing.assert_allclose(y, reference(x, positions, segment_ids), **F32)
    plain = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
    cache, outputs = mixer.init_cache(B, 12, jnp.float32), []
    for start, stop in ((0, 5), (5, 6), (6, 9)):
        y, cache = _apply(mixer, x[:, start:stop], None, jnp.asarray(plain[:, start:stop]), cache)
        outputs.append(y)
    expected = reference(x, plain, np.ones((B, T), np.int32))
    np.testing.assert_allclose(jnp.concatenate(outputs, axis=1), expected, **F32)


def test_alibi_slopes_and_a_bad_position_option():
    np.testing.assert_allclose(alibi_slopes(4), _alibi_slopes(4))
    np.testing.assert_allclose(alibi_slopes(6), [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
    cfg = ModelConfig(**{**CFG.__dict__, "mixer_options": (("position", "xpos"),)})
    with pytest.raises(ValueError, match=r"option 'position' must be one of \['rope', 'alibi', 'none'\]"):
        Attention(cfg, rngs=nnx.Rngs(0))


@pytest.mark.parametrize(("gate", "sink"), [("channel", "learnable"), ("head", "plus_one")])
def test_output_gate_and_sink_match_the_reference_in_training_and_decoding(gate, sink):
    cfg = ModelConfig(**{**CFG.__dict__, "mixer_options": (("output_gate", gate), ("sink", sink))})
    mixer = Attention(cfg, rngs=nnx.Rngs(2))
    assert mixer.gate_proj.kernel.shape == (24, 6 * (8 if gate == "channel" else 1))
    if sink == "learnable":
        assert mixer.sink_logit.shape == (6,)
        mixer.sink_logit[...] = jnp.linspace(-2.0, 3.0, 6)  # away from the zero init, per head
    else:
        assert mixer.sink_logit is None
    logit = np.asarray(mixer.sink_logits(), np.float64)
    x, segment_ids, positions = _inputs(5)
    reference = functools.partial(_reference, mixer, cfg=cfg, sink_logit=logit, gate=gate)
    y, _ = _apply(mixer, x, jnp.asarray(segment_ids), jnp.asarray(positions))
    np.testing.assert_allclose(y, reference(x, positions, segment_ids), **F32)
    plain = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
    cache, outputs = mixer.init_cache(B, 12, jnp.float32), []
    for start, stop in ((0, 4), (4, 5), (5, 9)):
        y, cache = _apply(mixer, x[:, start:stop], None, jnp.asarray(plain[:, start:stop]), cache)
        outputs.append(y)
    np.testing.assert_allclose(jnp.concatenate(outputs, axis=1), reference(x, plain, np.ones((B, T), np.int32)), **F32)


def test_sink_weights_sum_to_one_with_the_sink_slot_and_the_sink_takes_mass():
    cfg = ModelConfig(**{**CFG.__dict__, "mixer_options": (("sink", "learnable"),)})
    mixer = Attention(cfg, rngs=nnx.Rngs(3))
    mixer.sink_logit[...] = jnp.full((6,), 4.0)
    x, _, _ = _inputs(6)
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    probs = np.asarray(mixer.attention_weights(x, positions=positions))
    logits = np.asarray(mixer.attention_logits(x, positions=positions))
    assert probs.shape == logits.shape == (B, 6, T, T + 1)
    np.testing.assert_allclose(probs.sum(-1), 1.0, **F32)
    np.testing.assert_array_equal(logits[..., -1], 4.0)
    # The first query sees one real key (logit s) and the sink (logit 4): weights 1 / (1 + e^(4 - s)).
    s = logits[:, :, 0, 0]
    np.testing.assert_allclose(probs[:, :, 0, -1], 1.0 / (1.0 + np.exp(s - 4.0)), **F32)
    np.testing.assert_array_equal(probs[:, :, 0, 1:T], 0.0)


def test_bad_output_gate_and_sink_options():
    for name, value in (("output_gate", "elementwise"), ("sink", "register")):
        cfg = ModelConfig(**{**CFG.__dict__, "mixer_options": ((name, value),)})
        with pytest.raises(ValueError, match=rf"option '{name}' must be one of .*got '{value}'"):
            Attention(cfg, rngs=nnx.Rngs(0))


def test_masks():
    segments = jnp.asarray([[1, 1, 2]], jnp.int32)
    expected = [[True, False, False], [True, True, False], [False, False, True]]
    np.testing.assert_array_equal(training_mask(segments, 3)[0, 0], expected)
    assert training_mask(None, 3) is None
    # Two new tokens at slots 3 and 4 of 6: each reads the prefix and itself, never slot 5.
    np.testing.assert_array_equal(
        decode_mask(jnp.asarray(3, jnp.int32), 2, 6)[0, 0],
        [[True, True, True, True, False, False], [True, True, True, True, True, False]],
    )


def test_bad_inputs_raise(mixer):
    x, segment_ids, positions = _inputs()
    with pytest.raises(ValueError, match=r"x must have shape \[B, T, 24\], got shape \(2, 9, 5\)"):
        mixer(jnp.zeros((B, T, 5)), positions=jnp.asarray(positions))
    with pytest.raises(ValueError, match=r"positions must be an integer array of shape \(2, 9\).*\(2, 8\)"):
        mixer(x, positions=jnp.asarray(positions[:, :8]))
    with pytest.raises(ValueError, match=r"segment_ids must be None when decoding"):
        mixer(
            x,
            segment_ids=jnp.asarray(segment_ids),
            positions=jnp.asarray(positions),
            cache=mixer.init_cache(B, 12, jnp.float32),
        )
    bad_k = r"cache must have entries \{'index': \(\), 'k': \(2, 12, 2, 8\).*got \{'index': \(\), 'k': \(2, 12, 2, 4\)"
    with pytest.raises(ValueError, match=bad_k):
        bad = mixer.init_cache(B, 12, jnp.float32)
        mixer(x, positions=jnp.asarray(positions), cache={**bad, "k": bad["k"][..., :4]})
