"""The settings of ASMC particle decoding (docs/papers/asmc.md), checked on construction; the α-annealing
schedule; the split of a config into its compile-time structure and its traced numeric settings."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from icml26zoo.decode.resampling import RESAMPLERS
from icml26zoo.validation import check_choice, check_int, check_interval, check_positive

__all__ = ["ASMCConfig", "annealed_alpha", "dynamic_settings", "static_structure"]


@dataclasses.dataclass(frozen=True)
class ASMCConfig:
    """Particle decoding toward π_α(y | x) ∝ p(y | x)^α. Every field is checked (ValueError names it).

    Population: `num_particles` N₀ particles start; with `max_particles` N_max > N₀ the population grows
    (adaptive, a reconstruction): at a resampling check whose ESS / N falls below `collapse_threshold`, it is
    resampled to min(growth_factor · N, N_max) particles for the rest of the generation. Arrays always hold
    N_max particles, the inactive ones masked, so the compiled shapes never change.

    Proposal: softmax(logits / T) with top-k / top-p truncation (`zoo.decode.sampling.sampling_logits`) and
    EOS banned before `min_new_tokens`; T = `temperature`, or 1 / α_t when None (the variance-minimizing
    prefix-only proposal). With top-k / top-p the sampler targets p^α restricted to the truncated support.

    Resampling: every `block_size` tokens and after the last one, when ESS < `ess_threshold` κ · N, with
    `scheme` ("multinomial", "systematic" or "residual"); log-weights then restart at 0.

    Annealing: α_t = 1 + (α − 1) · min(t / ramp_tokens, 1) after t tokens (ramp_tokens 0: α from the start).
    """

    max_new_tokens: int
    num_particles: int = 32
    max_particles: int | None = None
    alpha: float = 2.0
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    ess_threshold: float = 0.5
    block_size: int = 128
    ramp_tokens: int = 0
    min_new_tokens: int = 0
    eos_id: int | None = None
    scheme: str = "systematic"
    collapse_threshold: float = 0.1
    growth_factor: int = 2

    def __post_init__(self) -> None:
        check_int("max_new_tokens", self.max_new_tokens)
        check_int("num_particles", self.num_particles)
        if self.max_particles is not None:
            check_int("max_particles", self.max_particles, minimum=self.num_particles)
        check_positive("alpha (the power of the target p^alpha)", self.alpha, finite=True)
        if self.temperature is not None:  # None: T = 1 / alpha_t
            check_positive("temperature", self.temperature, finite=True)
        if self.top_k is not None:
            check_int("top_k", self.top_k)
        if self.top_p is not None:
            check_interval("top_p", self.top_p, 0, 1, closed="right")
        check_interval("ess_threshold", self.ess_threshold, 0, 1, closed="right")
        check_int("block_size", self.block_size)
        check_int("ramp_tokens", self.ramp_tokens, minimum=0)
        check_int("min_new_tokens", self.min_new_tokens, minimum=0)
        if self.eos_id is not None:
            check_int("eos_id", self.eos_id, minimum=0)
        check_choice("scheme", self.scheme, sorted(RESAMPLERS))
        check_interval("collapse_threshold", self.collapse_threshold, 0, 1, closed="right")
        check_int("growth_factor", self.growth_factor, minimum=2)

    @property
    def capacity(self) -> int:
        """N_max: the particle axis of every array (num_particles when the population is fixed)."""
        return self.num_particles if self.max_particles is None else self.max_particles

    def check_vocabulary(self, vocab_size: int) -> None:
        """ValueError naming the field when top_k or eos_id does not fit a vocabulary of vocab_size tokens."""
        if self.top_k is not None and self.top_k > vocab_size:
            raise ValueError(f"top_k must be in [1, {vocab_size}] (the model's vocabulary), got {self.top_k}")
        if self.eos_id is not None and self.eos_id >= vocab_size:
            raise ValueError(f"eos_id must be in [0, {vocab_size}) (the model's vocabulary), got {self.eos_id}")


def annealed_alpha(alpha: jax.Array | float, ramp_tokens: jax.Array | int, num_tokens: jax.Array | int) -> jax.Array:
    """α_t = 1 + (α − 1) · min(t / ramp_tokens, 1) after t = num_tokens tokens; α when ramp_tokens is 0.

    Arguments may be traced scalars; returns a float32 scalar.
    """
    alpha = jnp.asarray(alpha, jnp.float32)
    ramp_tokens = jnp.asarray(ramp_tokens, jnp.float32)
    ramp = jnp.minimum(jnp.asarray(num_tokens, jnp.float32) / jnp.maximum(ramp_tokens, 1.0), 1.0)
    return jnp.where(ramp_tokens > 0, 1.0 + (alpha - 1.0) * ramp, alpha)


def dynamic_settings(config: ASMCConfig) -> dict[str, jax.Array]:
    """The numeric fields as traced scalars: configs that differ only in these share one compiled sampler.

    eos_id None becomes -1 (no token matches it); temperature None becomes 0 (1 / α_t is used instead).
    """
    floats = {name: getattr(config, name) for name in ("alpha", "ess_threshold", "collapse_threshold")}
    floats["temperature"] = 0.0 if config.temperature is None else config.temperature
    ints = {name: getattr(config, name) for name in ("num_particles", "ramp_tokens", "min_new_tokens",
                                                     "growth_factor")}
    ints["eos_id"] = -1 if config.eos_id is None else config.eos_id
    settings = {name: jnp.asarray(value, jnp.float32) for name, value in floats.items()}
    settings.update({name: jnp.asarray(value, jnp.int32) for name, value in ints.items()})
    return settings


def static_structure(config: ASMCConfig) -> ASMCConfig:
    """`config` with its numeric fields set to fixed placeholders: the compile-time part (array sizes, block
    size, scheme, truncation, whether T = 1 / α_t)."""
    return dataclasses.replace(
        config, num_particles=1, max_particles=config.capacity, alpha=1.0,
        temperature=None if config.temperature is None else 1.0, ess_threshold=1.0, ramp_tokens=0,
        min_new_tokens=0, eos_id=None, collapse_threshold=1.0, growth_factor=2,
    )
