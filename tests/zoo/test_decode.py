"""icml26zoo.decode: the sampling filters against closed forms (top-p's nucleus, top-k, temperature), and the
jitted loop over every registered mixer's cache.

Cached decoding equal to the full forward, logits at 1e-5, token by token and after a chunked prefill, is
asserted for every registered model x mixer x option variant by the conformance harness
(tests/zoo/test_conformance.py::test_decode_token_by_token_equals_forward); it is not repeated here. What
the loop adds is a `lax.scan` whose carry is each model's cache, which must keep its shape: traced here for
every registered model and mixer (no compilation), and run greedily against the full forward for a
recurrent mixer here and for attention in tests/zoo/test_generate.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.decode import generate, sample_logits, sampling_logits
from icml26zoo.decode.loop import _generate
from icml26zoo.mixers.base import conformance_options
from icml26zoo.models import ModelConfig, build_model, language_model_names
from icml26zoo.registry import MIXERS, MODELS

pytestmark = pytest.mark.usefixtures("fast_compile")

VOCAB = 32
PROBS = np.asarray([0.4, 0.3, 0.2, 0.1])


def _tiny(mixer: str, model: str = "llama") -> ModelConfig:
    options = conformance_options(MIXERS.get(mixer))[0]
    return ModelConfig(name=model, mixer=mixer, mixer_options=options, vocab_size=VOCAB, d_model=16, num_layers=1,
                       num_heads=2, num_kv_heads=1, max_seq_len=16)


def _loop_cases():
    """Every registered model x mixer, or, for a model declaring CONFORMANCE_CONFIGS, its declared cases (at
    the conformance harness's sizes), as the harness enumerates them."""
    sizes = {"vocab_size": VOCAB, "d_model": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "max_seq_len": 32}
    for model in language_model_names():
        declared = getattr(MODELS.get(model), "CONFORMANCE_CONFIGS", None)
        if declared is None:
            for mixer in MIXERS.names():
                yield pytest.param(_tiny(mixer, model), id=f"{model}-{mixer}")
        else:
            for i, overrides in enumerate(declared):
                yield pytest.param(ModelConfig(name=model, **{**sizes, **overrides}), id=f"{model}-declared{i}")


def _kept(logits, **kwargs) -> list[set[int]]:
    filtered = np.asarray(sampling_logits(jnp.asarray(logits, jnp.float32), **kwargs))
    return [set(np.flatnonzero(np.isfinite(row)).tolist()) for row in filtered]


def _nucleus_reference(probs: np.ndarray, p: float) -> set[int]:
    """The smallest set of most likely tokens with mass >= p (distinct probabilities)."""
    order = np.argsort(-probs)
    size = int(np.searchsorted(np.cumsum(probs[order]), p) + 1)
    return set(order[:size].tolist())


@pytest.mark.parametrize(("p", "expected"), [(0.3, {0}), (0.39, {0}), (0.41, {0, 1}), (0.69, {0, 1}),
                                             (0.71, {0, 1, 2}), (0.95, {0, 1, 2, 3}), (1.0, {0, 1, 2, 3})])
def test_top_p_keeps_the_smallest_set_reaching_p(p, expected):
    # PROBS shuffled so that position does not decide: tokens 2, 0, 3, 1 hold 0.4, 0.3, 0.2, 0.1.
    permutation = np.asarray([2, 0, 3, 1])
    logits = np.log(PROBS[np.argsort(permutation)])[None]
    assert _kept(logits, top_p=p) == [{int(permutation[i]) for i in expected}]
    # The kept tokens are renormalized, nothing else changes.
    filtered = np.asarray(sampling_logits(jnp.asarray(logits, jnp.float32), top_p=p))[0]
    kept = sorted(int(permutation[i]) for i in expected)
    np.testing.assert_allclose(np.exp(filtered[kept]) / np.exp(filtered[kept]).sum(),
                               np.exp(logits[0, kept]) / np.exp(logits[0, kept]).sum(), rtol=1e-6)


def test_top_p_matches_the_reference_on_random_rows():
    logits = np.asarray(jax.random.normal(jax.random.key(0), (6, VOCAB)) * 2.0)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    for p in (0.1, 0.5, 0.9, 0.99):
        assert _kept(logits, top_p=p) == [_nucleus_reference(row, p) for row in probs]


def test_top_p_keeps_every_token_tied_with_the_last_one():
    # Mass 0.4 + one 0.2 reaches 0.5; the three 0.2-tokens are tied, so all stay (documented tie rule).
    logits = np.log(np.asarray([[0.2, 0.4, 0.2, 0.2]]))
    assert _kept(logits, top_p=0.5) == [{0, 1, 2, 3}]
    assert _kept(logits, top_p=0.35) == [{1}]


def test_top_p_one_is_plain_sampling_and_top_k_one_is_greedy():
    # A tail far below float32's resolution of the cumulative mass: top_p = 1 must not drop it.
    logits = jnp.concatenate([jax.random.normal(jax.random.key(1), (64, VOCAB - 4)),
                              jnp.full((64, 4), -60.0)], axis=1)
    for seed in range(3):
        key = jax.random.key(seed)
        np.testing.assert_array_equal(sample_logits(logits, key, top_p=1.0), sample_logits(logits, key))
        np.testing.assert_array_equal(sample_logits(logits, key, temperature=1.7, top_k=1),
                                      sample_logits(logits, key, temperature=0.0))
    np.testing.assert_array_equal(sample_logits(logits, key, temperature=0.0), jnp.argmax(logits, axis=-1))


def test_temperature_scales_the_logits_and_the_draws_follow_it():
    logits = jnp.log(jnp.asarray([PROBS] * 4000, jnp.float32))
    for temperature in (0.5, 2.0):
        expected = PROBS ** (1 / temperature) / np.sum(PROBS ** (1 / temperature))
        np.testing.assert_allclose(jax.nn.softmax(sampling_logits(logits[:1], temperature=temperature))[0],
                                   expected, rtol=1e-5)
        draws = np.asarray(sample_logits(logits, jax.random.key(7), temperature=temperature))
        frequencies = np.bincount(draws, minlength=4) / draws.size
        np.testing.assert_allclose(frequencies, expected, atol=0.03)  # about 4 standard errors at n = 4000


def test_filters_apply_in_order_temperature_top_k_top_p():
    logits = jnp.log(jnp.asarray([[0.4, 0.3, 0.2, 0.1]], jnp.float32))
    # Temperature 0.5 squares the probabilities: top-2 leaves 16/25, 9/25; the nucleus at 0.6 keeps token 0.
    assert _kept(logits, temperature=0.5, top_k=2, top_p=0.6) == [{0}]
    # At temperature 2 the top-2 mass is split more evenly (0.54, 0.46): the nucleus at 0.6 needs both.
    assert _kept(logits, temperature=2.0, top_k=2, top_p=0.6) == [{0, 1}]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"temperature": -1.0}, r"temperature \(0 = greedy\) must be a finite non-negative number, got -1.0"),
     ({"temperature": float("nan")}, "temperature"),
     ({"top_p": 0.0}, r"top_p must be a number in \(0, 1\], got 0.0"),
     ({"top_p": 1.5}, "top_p"),
     ({"top_k": 0}, r"top_k must be an integer in \[1, 4\], got 0"),
     ({"top_k": 5}, "top_k")],
)
def test_bad_sampling_settings_raise(kwargs, match):
    logits = jnp.zeros((2, 4))
    with pytest.raises(ValueError, match=match):
        sample_logits(logits, jax.random.key(0), **kwargs)


