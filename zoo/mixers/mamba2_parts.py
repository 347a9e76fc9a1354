"""Pieces of the Mamba2 mixer (zoo/mixers/mamba2.py): its options, parameter initializers and the short
causal depthwise convolution with segment resets and a decode state. Pure functions, tested on their own.

Spec: specs/mixers-03-ssd.md §4 (Mamba2 layer, init table) and the "generalized diagonal Mamba2" variant.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from kernels.ssd import CHUNK_SIZES
from zoo.mixers.base import read_mixer_options
from zoo.models.config import ModelConfig

DECAYS = ("scalar", "diagonal")
IMPLEMENTATIONS = ("reference", "xla", "attention", "pallas")


@dataclasses.dataclass(frozen=True)
class Mamba2Options:
    """The Mamba2 mixer's `cfg.mixer_options`, validated (see `parse_options`)."""

    decay: str = "scalar"  # "scalar": A_log [H] (Mamba2); "diagonal": A_log [H, N] (generalized SSD)
    expand: int = 2  # d_inner = expand * d_model
    head_dim: int | None = None  # P; None = cfg.resolved_head_dim. Heads H = d_inner / P
    state_size: int = 16  # N (spec 06's small-scale setting)
    num_groups: int = 1  # G: heads of a group share B and C (spec 03 §4); must divide H
    conv_size: int = 4  # width of the causal depthwise conv over x, B, C
    chunk_size: int = 64  # the chunk of the SSD op (one of kernels.ssd.CHUNK_SIZES)
    implementation: Any = None  # the SSD op's `implementation=`: None = best for the backend
    dt_min: float = 1e-3  # range of the initial Δ (dt_bias init, spec 03 §4)
    dt_max: float = 1e-1


def _fail(name: str, expected: str, value: Any) -> None:
    raise ValueError(f"mamba2 mixer option {name!r} must be {expected}, got {value!r}")


def _check_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(name, f"an integer >= {minimum}", value)


def _check_implementation(value: Any) -> None:
    names = (value,) if isinstance(value, str) else value
    ok = value is None or (isinstance(names, tuple | list) and names and all(n in IMPLEMENTATIONS for n in names))
    if not ok:
        _fail("implementation", f"None, one of {list(IMPLEMENTATIONS)} or a sequence of those", value)


