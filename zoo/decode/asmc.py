"""ASMC: sequential Monte Carlo decoding toward the power-shaped target p(y | x)^α, with cache-coherent resampling.

ASMC (ICML 2026; docs/papers/asmc.md) runs N particles in parallel. The paper's code was not available; the target,
weights, annealing and block resampling follow the closest public implementation of the same method
(Power-SMC, Azizi et al., arXiv 2602.10273), and the adaptive population is a reconstruction (`ASMCConfig`).

Per particle i and token y_t ~ q(· | prefix), the log-weight grows by α_t log p(y_t | ·) − log q(y_t | ·), so
that w_i = p(prefix)^{α_t} / q(prefix) (when α_t changes, (α_t − α_{t−1}) · log p(prefix) is added first).
Particles that emitted EOS are frozen: they repeat EOS with no weight increment. Every `block_size` tokens and
after the last one, if ESS = 1 / Σ w̄² < κ N the population is resampled (`zoo.decode.resampling`) and every
particle-bound tensor (decode cache leaves, tokens, weights, log-probabilities, RNG keys) is gathered by
ancestry (`zoo.decode.asmc_cache`): no prefix is recomputed. The prompt is prefilled once at batch 1 and its
cache broadcast to the particles. The whole generation is one jitted `lax.scan` of fixed shape.

Example::

    from icml26zoo.decode.asmc import ASMCConfig, asmc_decode
    result = asmc_decode(model, prompt, key=jax.random.key(0),
                         config=ASMCConfig(max_new_tokens=32, num_particles=16, alpha=4.0, block_size=8))
    result.sample            # [T] one particle drawn in proportion to its final weight
    result.ess / result.num_active   # [T] the ESS trace, as a fraction of the live population
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.decode.asmc_cache import broadcast_cache, gather_particles, particle_axes
from icml26zoo.decode.asmc_config import ASMCConfig, annealed_alpha, dynamic_settings, static_structure
from icml26zoo.decode.resampling import RESAMPLERS, effective_sample_size
from icml26zoo.decode.sampling import sampling_logits

__all__ = ["ASMCConfig", "ASMCResult", "Particles", "asmc_decode", "proposal_log_probs"]


class Particles(NamedTuple):
    """The sampler's particle-bound state, every leaf [N_max, ...] along axis 0 (gathered on resampling)."""

    tokens: jax.Array  # [N, T] int32 emitted tokens (0 where not yet written)
    next_logits: jax.Array  # [N, V] float32 the model's logits for the next token
    log_weights: jax.Array  # [N] float32, -inf for inactive particles
    cum_log_p: jax.Array  # [N] float32 log p(prefix)
    cum_log_q: jax.Array  # [N] float32 log q(prefix)
    done: jax.Array  # [N] bool: emitted EOS
    keys: jax.Array  # [N] per-particle PRNG keys


class ASMCResult(NamedTuple):
    """What `asmc_decode` returns (N = config.capacity, T = max_new_tokens)."""

    tokens: jax.Array  # [N, T] int32 every particle's continuation
    log_weights: jax.Array  # [N] float32 final log-weights (-inf: inactive)
    active: jax.Array  # [N] bool: particles of the final population
    cum_log_p: jax.Array  # [N] float32 log p(continuation | prompt) under the model
    cum_log_q: jax.Array  # [N] float32 log q(continuation | prompt) under the proposal
    sample: jax.Array  # [T] int32 one particle drawn in proportion to its final weight
    ess: jax.Array  # [T] float32 ESS after each token (before any resampling at that token)
    num_active: jax.Array  # [T] int32 live particles when the ESS was measured
    resampled: jax.Array  # [T] bool: the population was resampled after this token
    ancestors: jax.Array  # [T, N] int32 ancestry after each token (the identity where not resampled)


def proposal_log_probs(logits: jax.Array, *, temperature: jax.Array | float, top_k: int | None,
                       top_p: float | None, banned: jax.Array | None = None) -> jax.Array:
    """logits [N, V] -> log q [N, V]: softmax(logits / temperature), top-k / top-p truncated, banned ids at -inf.

    banned: [V] bool of tokens the proposal must not emit (EOS before min_new_tokens), or None.
    """
    scaled = logits.astype(jnp.float32) / temperature
    filtered = sampling_logits(scaled, temperature=1.0, top_k=top_k, top_p=top_p)
    if banned is not None:
        filtered = jnp.where(banned, -jnp.inf, filtered)
    return jax.nn.log_softmax(filtered, axis=-1)


def _initial_log_weights(active: jax.Array) -> jax.Array:
    """[N] float32: 0 for live particles, -inf (weight 0) for inactive ones."""
    return jnp.where(active, 0.0, -jnp.inf).astype(jnp.float32)