def test_bad_logits_raise():
    with pytest.raises(ValueError, match=r"logits must be a float array of shape \[B, V\].*\(4,\)"):
        sample_logits(jnp.zeros(4), jax.random.key(0))
    with pytest.raises(ValueError, match="temperature must be > 0 for a sampling distribution"):
        sampling_logits(jnp.zeros((1, 4)), temperature=0.0)


@pytest.mark.parametrize("cfg", list(_loop_cases()))
def test_loop_keeps_every_models_cache_shape(cfg):
    """Tracing the whole loop checks the scan carry: a cache whose shape or dtype changed would not trace."""
    model = nnx.eval_shape(lambda: build_model(cfg, rngs=nnx.Rngs(0)))
    graphdef, params = nnx.split(model, nnx.Param)
    prompt = jax.ShapeDtypeStruct((2, 3), jnp.int32)
    out = jax.eval_shape(
        lambda p, x: _generate(graphdef, p, None, None, x, jax.random.key(0), None, max_new_tokens=4, max_len=7,
                               temperature=0.7, top_k=5, top_p=0.9), params, prompt)
    assert out.shape == (2, 4) and out.dtype == jnp.int32


def test_greedy_loop_over_a_recurrent_state_equals_forward_argmax():
    model = build_model(_tiny("gated_deltanet"), rngs=nnx.Rngs(0))
    prompt = jax.random.randint(jax.random.key(1), (2, 3), 0, VOCAB, dtype=jnp.int32)
    tokens = generate(model, prompt, max_new_tokens=5, key=jax.random.key(0), temperature=0.0)
    logits = jax.jit(lambda m, t: m(t))(model, jnp.concatenate([prompt, tokens], axis=1))
    # Causality lets one forward pass over the generated sequence replay every greedy step.
    np.testing.assert_array_equal(jnp.argmax(logits[:, 2:-1], axis=-1), tokens)
