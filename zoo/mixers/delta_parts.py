"""Pieces shared by the delta-rule mixers (zoo/mixers/delta_net.py): options, the short causal depthwise
convolution with its decode state, L2 normalization, the gated output RMSNorm and the gate initializers.

Spec: specs/mixers-02-mdn-deltanet.md ("Common conventions", §1, §1.2, §4).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from kernels.delta_rule import CHUNK_SIZES
from zoo.mixers.base import read_mixer_options
from zoo.models.config import ModelConfig

IMPLEMENTATIONS = ("reference", "xla", "pallas")
SMALL_INIT = nnx.initializers.normal(0.02)  # spec §1.2: every projection and the short convs
SAFE_GATE_LOWER_BOUND = -5.0  # spec §1 (KDA): g = lb·sigmoid(...) ∈ (−5, 0)
L2_EPS = 1e-6  # added to Σx² before the rsqrt, so an all-zero head maps to 0, not NaN


@dataclasses.dataclass(frozen=True)
class DeltaOptions:
    """The delta-rule mixers' `cfg.mixer_options`, validated (see `parse_options`).

    conv_size: width of the short causal depthwise convolution on q, k and v (spec: 4).
    allow_neg_eigval: β = 2·sigmoid(·) ∈ (0, 2) instead of (0, 1), so I − βk̂k̂ᵀ may have eigenvalue −1..1.
    chunk_size: chunk length of the chunked op (one of kernels.delta_rule.CHUNK_SIZES).
    implementation: the op's `implementation=` (None = best for the backend).
    safe_gate: KDA only, g = −5·sigmoid(exp(A_log)·(f + dt_bias)) instead of −exp(A_log)·softplus(·).
    """

    conv_size: int = 4
    allow_neg_eigval: bool = False
    chunk_size: int = 64
    implementation: Any = None
    safe_gate: bool = False


def _check_bool(mixer: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{mixer} mixer option {name!r} must be a bool, got {value!r}")


def _check_implementation(mixer: str, value: Any) -> None:
    names = (value,) if isinstance(value, str) else value
    ok = value is None or (isinstance(names, tuple | list) and names and all(n in IMPLEMENTATIONS for n in names))
    if not ok:
        raise ValueError(
            f"{mixer} mixer option 'implementation' must be None, one of {list(IMPLEMENTATIONS)} or a "
            f"sequence of those, got {value!r}"
        )


def parse_options(cfg: ModelConfig, mixer: str, *, kda: bool = False) -> DeltaOptions:
    """Validated options of mixer `mixer`; ValueError names any unknown or ill-typed option."""
    known = {f.name for f in dataclasses.fields(DeltaOptions)} - (set() if kda else {"safe_gate"})
    values = read_mixer_options(cfg, mixer, DeltaOptions(), known=known)
    conv_size = values["conv_size"]
    if isinstance(conv_size, bool) or not isinstance(conv_size, int) or conv_size < 2:
        raise ValueError(f"{mixer} mixer option 'conv_size' must be an integer >= 2, got {conv_size!r}")
    if values["chunk_size"] not in CHUNK_SIZES:
        raise ValueError(
            f"{mixer} mixer option 'chunk_size' must be one of {list(CHUNK_SIZES)}, got {values['chunk_size']!r}"
        )
    for name in ("allow_neg_eigval", "safe_gate"):
        if name in values:
            _check_bool(mixer, name, values[name])
    _check_implementation(mixer, values["implementation"])
    if isinstance(values["implementation"], list):
        values["implementation"] = tuple(values["implementation"])  # hashable, like every option
    return DeltaOptions(**values)


def l2_normalize(x: jax.Array) -> jax.Array:
    """x: [..., K] -> float32 x / sqrt(Σx² + eps) over the last axis (spec §4: after conv+SiLU, in fp32)."""
    x32 = x.astype(jnp.float32)
    return x32 * jax.lax.rsqrt(jnp.sum(jnp.square(x32), axis=-1, keepdims=True) + L2_EPS)


class ShortConv(nnx.Module):
    """Causal depthwise convolution of width W over time, no bias, then SiLU ("ShortConvolution").

    y_t[c] = SiLU(Σ_{i=0..W−1} w[W−1−i, c] · x_{t−i}[c]); x_{t−i} counts as zero before the sequence
    start and whenever it lies in another packed segment than x_t, so no token crosses a boundary.
    The decode state is the last W−1 inputs (pre-convolution), [B, W−1, C] in the compute dtype.
    """

    def __init__(self, channels: int, width: int, *, rngs: nnx.Rngs):
        self.width = width
        self.weight = nnx.Param(SMALL_INIT(rngs.params(), (width, channels), jnp.float32))

    def __call__(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, state: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """x: [B, T, C]; segment_ids [B, T] or None; state [B, W−1, C] (decode) or None (zeros).

        Returns (SiLU(conv) [B, T, C] float32, new state [B, W−1, C] in x.dtype: the last W−1 inputs).
        Accumulates in float32 whatever the compute dtype.
        """
        if state is not None and segment_ids is not None:
            raise ValueError("ShortConv takes state (decoding, one sequence per row) or segment_ids, not both")
        batch, length, channels = x.shape
        history = jnp.zeros((batch, self.width - 1, channels), x.dtype) if state is None else state.astype(x.dtype)
        padded = jnp.concatenate([history, x], axis=1)  # [B, W−1+T, C]
        weight = self.weight[...]
        out = jnp.zeros((batch, length, channels), jnp.float32)
        for back in range(self.width):  # tap `back` reads x_{t−back}
            shifted = padded[:, self.width - 1 - back : self.width - 1 - back + length].astype(jnp.float32)
            if segment_ids is not None and back > 0:
                same = jnp.zeros((batch, length), jnp.bool_).at[:, back:].set(
                    segment_ids[:, back:] == segment_ids[:, :-back]
                )
                shifted = jnp.where(same[..., None], shifted, 0.0)
            out = out + weight[self.width - 1 - back] * shifted
        return jax.nn.silu(out), padded[:, length:]


class GatedRMSNorm(nnx.Module):
    """Per-head output RMSNorm over d_v (one scale [d_v] shared by the heads, init 1) times act(gate).

    The gate activation is SiLU for DeltaNet and GDN and sigmoid for KDA (spec, "Common conventions").
    """

    def __init__(self, head_dim: int, *, eps: float, activation: str):
        self.eps, self.activation = eps, activation
        self.scale = nnx.Param(jnp.ones((head_dim,), jnp.float32))

    def __call__(self, o: jax.Array, gate: jax.Array) -> jax.Array:
        """o, gate: [B, T, H, d_v] -> [B, T, H, d_v] in o.dtype; statistics and gating in float32."""
        o32 = o.astype(jnp.float32)
        normed = o32 * jax.lax.rsqrt(jnp.mean(jnp.square(o32), axis=-1, keepdims=True) + self.eps)
        act = jax.nn.silu if self.activation == "silu" else jax.nn.sigmoid
        return (normed * self.scale[...] * act(gate.astype(jnp.float32))).astype(o.dtype)


def init_a_log(key: jax.Array, shape: tuple[int, ...], low: float, high: float) -> jax.Array:
    """log U(low, high) [shape] float32 (spec §1.2: GDN U(0, 16), KDA U(1, 16)).

    U(0, 16) can draw an exact 0 in float32; the draw is floored at 1e-4 so the log stays finite.
    """
    a = jax.random.uniform(key, shape, jnp.float32, minval=low, maxval=high)
    return jnp.log(jnp.maximum(a, 1e-4))


def init_dt_bias(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """softplus⁻¹(dt) [shape] float32 with dt = exp(U(log 1e-3, log 1e-1)) floored at 1e-4 (spec §1.2)."""
    log_dt = jax.random.uniform(key, shape, jnp.float32, minval=math.log(1e-3), maxval=math.log(1e-1))
    dt = jnp.maximum(jnp.exp(log_dt), 1e-4)
    return dt + jnp.log(-jnp.expm1(-dt))  # softplus⁻¹(dt) = log(e^dt − 1), written stably
