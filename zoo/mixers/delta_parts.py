"""Pieces shared by the delta-rule mixers (zoo/mixers/delta_net.py): options, the short causal depthwise
(zoo.layers.short_conv), L2 normalization and the gate initializers.

Wiring and init as in flash-linear-attention (DeltaNet arXiv 2406.06484, Gated DeltaNet arXiv 2412.06464).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.kernels.delta_rule import CHUNK_SIZES
from icml26zoo.layers.options import check_choice, check_implementation
from icml26zoo.mixers.base import read_mixer_options
from icml26zoo.models.config import ModelConfig

IMPLEMENTATIONS = ("reference", "xla", "pallas")
SMALL_INIT = nnx.initializers.normal(0.02)  # every projection and the short convs (fla's init)
SAFE_GATE_LOWER_BOUND = -5.0  # KDA's safe gate: g = lb·sigmoid(...) ∈ (−5, 0)
L2_EPS = 1e-6  # added to Σx² before the rsqrt, so an all-zero head maps to 0, not NaN


@dataclasses.dataclass(frozen=True)
class DeltaOptions:
    """The delta-rule mixers' `cfg.mixer_options`, validated (see `parse_options`).

    conv_size: width of the short causal depthwise convolution on q, k and v (4 in fla).
    allow_neg_eigval: β = 2·sigmoid(·) ∈ (0, 2) instead of (0, 1), so I − βk̂k̂ᵀ may have eigenvalue −1..1.
    chunk_size: chunk length of the chunked op (one of kernels.delta_rule.CHUNK_SIZES).
    implementation: the op's `implementation=` (None = best for the backend).
    safe_gate: KDA only, g = −5·sigmoid(exp(A_log)·(f + dt_bias)) instead of −exp(A_log)·softplus(·).
    """

    conv_size: int = 4
    allow_neg_eigval: bool = False
    chunk_size: int = 64
    implementation: str | tuple[str, ...] | None = None
    safe_gate: bool = False


def parse_options(cfg: ModelConfig, mixer: str, *, kda: bool = False) -> DeltaOptions:
    """Validated options of mixer `mixer`; ValueError names any unknown or ill-typed option."""
    values = read_mixer_options(cfg, mixer, DeltaOptions, exclude=() if kda else ("safe_gate",))
    if values["conv_size"] < 2:
        raise ValueError(f"{mixer} mixer option 'conv_size' must be an integer >= 2, got {values['conv_size']!r}")
    check_choice(f"{mixer} mixer", "chunk_size", values["chunk_size"], CHUNK_SIZES)
    check_implementation(f"{mixer} mixer", values["implementation"], IMPLEMENTATIONS)
    return DeltaOptions(**values)


def l2_normalize(x: jax.Array) -> jax.Array:
    """x: [..., K] -> float32 x / sqrt(Σx² + eps) over the last axis (after conv+SiLU, in fp32)."""
    x32 = x.astype(jnp.float32)
    return x32 * jax.lax.rsqrt(jnp.sum(jnp.square(x32), axis=-1, keepdims=True) + L2_EPS)


def init_a_log(key: jax.Array, shape: tuple[int, ...], low: float, high: float) -> jax.Array:
    """log U(low, high) [shape] float32 (fla's init: GDN U(0, 16), KDA U(1, 16)).

    U(0, 16) can draw an exact 0 in float32; the draw is floored at 1e-4 so the log stays finite.
    """
    a = jax.random.uniform(key, shape, jnp.float32, minval=low, maxval=high)
    return jnp.log(jnp.maximum(a, 1e-4))


def init_dt_bias(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """softplus⁻¹(dt) [shape] float32 with dt = exp(U(log 1e-3, log 1e-1)) floored at 1e-4 (fla's init)."""
    log_dt = jax.random.uniform(key, shape, jnp.float32, minval=math.log(1e-3), maxval=math.log(1e-1))
    dt = jnp.maximum(jnp.exp(log_dt), 1e-4)
    return dt + jnp.log(-jnp.expm1(-dt))  # softplus⁻¹(dt) = log(e^dt − 1), written stably