def _take_rows(tree: Any, ancestors: jax.Array) -> Any:
    # Plain indexing rather than jnp.take: it also gathers typed PRNG key arrays.
    return jax.tree.map(lambda x: x[ancestors], tree)


Settings = dict[str, jax.Array]


def _sample_tokens(particles: Particles, config: ASMCConfig, settings: Settings, alpha_t: jax.Array,
                   step: jax.Array):
    """One token per particle: (new keys, tokens [N], log p [N], log q [N]) of the token drawn from q."""
    vocab = particles.next_logits.shape[-1]
    eos = settings["eos_id"]
    banned = (jnp.arange(vocab) == eos) & (step < settings["min_new_tokens"])
    temperature = 1.0 / alpha_t if config.temperature is None else settings["temperature"]
    log_q = proposal_log_probs(particles.next_logits, temperature=temperature, top_k=config.top_k,
                               top_p=config.top_p, banned=banned)
    log_p = jax.nn.log_softmax(particles.next_logits, axis=-1)
    split = jax.vmap(jax.random.split)(particles.keys)
    tokens = jax.vmap(jax.random.categorical)(split[:, 1], log_q).astype(jnp.int32)
    tokens = jnp.where(particles.done, eos, tokens)
    pick = functools.partial(jnp.take_along_axis, indices=tokens[:, None], axis=-1)
    return split[:, 0], tokens, pick(log_p)[:, 0], pick(log_q)[:, 0]


def _extend(particles: Particles, config: ASMCConfig, settings: Settings, step: jax.Array,
            alpha_prev: jax.Array) -> Particles:
    """Anneals, draws token `step` for every particle and updates weights and log-probabilities (no decode)."""
    alpha_t = annealed_alpha(settings["alpha"], settings["ramp_tokens"], step + 1)
    # Catch-up first: the weight must be p(prefix)^{α_t} / q(prefix) before the new token's increment.
    log_w = particles.log_weights + (alpha_t - alpha_prev) * particles.cum_log_p
    keys, tokens, log_p, log_q = _sample_tokens(particles, config, settings, alpha_t, step)
    live = ~particles.done
    log_w = log_w + jnp.where(live, alpha_t * log_p - log_q, 0.0)
    return particles._replace(
        tokens=particles.tokens.at[:, step].set(tokens), log_weights=log_w, keys=keys,
        done=particles.done | (tokens == settings["eos_id"]),
        cum_log_p=particles.cum_log_p + jnp.where(live, log_p, 0.0),
        cum_log_q=particles.cum_log_q + jnp.where(live, log_q, 0.0),
    )


def _resample_plan(log_w: jax.Array, active: jax.Array, config: ASMCConfig, settings: Settings, key: jax.Array):
    """(resample?, ancestors [N], new active count) from the ESS and the collapse rule."""
    count = active.sum().astype(jnp.int32)
    fraction = effective_sample_size(log_w) / count.astype(jnp.float32)
    grow = (fraction < settings["collapse_threshold"]) & (count < config.capacity)
    new_count = jnp.where(grow, jnp.minimum(count * settings["growth_factor"], config.capacity), count)
    resample = grow | (fraction < settings["ess_threshold"])
    ancestors = RESAMPLERS[config.scheme](key, log_w, new_count)
    return resample, ancestors, new_count.astype(jnp.int32)


def _apply_resampling(particles, cache, active, ancestors, new_count, cache_axes):
    """Cache-coherent resampling: gather particles and cache rows by ancestry; weights restart at 0."""
    capacity = ancestors.shape[0]
    particles = _take_rows(particles, ancestors)
    cache = cache.replace(layers=gather_particles(cache.layers, ancestors, cache_axes))
    active = jnp.arange(capacity) < new_count
    # Children of one ancestor hold copies of its key: fold in the slot so their futures differ.
    keys = jax.vmap(jax.random.fold_in)(particles.keys, jnp.arange(capacity))
    particles = particles._replace(keys=keys, log_weights=_initial_log_weights(active))
    return particles, cache, active


def _initial_particles(logits: jax.Array, settings: Settings, key: jax.Array, capacity: int, steps: int):
    active = jnp.arange(capacity) < settings["num_particles"]
    zeros = jnp.zeros((capacity,), jnp.float32)
    particles = Particles(
        tokens=jnp.zeros((capacity, steps), jnp.int32), done=jnp.zeros((capacity,), bool),
        next_logits=jnp.broadcast_to(logits[0, -1], (capacity, logits.shape[-1])).astype(jnp.float32),
        log_weights=_initial_log_weights(active), cum_log_p=zeros, cum_log_q=zeros,
        keys=jax.random.split(key, capacity),
    )
    return particles, active


