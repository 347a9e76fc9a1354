"""Pieces of the FoX mixer (zoo/mixers/fox.py): its options, the gate schedule, the token shift and cached
(decode) forgetting attention. Pure functions, tested on their own.

Spec: specs/mixers-01-fix-fox.md, Part A.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from zoo.layers.options import check_choice, check_implementation
from zoo.mixers.base import read_mixer_options
from zoo.models.config import ModelConfig

GATES = ("full", "bias_only", "fixed", "none")
PRO_FLAGS = ("qk_norm", "token_shift", "output_norm", "output_gate")
IMPLEMENTATIONS = ("reference", "xla", "pallas")
_HI = jax.lax.Precision.HIGHEST


@dataclasses.dataclass(frozen=True)
class FoxOptions:
    """The FoX mixer's `cfg.mixer_options`, validated (see `parse_options`)."""

    gate: str = "full"
    rope: bool = False  # FoX uses no positional encoding by default (spec A.1: `use_rope: false`)
    implementation: str | tuple[str, ...] | None = None  # forgetting_attention's; None = best for the backend
    pro: bool = False  # turns on the four flags below unless one is given on its own (spec A.2)
    qk_norm: bool = False
    token_shift: bool = False
    output_norm: bool = False
    output_gate: bool = False
    # Decay-time range of the "fixed" gate and of the "bias_only" initialization (spec A.1). The spec and
    # the reference code leave T_min / T_max to the experiment; these defaults are the zoo's choice.
    decay_time_min: float = 2.0
    decay_time_max: float = 1024.0


def _check_decay_times(t_min: float, t_max: float) -> None:
    for name, value in (("decay_time_min", t_min), ("decay_time_max", t_max)):
        if not value > 0:
            raise ValueError(f"fox mixer option {name!r} must be a positive number, got {value!r}")
    if t_min > t_max:
        raise ValueError(
            f"fox mixer options 'decay_time_min' ({t_min}) must not exceed 'decay_time_max' ({t_max})"
        )


def parse_options(cfg: ModelConfig) -> FoxOptions:
    """Reads and validates the FoX options of `cfg`; a bad name or value raises ValueError naming it.

    `pro=True` turns on all four Pro flags (spec A.2); an individually given flag overrides it.
    """
    values = read_mixer_options(cfg, "fox", FoxOptions)
    given = {name for name, _ in cfg.mixer_options}
    for flag in PRO_FLAGS:
        if flag not in given:
            values[flag] = values["pro"]
    check_choice("fox mixer", "gate", values["gate"], GATES)
    check_implementation("fox mixer", values["implementation"], IMPLEMENTATIONS)
    _check_decay_times(values["decay_time_min"], values["decay_time_max"])
    return FoxOptions(**values)


def decay_bias(num_heads: int, t_min: float, t_max: float) -> np.ndarray:
    """[num_heads] float32 gate biases b_h with −1/log σ(b_h) = τ_h, τ log-spaced over [t_min, t_max].

    log σ(b) = −log(1 + e^{−b}) and e^{−b} = expm1(1/τ) give log σ(b) = −1/τ (spec A.1, invariant 6).
    Computed in float64, then rounded once.
    """
    tau = np.exp(np.linspace(math.log(t_min), math.log(t_max), num_heads))
    return (-np.log(np.expm1(1.0 / tau))).astype(np.float32)


