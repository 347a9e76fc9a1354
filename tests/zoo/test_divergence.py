"""Divergence Decoding (icml26zoo.decode.divergence): the paper's invariants as tests.

alpha = 0 is the base model; identical auxiliaries change nothing; the rule is shift invariant (linear in
log-probabilities); top-k suppression with k = 0 is the identity and gives suppressed tokens probability 0;
cached generation with three models in lockstep equals uncached recomputation; the distillation loss is a
masked KL that vanishes when the student matches the teacher up to per-position constants.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.decode import (
    DivergenceDecoding,
    distillation_loss,
    divergence_logits,
    generate,
    signed_log_divergence_logits,
    steered_logits,
    top_k_suppression,
)
from icml26zoo.decode.divergence import signed_log, signed_log_inverse
from icml26zoo.models import ModelConfig, build_model

pytestmark = pytest.mark.usefixtures("fast_compile")

VOCAB = 32
BASE = ModelConfig(vocab_size=VOCAB, d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, max_seq_len=16)
AUX = dataclasses.replace(BASE, d_model=16)
PROMPT_LEN, NEW = 4, 4
# Compiled once for the module: every processor here has the same structure (alpha is a variable).
forward = jax.jit(lambda model, tokens: model(tokens))
steered = jax.jit(steered_logits)


@pytest.fixture(scope="module")
def models():
    return tuple(build_model(cfg, rngs=nnx.Rngs(seed)) for cfg, seed in ((BASE, 0), (AUX, 1), (AUX, 2)))


@pytest.fixture(scope="module")
def prompt():
    return jax.random.randint(jax.random.key(3), (2, PROMPT_LEN), 0, VOCAB, dtype=jnp.int32)


def _logits(seed: int, shape=(3, 5, VOCAB)) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape) * 3.0


def test_the_rule_and_alpha_zero():
    base, retain, forget = _logits(0), _logits(1), _logits(2)
    np.testing.assert_allclose(divergence_logits(base, retain, forget, alpha=1.5), base + 1.5 * (retain - forget),
                               rtol=1e-6)
    np.testing.assert_array_equal(divergence_logits(base, retain, forget, alpha=0.0), base)
    np.testing.assert_array_equal(divergence_logits(base, retain, retain, alpha=2.0), base)
    np.testing.assert_allclose(signed_log_divergence_logits(base, retain, forget, alpha=0.0), base, rtol=1e-5)
    np.testing.assert_allclose(signed_log_inverse(signed_log(base)), base, rtol=1e-5, atol=1e-6)


def test_shift_invariance_and_log_softmax_inputs():
    base, retain, forget = _logits(0), _logits(1), _logits(2)
    shifts = [_logits(seed, (3, 5, 1)) * 10 for seed in (4, 5, 6)]
    reference = jax.nn.softmax(divergence_logits(base, retain, forget, alpha=1.5), axis=-1)
    shifted = divergence_logits(base + shifts[0], retain + shifts[1], forget + shifts[2], alpha=1.5)
    normalized = divergence_logits(*(jax.nn.log_softmax(z, axis=-1) for z in (base, retain, forget)), alpha=1.5)
    for logits in (shifted, normalized):
        np.testing.assert_allclose(jax.nn.softmax(logits, axis=-1), reference, rtol=1e-4, atol=1e-7)


def test_top_k_suppression():
    base, retain, forget = _logits(0), _logits(1), _logits(2)
    np.testing.assert_array_equal(top_k_suppression(base, retain, forget, k=0), base)
    suppressed = top_k_suppression(base, retain, forget, k=3)
    difference = np.asarray(retain - forget)
    most_negative = np.argsort(difference, axis=-1)[..., :3]
    expected = np.asarray(base).copy()
    np.put_along_axis(expected, most_negative, -np.inf, axis=-1)
    np.testing.assert_array_equal(suppressed, expected)
    probs = jax.nn.softmax(suppressed, axis=-1)
    assert float(jnp.max(jnp.take_along_axis(probs, jnp.asarray(most_negative), axis=-1))) == 0.0
    # Restricted to a vocabulary, only its tokens can be suppressed.
    allowed = jnp.arange(VOCAB) < 8
    restricted = top_k_suppression(base, retain, forget, k=2, vocabulary_mask=allowed)
    assert bool(jnp.all(jnp.isfinite(restricted[..., 8:])))


def test_identical_auxiliaries_and_alpha_zero_leave_the_model_unchanged(models, prompt):
    base, retain, forget = models
    twin = nnx.clone(retain)
    tokens = jnp.concatenate([prompt, prompt], axis=1)
    unchanged = DivergenceDecoding(base, retain, twin, alpha=2.0)
    np.testing.assert_array_equal(steered(base, unchanged, tokens), forward(base, tokens))
    key = jax.random.key(11)
    plain = generate(base, prompt, max_new_tokens=NEW, key=key, temperature=0.0)
    off = generate(base, prompt, max_new_tokens=NEW, key=key, temperature=0.0,
                   processor=DivergenceDecoding(base, retain, forget, alpha=0.0))
    np.testing.assert_array_equal(off, plain)


def test_cached_generation_in_lockstep_equals_recomputation(models, prompt):
    base, retain, forget = models
    processor = DivergenceDecoding(base, retain, forget, alpha=3.0)
    tokens = generate(base, prompt, max_new_tokens=NEW, key=jax.random.key(0), temperature=0.0, processor=processor)
    sequence = jnp.concatenate([prompt, tokens], axis=1)
    logits = steered(base, processor, sequence)
    # Causality: one uncached forward of all three models over the generated text replays every greedy step.
    np.testing.assert_array_equal(jnp.argmax(logits[:, prompt.shape[1] - 1 : -1], axis=-1), tokens)
    # Strong steering changes the greedy continuation (the auxiliaries are random and disagree).
    plain = jnp.argmax(forward(base, sequence)[:, prompt.shape[1] - 1 : -1], axis=-1)
    assert not np.array_equal(plain, tokens)


def test_distillation_loss_is_a_masked_kl():
    teacher, student = _logits(0, (2, 4, 6)), _logits(1, (2, 4, 6))
    mask = jnp.asarray([[0, 0, 1, 1], [0, 1, 1, 1]], jnp.float32)
    log_t, log_s = jax.nn.log_softmax(teacher), jax.nn.log_softmax(student)
    kl = np.sum(np.exp(log_t) * (log_t - log_s), axis=-1)
    np.testing.assert_allclose(distillation_loss(student, teacher, mask), np.sum(kl * mask) / 5, rtol=1e-5)
    # Zero when the student equals the teacher up to a per-position constant.
    assert float(distillation_loss(teacher + _logits(2, (2, 4, 1)), teacher, mask)) == pytest.approx(0.0, abs=1e-6)
    # Prompt (masked) positions do not count.
    changed = student.at[:, 0].set(_logits(3, (2, 6)))
    assert float(distillation_loss(changed, teacher, mask)) == float(distillation_loss(student, teacher, mask))
    # A suppressed teacher token (-inf) contributes 0, not NaN.
    assert np.isfinite(float(distillation_loss(student, teacher.at[..., 0].set(-jnp.inf), mask)))


def test_bad_inputs_raise(models):
    base, retain, forget = models
    wide = nnx.eval_shape(lambda: build_model(dataclasses.replace(AUX, vocab_size=VOCAB + 1), rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match=r"forget model has vocab_size 33 but the base model has 32"):
        DivergenceDecoding(base, retain, wide, alpha=1.0)
    with pytest.raises(ValueError, match=r"retain model has vocab_size 33"):
        DivergenceDecoding(base, wide, forget, alpha=1.0)
    with pytest.raises(ValueError, match=r"alpha must be a finite non-negative number, got -1.0"):
        DivergenceDecoding(base, retain, forget, alpha=-1.0)
    with pytest.raises(ValueError, match=r"variant must be one of"):
        DivergenceDecoding(base, retain, forget, alpha=1.0, variant="log")
    with pytest.raises(ValueError, match=r"retain_logits must have the base logits' shape \(3, 5, 32\)"):
        divergence_logits(_logits(0), _logits(1, (3, 5, 31)), _logits(2), alpha=1.0)
    with pytest.raises(ValueError, match=r"k must be at most the vocabulary size 32"):
        top_k_suppression(_logits(0), _logits(1), _logits(2), k=33)
    with pytest.raises(ValueError, match=r"mask must have shape \(3, 5\)"):
        distillation_loss(_logits(0), _logits(1), jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="cache must be None when a processor is given"):
        generate(base, jnp.zeros((1, 2), jnp.int32), max_new_tokens=1, key=jax.random.key(0), cache=base.init_cache(1),
                 processor=DivergenceDecoding(base, retain, forget, alpha=1.0))