@functools.partial(jax.jit, static_argnames=("graphdef", "config"))
def _asmc(graphdef: nnx.GraphDef, params: nnx.State, prompt: jax.Array, key: jax.Array, settings: Settings, *,
          config: ASMCConfig) -> ASMCResult:
    """The sampler; `config` holds only the compile-time structure (`static_structure`), `settings` the rest."""
    capacity, steps = config.capacity, config.max_new_tokens
    model = nnx.merge(graphdef, params)
    max_len = prompt.shape[0] + steps
    logits, cache = model.decode(prompt[None], model.init_cache(1, max_len))
    cache = broadcast_cache(model, cache, capacity)
    cache_axes = particle_axes(model, max_len)
    particle_key, resample_key, pick_key = jax.random.split(key, 3)
    particles, active = _initial_particles(logits, settings, particle_key, capacity, steps)

    def step_fn(carry, step):
        particles, cache, active, alpha_prev = carry
        particles = _extend(particles, config, settings, step, alpha_prev)
        alpha_t = annealed_alpha(settings["alpha"], settings["ramp_tokens"], step + 1)
        last = step == steps - 1
        # After the last token, any remaining catch-up to the final α.
        final_alpha = jnp.where(last, settings["alpha"], alpha_t)
        particles = particles._replace(
            log_weights=particles.log_weights + (final_alpha - alpha_t) * particles.cum_log_p)
        step_model = nnx.merge(graphdef, params)
        next_logits, cache = step_model.decode(particles.tokens[:, step, None], cache)
        particles = particles._replace(next_logits=next_logits[:, 0])
        plan_key = jax.random.fold_in(resample_key, step)
        resample, ancestors, new_count = _resample_plan(particles.log_weights, active, config, settings, plan_key)
        resample = resample & (((step + 1) % config.block_size == 0) | last)
        ess, count = effective_sample_size(particles.log_weights), active.sum().astype(jnp.int32)
        particles, cache, active = jax.lax.cond(
            resample, lambda p, c, a: _apply_resampling(p, c, a, ancestors, new_count, cache_axes),
            lambda p, c, a: (p, c, a), particles, cache, active,
        )
        ancestry = jnp.where(resample, ancestors, jnp.arange(capacity, dtype=jnp.int32))
        return (particles, cache, active, final_alpha), (ess, count, resample, ancestry)

    alpha_0 = annealed_alpha(settings["alpha"], settings["ramp_tokens"], 0)
    (particles, _, active, _), trace = jax.lax.scan(
        step_fn, (particles, cache, active, alpha_0), jnp.arange(steps, dtype=jnp.int32)
    )
    chosen = jax.random.categorical(pick_key, particles.log_weights)
    return ASMCResult(
        tokens=particles.tokens, log_weights=particles.log_weights, active=active, cum_log_p=particles.cum_log_p,
        cum_log_q=particles.cum_log_q, sample=particles.tokens[chosen], ess=trace[0], num_active=trace[1],
        resampled=trace[2], ancestors=trace[3],
    )


def _check_prompt(prompt: Any, model: nnx.Module, config: ASMCConfig) -> None:
    if not hasattr(prompt, "dtype") or not jnp.issubdtype(prompt.dtype, jnp.integer) or prompt.ndim != 1:
        raise ValueError(f"prompt must be an integer array of shape [P] (one prompt shared by the particles), got "
                         f"{getattr(prompt, 'dtype', type(prompt))} with shape {getattr(prompt, 'shape', None)}")
    if prompt.shape[0] < 1:
        raise ValueError("prompt must hold at least one token, got shape (0,)")
    needed = prompt.shape[0] + config.max_new_tokens
    if needed > model.cfg.max_seq_len:
        raise ValueError(f"prompt of shape {prompt.shape} plus max_new_tokens = {config.max_new_tokens} needs "
                         f"{needed} positions, more than the model's max_seq_len = {model.cfg.max_seq_len}")


def asmc_decode(model: nnx.Module, prompt: jax.Array, *, key: jax.Array, config: ASMCConfig) -> ASMCResult:
    """Particle decoding of config.max_new_tokens tokens after prompt [P] int toward p(y | prompt)^α.

    `model` is any registered LM (`init_cache` / `decode`). Compiled once per model graph, prompt length and
    config structure (capacity, max_new_tokens, block_size, scheme, top_k, top_p, whether temperature is None):
    the numeric settings (alpha, temperature, thresholds, num_particles, ramp, EOS) are traced arguments.
    Raises ValueError naming the argument for a bad prompt, config or a config that does not fit the model.
    """
    if not isinstance(config, ASMCConfig):
        raise ValueError(f"config must be an ASMCConfig, got {type(config).__name__}")
    config.check_vocabulary(model.cfg.vocab_size)
    _check_prompt(prompt, model, config)
    graphdef, params = nnx.split(model, nnx.Param)
    return _asmc(graphdef, params, prompt.astype(jnp.int32), key, dynamic_settings(config),
                 config=static_structure(config))