def _check_dt_range(dt_min: Any, dt_max: Any) -> None:
    for name, value in (("dt_min", dt_min), ("dt_max", dt_max)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            _fail(name, "a positive number", value)
    if dt_min > dt_max:
        _fail("dt_min", f"<= dt_max = {dt_max}", dt_min)


def parse_options(cfg: ModelConfig) -> Mamba2Options:
    """Reads and validates the Mamba2 options of `cfg`; a bad name or value raises ValueError naming it."""
    values = read_mixer_options(cfg, "mamba2", Mamba2Options())
    if values["decay"] not in DECAYS:
        _fail("decay", f"one of {list(DECAYS)}", values["decay"])
    if values["head_dim"] is None:
        values["head_dim"] = cfg.resolved_head_dim
    for name in ("expand", "head_dim", "state_size", "num_groups", "conv_size"):
        _check_int(name, values[name])
    if values["chunk_size"] not in CHUNK_SIZES:
        _fail("chunk_size", f"one of {list(CHUNK_SIZES)}", values["chunk_size"])
    _check_implementation(values["implementation"])
    _check_dt_range(values["dt_min"], values["dt_max"])
    d_inner = values["expand"] * cfg.d_model
    if d_inner % values["head_dim"]:
        _fail("head_dim", f"a divisor of d_inner = expand * d_model = {d_inner}", values["head_dim"])
    heads = d_inner // values["head_dim"]
    if heads % values["num_groups"]:
        _fail("num_groups", f"a divisor of the number of heads H = d_inner / head_dim = {heads}",
              values["num_groups"])
    return Mamba2Options(**values)


def init_dt_bias(key: jax.Array, heads: int, dt_min: float, dt_max: float, floor: float = 1e-4) -> jax.Array:
    """[H] float32: softplus⁻¹(Δ₀) with Δ₀ log-uniform in [dt_min, dt_max], floored (spec 03 §4).

    So that softplus(0 + dt_bias) = Δ₀ at init: each head starts with its own time scale.
    """
    u = jax.random.uniform(key, (heads,), jnp.float32)
    dt = jnp.exp(u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    dt = jnp.maximum(dt, floor)
    return dt + jnp.log(-jnp.expm1(-dt))  # inverse of softplus, stable for small dt


def init_a_log(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """`shape` ([H] scalar decay, [H, N] diagonal) float32: log A with A ~ U(1, 16) (spec 03 §4)."""
    return jnp.log(jax.random.uniform(key, shape, jnp.float32, 1.0, 16.0))


def init_conv(key: jax.Array, width: int, channels: int) -> tuple[jax.Array, jax.Array]:
    """Depthwise conv weight [K, C] and bias [C], U(±1/√K): PyTorch's Conv1d default (fan-in K per channel)."""
    bound = 1.0 / math.sqrt(width)
    wkey, bkey = jax.random.split(key)
    weight = jax.random.uniform(wkey, (width, channels), jnp.float32, -bound, bound)
    bias = jax.random.uniform(bkey, (channels,), jnp.float32, -bound, bound)
    return weight, bias


def causal_conv(
    u: jax.Array,
    weight: jax.Array,
    bias: jax.Array,
    *,
    segment_ids: jax.Array | None = None,
    state: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Causal depthwise convolution y_t = bias + Σ_{j<K} weight[K−1−j] · u_{t−j}, per channel.

    Args:
      u: [B, T, C] inputs; weight: [K, C] (weight[K−1] multiplies the current token); bias: [C].
      segment_ids: [B, T] int or None. u_{t−j} contributes only when it lies in t's segment, so nothing
        crosses a packed-segment boundary. Tokens of the `state` belong to each row's first segment (as
        the SSD op's initial state does).
      state: [B, K−1, C] the previous K−1 inputs (oldest first), or None (zeros: a new sequence).
    Returns:
      y [B, T, C] float32 and the new state [B, K−1, C] (the last K−1 inputs, history included) in the
      dtype of `state` (of u when None). Decoding in pieces with the state equals one full call.
    """
    batch, length, channels = u.shape
    width = weight.shape[0]
    if weight.shape != (width, channels) or bias.shape != (channels,):
        raise ValueError(f"weight must be [K, {channels}] and bias [{channels}], got {weight.shape}, {bias.shape}")
    if state is None:
        state = jnp.zeros((batch, width - 1, channels), u.dtype)
    if state.shape != (batch, width - 1, channels):
        raise ValueError(f"state must have shape {(batch, width - 1, channels)}, got {state.shape}")
    full = jnp.concatenate([state.astype(u.dtype), u], axis=1)  # [B, K−1+T, C]
    w32 = weight.astype(jnp.float32)
    y = jnp.broadcast_to(bias.astype(jnp.float32), (batch, length, channels))
    for lag in range(width):
        start = width - 1 - lag
        term = full[:, start : start + length].astype(jnp.float32) * w32[width - 1 - lag]
        if segment_ids is not None and lag > 0:
            term = jnp.where(_same_segment(segment_ids, lag)[..., None], term, 0.0)
        y = y + term
    return y, full[:, length:].astype(state.dtype)


def _same_segment(segment_ids: jax.Array, lag: int) -> jax.Array:
    """[B, T] bool: token t−lag is in t's segment; for t < lag the history counts as the row's first segment."""
    earlier = jnp.concatenate(
        [jnp.broadcast_to(segment_ids[:, :1], (segment_ids.shape[0], lag)), segment_ids[:, :-lag]], axis=1
    )[:, : segment_ids.shape[1]]
    return earlier == segment_ids
