"""Pieces of the FiX mixer (zoo/mixers/fix.py): its options, the value-gate initial biases and the bound
on the log value gates. Pure functions, tested through the mixer.

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md); the authors' code was not available,
so every choice below that the abstract does not state is the zoo's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.layers import fp8_scaling
from icml26zoo.layers.options import check_choice, check_implementation
from icml26zoo.longctx import pbs
from icml26zoo.mixers.base import read_mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.validation import check_int, check_interval

VGATES = ("low_rank", "mamba")
CACHES = ("decayed", "pruned")
IMPLEMENTATIONS = ("reference", "xla", "pallas")
# Initial value-gate decay range (long decay times at init): σ(b) ∈ [0.9, 0.999] for
# the low-rank gate, dt ∈ [1e-3, 1e-1] for the Mamba gate, i.e. decay times of about 10 to 1000 tokens.
LOW_RANK_GATE_RANGE = (0.9, 0.999)
MAMBA_DT_RANGE = (1e-3, 1e-1)


@dataclasses.dataclass(frozen=True)
class FixOptions(fp8_scaling.FP8LogitOptions, pbs.PBSPrefillOptions):
    """The FiX mixer's `cfg.mixer_options` (fp8_* and prefill/pbs_* inherited), validated (see `parse_options`)."""

    vgate: str = "low_rank"
    vgate_rank: int = 16  # r of the low-rank gate projection W_up W_down (16 at zoo scale)
    vgate_min: float | None = None  # lower bound of log f (KDA-style safe gate), e.g. −5; None = unbounded
    # Unknown whether FiX keeps FoX's scalar gate; a flag, on by default.
    scalar_gate: bool = True
    rope: bool = False  # like FoX, no positional encoding by default
    output_gate: bool = True  # o ← RMSNorm(u) ⊙ σ(W_g x), FoX-Pro style
    implementation: str | tuple[str, ...] | None = None  # value_forget_attention's; None = best for the backend
    cache: str = "decayed"  # decode cache: "decayed" values or "pruned" slots
    prune_eps: float = 1e-6  # "pruned": a slot is dropped once every channel's decay is below prune_eps
    cache_capacity: int | None = None  # "pruned": slots per row; None = the max_len given to init_cache


def _check_numbers(values: dict[str, Any]) -> None:
    check_int("fix mixer option 'vgate_rank'", values["vgate_rank"])
    if values["vgate_min"] is not None:  # a finite lower bound on log f < 0
        check_interval("fix mixer option 'vgate_min'", values["vgate_min"], -math.inf, 0, closed="neither")
    check_interval("fix mixer option 'prune_eps'", values["prune_eps"], 0, 1, closed="neither")
    if values["cache_capacity"] is not None:
        check_int("fix mixer option 'cache_capacity'", values["cache_capacity"])


def _check_pruning_options(values: dict[str, Any], given: set[str]) -> None:
    """prune_eps and cache_capacity configure the pruned cache only: giving them otherwise is a mistake."""
    for name in ("prune_eps", "cache_capacity"):
        if name in given and values["cache"] != "pruned":
            raise ValueError(
                f"fix mixer option {name!r} ({values[name]!r}) needs cache='pruned', got cache={values['cache']!r}"
            )


def parse_options(cfg: ModelConfig) -> FixOptions:
    """Reads and validates the FiX options of `cfg`; a bad name or value raises ValueError naming it."""
    values = read_mixer_options(cfg, "fix", FixOptions)
    for name, choices in (("vgate", VGATES), ("cache", CACHES)):
        check_choice("fix mixer", name, values[name], choices)
    check_implementation("fix mixer", values["implementation"], IMPLEMENTATIONS)
    _check_numbers(values)
    _check_pruning_options(values, {name for name, _ in cfg.mixer_options})
    fp8_scaling.FP8Logits.from_options("fix mixer", values)
    options = FixOptions(**values)
    pbs.PBSPrefill.from_options("fix mixer", options)
    return options


def low_rank_gate_bias(num_heads: int, head_dim: int) -> np.ndarray:
    """[H·Dv] float32 biases b with σ(b) log-spaced in decay time over the channels of every head.

    Channel c of each head gets the decay time τ_c (log-spaced from −1/log 0.9 ≈ 9.5 to −1/log 0.999 ≈ 1000
    tokens) and b_c = −log(expm1(1/τ_c)), so that log σ(b_c) = −1/τ_c. Every head sees the whole range.
    Computed in float64, then rounded once.
    """
    low, high = (-1.0 / math.log(p) for p in LOW_RANK_GATE_RANGE)
    tau = np.exp(np.linspace(math.log(low), math.log(high), head_dim))
    bias = -np.log(np.expm1(1.0 / tau))
    return np.tile(bias, num_heads).astype(np.float32)


def mamba_dt_bias(num_heads: int, head_dim: int) -> np.ndarray:
    """[H·Dv] float32 dt biases softplus⁻¹(dt), dt log-spaced over [1e-3, 1e-1] across each head's channels.

    Mamba draws dt log-uniformly at random; log-spacing covers the same range deterministically. With
    A = 1 at init, log f = −dt, i.e. decay times from 10 to 1000 tokens, matching the low-rank gate.
    """
    dt = np.exp(np.linspace(math.log(MAMBA_DT_RANGE[0]), math.log(MAMBA_DT_RANGE[1]), head_dim))
    return np.tile(np.log(np.expm1(dt)), num_heads).astype(np.float32)


def bound_log_gate(log_gate: jax.Array, lower: float | None) -> jax.Array:
    """Softly bounds log f from below: m·expm1(log f / m) with m = −lower, a value in [lower, 0].

    The map has slope 1 at 0 (small decays pass almost unchanged, so the init is kept) and saturates at
    `lower` for strong decays with a gradient that vanishes smoothly, unlike a hard clip. float32 [...].
    """
    if lower is None:
        return log_gate
    margin = jnp.asarray(-lower, jnp.float32)
    return margin * jnp.expm1(log_gate / margin)