def segment_starts(segment_ids: jax.Array) -> jax.Array:
    """[B, T] bool: True where a token starts a segment (t = 0 or its id differs from the previous one)."""
    first = jnp.ones_like(segment_ids[:, :1], dtype=jnp.bool_)
    return jnp.concatenate([first, segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)


def token_shift(
    h: jax.Array, alpha: jax.Array, *, segment_ids: jax.Array | None = None, previous: jax.Array | None = None
) -> jax.Array:
    """Data-dependent token shift (spec A.2): h̃_t = α_t·h_{t−1} + (1 − α_t)·h_t.

    h: [B, T, Hkv, Dh] (the k or v projection before the shift); alpha: [B, T, Hkv] in (0, 1), float32;
    previous: [B, Hkv, Dh], the projection of the token before h[:, 0] (decode cache), None = zeros;
    segment_ids: [B, T] or None (not together with previous). At a segment start h_{t−1} is taken as
    zero, as at the start of a sequence, so nothing crosses a boundary.
    The mix runs in float32; returns [B, T, Hkv, Dh] in h.dtype.
    """
    if previous is not None and segment_ids is not None:
        raise ValueError("token_shift takes previous (decoding, one sequence per row) or segment_ids, not both")
    first = jnp.zeros_like(h[:, :1]) if previous is None else previous[:, None].astype(h.dtype)
    before = jnp.concatenate([first, h[:, :-1]], axis=1)
    if segment_ids is not None:
        before = jnp.where(segment_starts(segment_ids)[:, :, None, None], jnp.zeros_like(before), before)
    a = alpha[..., None]
    mixed = a * before.astype(jnp.float32) + (1.0 - a) * h.astype(jnp.float32)
    return mixed.astype(h.dtype)


def suffix_gate_sums(log_gates: jax.Array, query_slots: jax.Array) -> jax.Array:
    """Σ_{j<l≤p} log f_l for every key slot j and query slot p: the decode bias Λ_p − Λ_j.

    log_gates: [..., S] float32 (the cached log-gates of slots 0..S−1); query_slots: [T'] int.
    Returns [..., T', S] float32; entries with j ≥ p are 0 (they are masked by the caller anyway).
    Built as a reverse cumsum of the gates masked to l ≤ p, shifted by one slot: each entry is a sum of
    exactly its own (non-positive) terms, accumulated from the query backwards. The difference of two
    stored prefix sums would carry the rounding of |Λ_p| into every logit (8.7e-4 at T = 4096 with
    log f ~ U(−20, 0), spec A.4 Numerics; 1e-7 this way).
    """
    slots = jnp.arange(log_gates.shape[-1], dtype=jnp.int32)
    upto = slots[None, :] <= query_slots[:, None]  # [T', S]: l ≤ p
    masked = jnp.where(upto, log_gates[..., None, :], 0.0)
    tail = jax.lax.cumsum(masked, axis=masked.ndim - 1, reverse=True)  # Σ_{l ≥ j, l ≤ p}
    return jnp.concatenate([tail[..., 1:], jnp.zeros_like(tail[..., :1])], axis=-1)  # Σ_{l > j}


def cached_forgetting_attention(
    q: jax.Array, keys: jax.Array, values: jax.Array, log_gates: jax.Array | None, index: jax.Array
) -> jax.Array:
    """Forgetting attention of T' new queries against a KV cache (decode and chunked prefill).

    q: [B, T', H, D], the queries at slots index .. index+T'−1; keys/values: [B, S, Hkv, D], already
    holding those T' tokens; log_gates: [B, S, H] float32 cached log forget gates, or None (plain causal
    attention); index: int32 scalar. Query i reads slots ≤ index + i with logits
    q·k/√D + Σ_{j<l≤index+i} log f_l. Logits and softmax in float32. Returns [B, T', H, D] in q.dtype.
    """
    batch, num_new, heads, dim = q.shape
    num_slots, kv_heads = keys.shape[1], keys.shape[2]
    groups = heads // kv_heads
    qg = q.astype(keys.dtype).reshape(batch, num_new, kv_heads, groups, dim)
    logits = jnp.einsum("bqhgd,bshd->bhgqs", qg, keys, precision=_HI, preferred_element_type=jnp.float32)
    logits = logits * dim**-0.5
    query_slots = index + jnp.arange(num_new, dtype=jnp.int32)
    if log_gates is not None:
        # [B, S, H] -> [B, Hkv, G, S]: query head h = kv_head·G + g reads its own gate (GQA layout).
        gates = jnp.moveaxis(log_gates.reshape(batch, num_slots, kv_heads, groups), 1, -1)
        logits = logits + suffix_gate_sums(gates, query_slots)
    visible = jnp.arange(num_slots, dtype=jnp.int32)[None, :] <= query_slots[:, None]  # [T', S]
    logits = jnp.where(visible, logits, -jnp.inf)  # mask before exp: the diagonal keeps rows non-empty
    weights = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    out = jnp.einsum(
        "bhgqs,bshd->bqhgd", weights.astype(values.dtype), values, precision=_HI, preferred_element_type=jnp.float32
    )
    return out.reshape(batch, num_new, heads, dim).astype(q.dtype)
