"""Pieces of the Mamba2 mixer (zoo/mixers/mamba2.py): its options and parameter initializers (the short
causal convolution is zoo.layers.short_conv). Pure functions, tested on their own.

Mamba2 (Dao & Gu, arXiv 2405.21060) as in `mamba2_simple.py`, and the generalized diagonal variant (Hu et al.,
"On Structured State-Space Duality", arXiv 2510.04944).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from icml26zoo.kernels.ssd import CHUNK_SIZES
from icml26zoo.layers.options import check_choice, check_implementation
from icml26zoo.mixers.base import read_mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.validation import check_positive

DECAYS = ("scalar", "diagonal")
IMPLEMENTATIONS = ("reference", "xla", "attention", "pallas")


@dataclasses.dataclass(frozen=True)
class Mamba2Options:
    """The Mamba2 mixer's `cfg.mixer_options`, validated (see `parse_options`)."""

    decay: str = "scalar"  # "scalar": A_log [H] (Mamba2); "diagonal": A_log [H, N] (generalized SSD)
    expand: int = 2  # d_inner = expand * d_model
    head_dim: int | None = None  # P; None = cfg.resolved_head_dim. Heads H = d_inner / P
    state_size: int = 16  # N (EDEN's small-scale setting)
    num_groups: int = 1  # G: heads of a group share B and C; must divide H
    conv_size: int = 4  # width of the causal depthwise conv over x, B, C
    chunk_size: int = 64  # the chunk of the SSD op (one of kernels.ssd.CHUNK_SIZES)
    implementation: str | tuple[str, ...] | None = None  # the SSD op's `implementation=`: None = best for the backend
    dt_min: float = 1e-3  # range of the initial Δ (dt_bias init, as in mamba2_simple.py)
    dt_max: float = 1e-1


def _fail(name: str, expected: str, value: Any) -> None:
    raise ValueError(f"mamba2 mixer option {name!r} must be {expected}, got {value!r}")


def check_dt_range(owner: str, dt_min: float, dt_max: float) -> None:
    """Raises ValueError naming the option unless 0 < dt_min <= dt_max (the initial Δ range)."""
    for name, value in (("dt_min", dt_min), ("dt_max", dt_max)):
        check_positive(f"{owner} option {name!r}", value)
    if dt_min > dt_max:
        raise ValueError(f"{owner} option 'dt_min' must be <= dt_max = {dt_max}, got {dt_min!r}")


def parse_options(cfg: ModelConfig) -> Mamba2Options:
    """Reads and validates the Mamba2 options of `cfg`; a bad name or value raises ValueError naming it."""
    values = read_mixer_options(cfg, "mamba2", Mamba2Options)
    check_choice("mamba2 mixer", "decay", values["decay"], DECAYS)
    if values["head_dim"] is None:
        values["head_dim"] = cfg.resolved_head_dim
    for name in ("expand", "head_dim", "state_size", "num_groups", "conv_size"):
        if values[name] < 1:
            _fail(name, "an integer >= 1", values[name])
    check_choice("mamba2 mixer", "chunk_size", values["chunk_size"], CHUNK_SIZES)
    check_implementation("mamba2 mixer", values["implementation"], IMPLEMENTATIONS)
    check_dt_range("mamba2 mixer", values["dt_min"], values["dt_max"])
    d_inner = values["expand"] * cfg.d_model
    if d_inner % values["head_dim"]:
        _fail("head_dim", f"a divisor of d_inner = expand * d_model = {d_inner}", values["head_dim"])
    heads = d_inner // values["head_dim"]
    if heads % values["num_groups"]:
        _fail("num_groups", f"a divisor of the number of heads H = d_inner / head_dim = {heads}",
              values["num_groups"])
    return Mamba2Options(**values)


def init_dt_bias(key: jax.Array, heads: int, dt_min: float, dt_max: float, floor: float = 1e-4) -> jax.Array:
    """[H] float32: softplus⁻¹(Δ₀) with Δ₀ log-uniform in [dt_min, dt_max], floored (mamba2_simple.py).

    So that softplus(0 + dt_bias) = Δ₀ at init: each head starts with its own time scale.
    """
    u = jax.random.uniform(key, (heads,), jnp.float32)
    dt = jnp.exp(u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    dt = jnp.maximum(dt, floor)
    return dt + jnp.log(-jnp.expm1(-dt))  # inverse of softplus, stable for small dt


def init_a_log(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """`shape` ([H] scalar decay, [H, N] diagonal) float32: log A with A ~ U(1, 16) (mamba2_simple.py)."""
    return jnp.log(jax.random.uniform(key, shape, jnp.float32, 1.0, 16.0))
