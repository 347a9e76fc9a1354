"""ASMC particle decoding: cache-coherent resampling equals recomputing the prefixes (attention and
a recurrent LM), the weights target p^α exactly (enumerable case), α-annealing bookkeeping, frozen finished
particles, the adaptive population, and bad input. One compiled sampler serves every run (numeric settings are
traced), on a tiny LM whose head is scaled up so that its next-token distributions are peaked (entropy ~1.4 nats)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.decode.asmc import ASMCConfig, _asmc, asmc_decode, proposal_log_probs
from icml26zoo.decode.asmc_cache import reorder_cache
from icml26zoo.models import ModelConfig, build_model

pytestmark = pytest.mark.usefixtures("fast_compile")

VOCAB, PROMPT, NEW, CAPACITY = 16, jnp.asarray([3, 1, 4], jnp.int32), 4, 256
TINY = {"vocab_size": VOCAB, "d_model": 16, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "max_seq_len": 16}
# Every run in this module has this structure (one compile); the tests vary only traced settings.
BASE = {"max_new_tokens": NEW, "num_particles": CAPACITY, "max_particles": CAPACITY, "block_size": 2,
        "scheme": "systematic", "temperature": 0.5}


def _peaked_model(mixer: str, **overrides) -> nnx.Module:
    model = build_model(ModelConfig(mixer=mixer, tie_embeddings=False, **{**TINY, **overrides}), rngs=nnx.Rngs(0))
    model.head[...] = model.head[...] * 30.0
    return model


@pytest.fixture(scope="module")
def model():
    return _peaked_model("attention")


def _run(model, seed=0, **settings):
    return asmc_decode(model, PROMPT, key=jax.random.key(seed), config=ASMCConfig(**{**BASE, **settings}))


def _sequence_log_probs(model, tokens: jax.Array) -> jax.Array:
    """tokens [N, NEW] -> [N, NEW] log p(token_t | prompt, tokens_<t) from one full forward (no cache)."""
    full = jnp.concatenate([jnp.broadcast_to(PROMPT, (tokens.shape[0], PROMPT.shape[0])), tokens], axis=1)
    log_p = jax.nn.log_softmax(jax.jit(lambda m, t: m(t))(model, full), axis=-1)[:, PROMPT.shape[0] - 1 : -1]
    return jnp.take_along_axis(log_p, tokens[..., None], axis=-1)[..., 0]


@jax.jit
def _cached_vs_recomputed(model, prefixes, ancestors, next_tokens):
    """Prefill prefixes [N, P] (the last two tokens decoded one at a time), reorder the cache by ancestors and
    decode next_tokens [N, 1]; also decode prefixes[ancestors] + next_tokens from an empty cache. Both [N, V]."""
    cache = model.init_cache(prefixes.shape[0], 8)
    _, cache = model.decode(prefixes[:, :-2], cache)
    for t in (-2, -1):
        _, cache = model.decode(prefixes[:, t:][:, :1], cache)
    logits, _ = model.decode(next_tokens, reorder_cache(model, cache, ancestors))
    fresh_input = jnp.concatenate([prefixes[ancestors], next_tokens], axis=1)
    fresh, _ = model.decode(fresh_input, model.init_cache(prefixes.shape[0], 8))
    return logits[:, -1], fresh[:, -1]


# Layers stacked [L, N, ...] (KV buffers) and a tuple of one layer's cache (recurrent state, conv window).
@pytest.mark.parametrize(("mixer", "layout"), [("attention", {}), ("gated_deltanet", {"scan_layers": False,
                                                                                     "num_layers": 1})],
                         ids=["attention_stacked", "gated_deltanet_unrolled"])
def test_reordered_cache_decodes_like_recomputing_the_resampled_prefixes(mixer, layout):
    model = _peaked_model(mixer, **layout)
    prefixes = jax.random.randint(jax.random.key(1), (4, 5), 0, VOCAB, dtype=jnp.int32)
    ancestors = jnp.asarray([2, 2, 0, 3], jnp.int32)
    next_tokens = jnp.asarray([[7], [1], [1], [9]], jnp.int32)
    cached, fresh = _cached_vs_recomputed(model, prefixes, ancestors, next_tokens)
    np.testing.assert_allclose(cached, fresh, atol=1e-5, rtol=1e-5)
    # The check can fail: without the reordering, row 1 (ancestor 2) would decode another prefix.
    assert not np.allclose(fresh[1], fresh[3], atol=1e-3)


def test_particle_log_probs_match_a_full_forward_through_growth_and_resampling(model):
    result = _run(model, num_particles=64, ess_threshold=1.0, collapse_threshold=0.99, alpha=3.0)
    np.testing.assert_array_equal(result.resampled, [False, True, False, True])
    np.testing.assert_array_equal(result.num_active, [64, 64, 128, 128])
    assert bool(result.active.all())
    # Each particle's log p, accumulated from cached logits across two cache gathers, equals a fresh forward
    # over its (resampled) token sequence: the caches followed their particles.
    np.testing.assert_allclose(result.cum_log_p, _sequence_log_probs(model, result.tokens).sum(-1), atol=2e-5)
    assert len({tuple(row) for row in np.asarray(result.tokens)}) > 8  # children diverged after resampling


def test_alpha_one_with_the_model_as_proposal_never_resamples(model):
    result = _run(model, alpha=1.0, temperature=1.0, num_particles=32)
    live = np.asarray(result.active)
    assert live.sum() == 32 and not result.resampled.any()
    np.testing.assert_array_equal(np.asarray(result.log_weights)[live], 0.0)
    np.testing.assert_allclose(result.ess, 32.0, rtol=1e-5)
    np.testing.assert_allclose(result.cum_log_p[live], result.cum_log_q[live], atol=1e-6)


@pytest.mark.parametrize("ramp_tokens", [2, 100])
def test_annealed_weights_end_as_alpha_log_p_minus_log_q(model, ramp_tokens):
    # Reaching α within the run (ramp 2) or only by the final catch-up (ramp 100); κ so small it never resamples.
    result = _run(model, alpha=3.0, ramp_tokens=ramp_tokens, ess_threshold=1e-3, collapse_threshold=1e-3)
    assert not result.resampled.any()
    np.testing.assert_allclose(result.log_weights, 3.0 * result.cum_log_p - result.cum_log_q, atol=1e-4)


def test_weighted_particles_estimate_the_power_target_exactly_enumerated(model):
    alpha = 2.0
    sequences = jnp.asarray(list(itertools.product(range(VOCAB), repeat=NEW)), jnp.int32)  # [V^NEW, NEW]
    log_p = np.asarray(_sequence_log_probs(model, sequences).sum(-1), np.float64)
    power = np.exp(alpha * (log_p - log_p.max()))
    power /= power.sum()
    first = np.asarray(sequences[:, 0])
    mode = int(np.argmax(np.bincount(first, weights=power, minlength=VOCAB)))
    exact, under_p = power[first == mode].sum(), np.exp(log_p)[first == mode].sum()
    assert exact - under_p > 0.1  # the test separates p^α from p
    estimates = []
    for seed in range(6):
        result = _run(model, seed, alpha=alpha)
        weights = np.asarray(jax.nn.softmax(result.log_weights))
        estimates.append(weights[np.asarray(result.tokens[:, 0]) == mode].sum())
    assert abs(np.mean(estimates) - exact) < 0.04, (np.mean(estimates), exact, under_p)


def test_finished_particles_keep_their_weight_and_repeat_eos(model):
    eos = int(jnp.argmax(model(PROMPT[None])[0, -1]))  # the likeliest first token, so many particles finish
    result = _run(model, alpha=2.0, eos_id=eos, ess_threshold=1e-3, collapse_threshold=1e-3)
    tokens = np.asarray(result.tokens)
    finished = np.cumsum(tokens == eos, axis=1) > 0
    assert finished[:, 0].sum() > 10 and not result.resampled.any()
    assert (tokens[finished] == eos).all()
    # Weights and log-probabilities stop at the EOS: only tokens up to and including it count.
    counted = np.concatenate([np.ones((tokens.shape[0], 1), bool), ~finished[:, :-1]], axis=1)
    log_p = np.where(counted, np.asarray(_sequence_log_probs(model, result.tokens)), 0.0).sum(-1)
    np.testing.assert_allclose(result.cum_log_p, log_p, atol=2e-5)
    np.testing.assert_allclose(result.log_weights, 2.0 * result.cum_log_p - result.cum_log_q, atol=1e-4)


def test_numeric_settings_share_one_compiled_sampler(model):
    _run(model)
    compiled = _asmc._cache_size()
    _run(model, alpha=5.0, temperature=0.7, ess_threshold=0.9, num_particles=3, ramp_tokens=3, eos_id=2,
         min_new_tokens=1, collapse_threshold=0.2, growth_factor=3)
    assert _asmc._cache_size() == compiled


def test_proposal_is_the_tempered_truncated_softmax_with_banned_tokens():
    logits = jnp.asarray([[2.0, 1.0, 0.5, -1.0, 0.0]])
    banned = jnp.asarray([False, True, False, False, False])
    log_q = proposal_log_probs(logits, temperature=0.5, top_k=3, top_p=None, banned=banned)
    kept = np.exp(np.asarray([4.0, 1.0]))  # tokens 0 and 2 of the top 3 {0, 1, 2}, token 1 banned
    np.testing.assert_allclose(np.exp(log_q[0]), [kept[0] / kept.sum(), 0, kept[1] / kept.sum(), 0, 0], atol=1e-6)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"num_particles": 0}, "num_particles must be an integer >= 1, got 0"),
        ({"num_particles": 8, "max_particles": 4}, "max_particles must be an integer >= 8, got 4"),
        ({"ess_threshold": 0.0}, r"ess_threshold must be a number in \(0, 1\], got 0.0"),
        ({"ess_threshold": 1.5}, "ess_threshold"),
        ({"alpha": 0.0}, r"alpha \(the power of the target p\^alpha\) must be a finite positive number, got 0.0"),
        ({"alpha": -2.0}, "alpha"),
        ({"temperature": 0.0}, "temperature must be a finite positive number, got 0.0"),
        ({"top_p": 1.5}, r"top_p must be a number in \(0, 1\], got 1.5"),
        ({"block_size": 0}, "block_size"),
        ({"scheme": "stratified"}, "scheme must be one of"),
        ({"collapse_threshold": 0.0}, "collapse_threshold"),
        ({"growth_factor": 1}, "growth_factor"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_bad_config_raises_naming_the_field(fields, match):
    with pytest.raises(ValueError, match=match):
        ASMCConfig(**{"max_new_tokens": 4, **fields})


def test_bad_decode_input_raises_naming_the_argument(model):
    config = ASMCConfig(max_new_tokens=4, num_particles=4)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"prompt must be an integer array of shape \[P\]"):
        asmc_decode(model, PROMPT[None], key=key, config=config)
    with pytest.raises(ValueError, match="max_seq_len = 16"):
        asmc_decode(model, jnp.zeros(14, jnp.int32), key=key, config=config)
    with pytest.raises(ValueError, match=r"top_k must be in \[1, 16\]"):
        asmc_decode(model, PROMPT, key=key, config=ASMCConfig(max_new_tokens=4, top_k=17))
    with pytest.raises(ValueError, match=r"eos_id must be in \[0, 16\)"):
        asmc_decode(model, PROMPT, key=key, config=ASMCConfig(max_new_tokens=4, eos_id=16))
    with pytest.raises(ValueError, match="cache must hold one row per particle: ancestors has 3 particles, but the "
                                         "cache's batch_size is 4"):
        reorder_cache(model, model.init_cache(4, 8), jnp.zeros(3, jnp.int32))
