"""Decoding state of forgetting attention (FoX): a KV cache with the float32 log forget gates of every token.

The state keeps the log gates themselves, not their prefix sums Λ: the decode bias Λ_p − Λ_j is taken as
the suffix sum Σ_{j<l≤p} log f_l over the cached gates (`suffix_gate_sums`), each a plain sum of its own
non-positive terms. The difference of two stored prefix sums would carry the rounding of |Λ_p| into every
logit (8.7e-4 at T = 4096 with log f ~ U(−20, 0), as the Forgetting Transformer paper's numerics warn;
1e-7 this way).

`forgetting_attention_step` appends T ≥ 1 tokens at the write index (T = 1 decoding or chunked prefill) and
attends their queries causally to every slot up to their own.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.checks import check_capacity, check_positive_int
from icml26zoo.kernels._common.precision import HIGHEST


class ForgettingAttentionState(NamedTuple):
    """The decode state: S slots per row, slots ≥ `index` unwritten.

    k, v       [B, S, Hkv, D]  keys and values, in the dtype given to `init_forgetting_attention_state`
    log_fgate  [B, S, H]       float32 log forget gates, or None (an ungated state: plain causal attention)
    index      []              int32, tokens written so far
    """

    k: jax.Array
    v: jax.Array
    log_fgate: jax.Array | None
    index: jax.Array


def init_forgetting_attention_state(batch: int, capacity: int, num_heads: int, num_kv_heads: int, head_dim: int,
                                    dtype: jnp.dtype, *, gated: bool = True) -> ForgettingAttentionState:
    """Empty state with `capacity` slots per row; keys and values in `dtype`, log gates (when `gated`) float32."""
    for name, value in (("batch", batch), ("capacity", capacity), ("num_heads", num_heads),
                        ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
        check_positive_int("init_forgetting_attention_state", name, value)
    if num_heads % num_kv_heads:
        raise ValueError(f"init_forgetting_attention_state: `num_kv_heads` = {num_kv_heads} must divide "
                         f"num_heads = {num_heads}")
    kv = jnp.zeros((batch, capacity, num_kv_heads, head_dim), dtype)
    log_fgate = jnp.zeros((batch, capacity, num_heads), jnp.float32) if gated else None
    return ForgettingAttentionState(kv, kv, log_fgate, jnp.zeros((), jnp.int32))


def suffix_gate_sums(log_gates: jax.Array, query_slots: jax.Array) -> jax.Array:
    """Σ_{j<l≤p} log f_l for every key slot j and query slot p: the decode bias Λ_p − Λ_j.

    log_gates: [..., S] float32 (the cached log-gates of slots 0..S−1); query_slots: [T'] int.
    Returns [..., T', S] float32; entries with j ≥ p are 0 (they are masked by the caller anyway).
    Built as a reverse cumsum of the gates masked to l ≤ p, shifted by one slot: each entry is a sum of
    exactly its own (non-positive) terms, accumulated from the query backwards.
    """
    slots = jnp.arange(log_gates.shape[-1], dtype=jnp.int32)
    upto = slots[None, :] <= query_slots[:, None]  # [T', S]: l ≤ p
    masked = jnp.where(upto, log_gates[..., None, :], 0.0)
    tail = lax.cumsum(masked, axis=masked.ndim - 1, reverse=True)  # Σ_{l ≥ j, l ≤ p}
    return jnp.concatenate([tail[..., 1:], jnp.zeros_like(tail[..., :1])], axis=-1)  # Σ_{l > j}


def cached_forgetting_attention(q: jax.Array, keys: jax.Array, values: jax.Array, log_gates: jax.Array | None,
                                index: jax.Array, scale: float | None = None) -> jax.Array:
    """Forgetting attention of T' new queries against a KV cache (decode and chunked prefill).

    q: [B, T', H, D], the queries at slots index .. index+T'−1; keys/values: [B, S, Hkv, D], already
    holding those T' tokens; log_gates: [B, S, H] float32 cached log forget gates, or None (plain causal
    attention); index: int32 scalar; scale: None means D**-0.5. Query i reads slots ≤ index + i with logits
    scale·q·k + Σ_{j<l≤index+i} log f_l. Logits and softmax in float32. Returns [B, T', H, D] in q.dtype.
    """
    batch, num_new, heads, dim = q.shape
    num_slots, kv_heads = keys.shape[1], keys.shape[2]
    groups = heads // kv_heads
    qg = q.astype(keys.dtype).reshape(batch, num_new, kv_heads, groups, dim)
    logits = jnp.einsum("bqhgd,bshd->bhgqs", qg, keys, precision=HIGHEST, preferred_element_type=jnp.float32)
    logits = logits * (dim**-0.5 if scale is None else scale)
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
        "bhgqs,bshd->bqhgd", weights.astype(values.dtype), values, precision=HIGHEST,
        preferred_element_type=jnp.float32,
    )
    return out.reshape(batch, num_new, heads, dim).astype(q.dtype)


def _bad(name: str, x: jax.Array, expected: str) -> ValueError:
    return ValueError(f"forgetting_attention_step: `{name}` has shape {tuple(x.shape)} (dtype {x.dtype}); "
                      f"expected {expected}")


def _check(q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None,
           state: ForgettingAttentionState) -> None:
    """Raise ValueError naming the argument, its shape or value and what was expected."""
    if not isinstance(state, ForgettingAttentionState):
        raise ValueError(f"forgetting_attention_step: `state` must be the ForgettingAttentionState made by "
                         f"init_forgetting_attention_state; got {type(state).__name__}")
    b, s, hkv, d = state.k.shape
    if q.ndim != 4 or q.shape[0] != b or q.shape[3] != d or not 1 <= q.shape[1] <= s or q.shape[2] % hkv:
        raise _bad("q", q, f"[B, T, H, D] = [{b}, T, H, {d}] with 1 ≤ T ≤ {s} and Hkv = {hkv} dividing H")
    t, h = q.shape[1], q.shape[2]
    for name, x in (("k", k), ("v", v)):
        if x.shape != (b, t, hkv, d):
            raise _bad(name, x, f"[B, T, Hkv, D] = {[b, t, hkv, d]}")
    if (log_fgate is None) != (state.log_fgate is None):
        raise ValueError(f"forgetting_attention_step: `log_fgate` is {'None' if log_fgate is None else 'given'} "
                         f"but the state was made with gated={state.log_fgate is not None}")
    if log_fgate is not None and (log_fgate.shape != (b, t, h) or state.log_fgate.shape != (b, s, h)):
        raise _bad("log_fgate", log_fgate, f"[B, T, H] = {[b, t, h]} (state gates [B, S, H] = {[b, s, h]})")


def forgetting_attention_step(q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None, *,
                              state: ForgettingAttentionState,
                              scale: float | None = None) -> tuple[jax.Array, ForgettingAttentionState]:
    """Append T ≥ 1 tokens to the state and return their outputs (decoding or chunked prefill).

    Args:
      q: [B, T, H, D]; k, v: [B, T, Hkv, D] (written in the state's dtype).
      log_fgate: [B, T, H] ≤ 0, float32 advised; None exactly when the state is ungated.
      state: from `init_forgetting_attention_state` (or a previous step); one sequence per row. The T new
        tokens must fit, index + T ≤ S: a ValueError otherwise (under `jit` only inside `kernels.checked`).
      scale: logit scale; None means D**-0.5.

    Returns:
      (o [B, T, H, D] in q.dtype, equal to the full forward at those positions; the updated state).
    """
    _check(q, k, v, log_fgate, state)
    check_capacity("forgetting_attention_step", state.index, q.shape[1], state.k.shape[1])
    zero = jnp.zeros((), jnp.int32)

    def write(buffer: jax.Array, new: jax.Array) -> jax.Array:
        start = (zero, state.index) + (zero,) * (buffer.ndim - 2)
        return lax.dynamic_update_slice(buffer, new.astype(buffer.dtype), start)

    keys, values = write(state.k, k), write(state.v, v)
    log_gates = None if log_fgate is None else write(state.log_fgate, log_fgate)
    out = cached_forgetting_attention(q, keys, values, log_gates, state.index, scale)
    index = state.index + jnp.asarray(q.shape[1], jnp.int32)
    return out, ForgettingAttentionState(keys, values, log_gates, index)
