"""The decoding loop (icml26zoo.decode.generate, also exported as icml26zoo.models.generate) on an attention LM:
greedy equals argmax of the full forward, top-k / top-p limit the support, keys control randomness, and a
cache holding a prefix continues like the whole prompt."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.decode import check_cache
from icml26zoo.models import ModelConfig, build_model, generate, sample_logits

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, max_seq_len=32)
PROMPT_LEN, NEW = 5, 6


@pytest.fixture(scope="module")
def model():
    return build_model(CFG, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def prompt():
    return jax.random.randint(jax.random.key(1), (2, PROMPT_LEN), 0, CFG.vocab_size, dtype=jnp.int32)


# Compiled once for the module (a new jit per call would recompile in every test).
_forward = jax.jit(lambda m, t: m(t))
_decode = jax.jit(lambda m, t, c: m.decode(t, c))


def _next_token_logits(model, prompt, new_tokens):
    """Full-forward logits predicting each new token: [B, NEW, V] (no cache involved)."""
    sequence = jnp.concatenate([prompt, new_tokens], axis=1)
    return _forward(model, sequence)[:, PROMPT_LEN - 1 : -1]


def test_greedy_is_deterministic_and_equals_argmax(model, prompt):
    first = generate(model, prompt, max_new_tokens=NEW, key=jax.random.key(0), temperature=0.0)
    second = generate(model, prompt, max_new_tokens=NEW, key=jax.random.key(99), temperature=0.0)
    assert first.shape == (2, NEW) and first.dtype == jnp.int32
    np.testing.assert_array_equal(first, second)
    # Causality lets one forward pass over the generated sequence replay every greedy step.
    np.testing.assert_array_equal(jnp.argmax(_next_token_logits(model, prompt, first), axis=-1), first)


def test_top_k_one_equals_greedy(model, prompt):
    greedy = generate(model, prompt, max_new_tokens=NEW, key=jax.random.key(0), temperature=0.0)
    for seed in (3, 4):
        top1 = generate(model, prompt, max_new_tokens=NEW, key=jax.random.key(seed), temperature=1.0, top_k=1)
        np.testing.assert_array_equal(top1, greedy)


def test_sampled_tokens_lie_in_top_k(model, prompt):
    k = 3
    tokens = generate(model, prompt, max_new_tokens=NEW, key=jax.random.key(5), temperature=1.5, top_k=k)
    logits = _next_token_logits(model, prompt, tokens)
    kth = jax.lax.top_k(logits, k)[0][..., -1]
    chosen = jnp.take_along_axis(logits, tokens[..., None], axis=-1)[..., 0]
    assert bool(jnp.all(chosen >= kth - 1e-5)), (chosen, kth)


def test_sampled_tokens_lie_in_the_nucleus(model, prompt):
    p = 0.5
    tokens = generate(model, prompt, max_new_tokens=NEW, key=jax.random.key(6), temperature=1.0, top_p=p)
    probs = jax.nn.softmax(_next_token_logits(model, prompt, tokens), axis=-1)  # [B, NEW, V]
    chosen = jnp.take_along_axis(probs, tokens[..., None], axis=-1)
    # A nucleus token has less than p of the mass strictly above it.
    mass_above = jnp.sum(jnp.where(probs > chosen, probs, 0.0), axis=-1)
    assert bool(jnp.all(mass_above < p + 1e-6)), mass_above


def test_a_cache_holding_a_prefix_continues_like_the_whole_prompt(model, prompt):
    whole = generate(model, prompt, max_new_tokens=NEW, key=jax.random.key(0), temperature=0.0)
    cache = model.init_cache(2, PROMPT_LEN + NEW)
    _, cache = _decode(model, prompt[:, :2], cache)
    continued = generate(model, prompt[:, 2:], max_new_tokens=NEW, key=jax.random.key(0), temperature=0.0,
                         cache=cache)
    np.testing.assert_array_equal(continued, whole)
    with pytest.raises(ValueError, match=r"max_len = 11 cannot hold 2 cached tokens, a prompt of shape \(2, 3\)"):
        generate(model, prompt[:, 2:], max_new_tokens=NEW + 1, key=jax.random.key(0), cache=cache)


def test_a_cache_of_the_wrong_shape_raises(model, prompt):
    with pytest.raises(ValueError, match=r"cache must be a decode cache from model.init_cache\(2, max_len\)"):
        check_cache(model, model.init_cache(3, 16), 2)
    other = nnx.eval_shape(lambda: build_model(dataclasses.replace(CFG, num_kv_heads=4), rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="cache has the wrong shape for this model"):
        generate(model, prompt, max_new_tokens=2, key=jax.random.key(0), cache=other.init_cache(2, 16))


def test_sampling_depends_only_on_key(model, prompt):
    def run(seed):
        return generate(model, prompt, max_new_tokens=NEW, key=jax.random.key(seed), temperature=1.0)

    np.testing.assert_array_equal(run(7), run(7))
    assert any(not np.array_equal(run(7), run(seed)) for seed in (8, 9, 10))


def test_sample_logits_top_k_support():
    logits = jnp.log(jnp.asarray([[0.05, 0.4, 0.05, 0.3, 0.2]] * 256))
    samples = sample_logits(logits, jax.random.key(0), temperature=1.0, top_k=2)
    assert set(np.unique(samples).tolist()) == {1, 3}
    np.testing.assert_array_equal(sample_logits(logits, jax.random.key(0), temperature=0.0, top_k=None), 1)


def test_bad_arguments_raise(model, prompt):
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"prompt must be an integer array of shape \[B, P\].*float32"):
        generate(model, prompt.astype(jnp.float32), max_new_tokens=2, key=key)
    with pytest.raises(
        ValueError, match=r"max_len = 6 cannot hold 0 cached tokens, a prompt of shape \(2, 5\) and 2 new tokens"
    ):
        generate(model, prompt, max_new_tokens=2, key=key, max_len=6)
    with pytest.raises(ValueError, match=r"top_k must be an integer in \[1, 64\], got 65"):
        generate(model, prompt, max_new_tokens=2, key=key, top_k=65)
    with pytest.raises(ValueError, match=r"temperature \(0 = greedy\) must be a finite non-negative number, got -1.0"):
        generate(model, prompt, max_new_tokens=2, key=key, temperature=-1.0)
    with pytest.raises(ValueError, match=r"top_p must be a number in \(0, 1\], got 1.5"):
        generate(model, prompt, max_new_tokens=2, key=key, top_p=1.5)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1, got 0"):
        generate(model, prompt, max_new_tokens=0, key=key)
