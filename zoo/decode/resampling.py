"""Resampling for sequential Monte Carlo: normalized weights, the effective sample size, and three schemes.

Each scheme is a pure function `(key, log_weights [N]) -> ancestors [N] int32`: particle i of the next
generation continues particle `ancestors[i]`. All three are unbiased: particle j's expected number of
offspring is N·w̄_j, with w̄ = softmax(log_weights). They differ in variance: multinomial draws N independent
ancestors; systematic resampling (one shared uniform u₀, positions (u₀ + i)/N on the weights' CDF) gives
every particle ⌊N w̄_j⌋ or ⌈N w̄_j⌉ children; residual resampling keeps ⌊N w̄_j⌋ copies deterministically and
draws the remaining ones multinomially from the fractional parts.

`num_offspring` M ≤ N (a Python int or a traced int32 scalar, for adaptive populations held in fixed-size
arrays) draws M children instead of N: slots [0, M) hold them, with expected counts M·w̄_j; slots [M, N) hold
valid but meaningless indices that the caller masks out. Entries of -inf (inactive particles) have weight 0 and
are never drawn. Log-weights are handled in float32 and normalized with logsumexp.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_int

__all__ = ["RESAMPLERS", "effective_sample_size", "multinomial_resample", "normalized_weights",
           "offspring_counts", "residual_resample", "systematic_resample"]

Resampler = Callable[..., jax.Array]

# Slack for ⌊M w̄⌋ in residual resampling: float32 rounding must not turn an exact 1.0 into 0.99999994.
_FLOOR_SLACK = 1e-5


def _check_log_weights(log_weights: jax.Array) -> None:
    shape = getattr(log_weights, "shape", None)
    if shape is None or len(shape) != 1 or shape[0] < 1 or not jnp.issubdtype(log_weights.dtype, jnp.floating):
        raise ValueError(
            f"log_weights must be a float array of shape [N] with N >= 1, got "
            f"{getattr(log_weights, 'dtype', type(log_weights))} with shape {shape}"
        )


def _offspring_total(num_offspring: int | jax.Array | None, size: int) -> jax.Array:
    if num_offspring is None:
        return jnp.asarray(size, jnp.int32)
    if isinstance(num_offspring, int):  # a traced count is not checked
        check_int("num_offspring", num_offspring)
        if num_offspring > size:
            raise ValueError(f"num_offspring must be at most {size} (the number of particles), got {num_offspring}")
    return jnp.asarray(num_offspring, jnp.int32)


def normalized_weights(log_weights: jax.Array) -> jax.Array:
    """log_weights [N] -> w̄ [N] float32, summing to 1 (softmax; -inf entries get weight 0)."""
    _check_log_weights(log_weights)
    return jax.nn.softmax(log_weights.astype(jnp.float32))


def effective_sample_size(log_weights: jax.Array) -> jax.Array:
    """ESS = 1 / Σ w̄_i² of log_weights [N], a float32 scalar in [1, number of finite entries].

    Computed as exp(2·logsumexp(ℓ) − logsumexp(2ℓ)), so adding a constant to every log-weight changes nothing.
    """
    _check_log_weights(log_weights)
    log_w = log_weights.astype(jnp.float32)
    # Relative to the largest entry: large offsets would otherwise cost float32 digits in the logsumexps.
    log_w = log_w - jax.lax.stop_gradient(jnp.max(log_w))
    return jnp.exp(2 * jax.nn.logsumexp(log_w) - jax.nn.logsumexp(2 * log_w))


def offspring_counts(ancestors: jax.Array, num_particles: int) -> jax.Array:
    """ancestors [..., M] int -> counts [..., num_particles] int32: how many children each particle has."""
    one_hot = jax.nn.one_hot(ancestors, num_particles, dtype=jnp.int32)
    return one_hot.sum(axis=-2)


def multinomial_resample(key: jax.Array, log_weights: jax.Array,
                         num_offspring: int | jax.Array | None = None) -> jax.Array:
    """N independent draws of an ancestor from w̄: log_weights [N] -> ancestors [N] int32."""
    _check_log_weights(log_weights)
    _offspring_total(num_offspring, log_weights.shape[0])
    # Independent draws: the first M of them are M draws whatever M is.
    return jax.random.categorical(key, log_weights.astype(jnp.float32), shape=log_weights.shape).astype(jnp.int32)


def systematic_resample(key: jax.Array, log_weights: jax.Array,
                        num_offspring: int | jax.Array | None = None) -> jax.Array:
    """One uniform u₀; ancestor i is the particle whose CDF interval holds (u₀ + i)/M. log_weights [N] -> [N]."""
    _check_log_weights(log_weights)
    size = log_weights.shape[0]
    total = _offspring_total(num_offspring, size)
    weights = normalized_weights(log_weights)
    cdf = jnp.cumsum(weights)
    positions = (jax.random.uniform(key, (), jnp.float32) + jnp.arange(size, dtype=jnp.float32)) / total.astype(
        jnp.float32)
    ancestors = jnp.searchsorted(cdf, positions, side="right").astype(jnp.int32)
    # The CDF's last entry may round below 1: a position past it must go to the last particle with weight > 0.
    last_positive = size - 1 - jnp.argmax(weights[::-1] > 0)
    return jnp.minimum(ancestors, last_positive).astype(jnp.int32)


def residual_resample(key: jax.Array, log_weights: jax.Array,
                      num_offspring: int | jax.Array | None = None) -> jax.Array:
    """⌊M w̄_j⌋ deterministic copies of each particle, then multinomial draws from the remainders M w̄ − ⌊M w̄⌋.

    log_weights [N] -> ancestors [N] int32; the deterministic copies come first, in particle order.
    """
    _check_log_weights(log_weights)
    size = log_weights.shape[0]
    total = _offspring_total(num_offspring, size)
    scaled = normalized_weights(log_weights) * total.astype(jnp.float32)
    copies = jnp.floor(scaled + _FLOOR_SLACK)
    deterministic = jnp.repeat(jnp.arange(size, dtype=jnp.int32), copies.astype(jnp.int32),
                               total_repeat_length=size)
    remainders = jnp.clip(scaled - copies, 0.0)
    # All-zero remainders (every M w̄_j an integer) leave no slot for a residual draw; avoid log(0) everywhere.
    residual_logits = jnp.where(remainders > 0, jnp.log(jnp.where(remainders > 0, remainders, 1.0)), -jnp.inf)
    residual_logits = jnp.where(jnp.any(remainders > 0), residual_logits, 0.0)
    draws = jax.random.categorical(key, residual_logits, shape=(size,)).astype(jnp.int32)
    return jnp.where(jnp.arange(size) < copies.sum().astype(jnp.int32), deterministic, draws)


RESAMPLERS: dict[str, Resampler] = {
    "multinomial": multinomial_resample,
    "systematic": systematic_resample,
    "residual": residual_resample,
}
