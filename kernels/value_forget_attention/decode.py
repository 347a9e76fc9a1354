"""Decoding state of value-forget attention (FiX): the decayed-value cache, with optional pruning.

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md). The state is a NamedTuple of
arrays (`ValueForgetAttentionState`) with S slots per row:

    k             [B, S, Hkv, D]  keys, in the dtype given to `init_value_forget_attention_state`
    v             [B, S, H, Dv]   float32 decayed values ṽ_j = exp(Λ_t − Λ_j) ⊙ v_j per QUERY head (why float32:
                                  in bf16, f·ṽ rounds back to ṽ when f > 1 − 2⁻⁹ and slow channels stop decaying)
    fgate_decay   [B, S, H]       float32 Λ^f_t − Λ^f_j of the FoX scalar gate (0 when no scalar gate is used)
    forget_bound  [B, S, H]       float32 upper bound of max_c (Λ_t − Λ_j)[c]: Σ_{l=j+1..t} max_c log_vgate_l[c]
    valid         [B, S]          bool, the slot holds a token that is attended to
    length        [B]             int32, tokens appended so far
    evicted       [B]             int32, tokens dropped while still remembered (see "Full cache" below)

No prefix sum Λ is stored: after every step the whole value cache is multiplied by exp(Σ log_vgate) of the
new tokens and the other sums grow by the same local sums (every stored exponent is a suffix sum, ≤ 0).

`value_forget_attention_step` appends T ≥ 1 tokens at once (T = 1 decoding or chunked prefill), in pieces of at most
`prefill_block` tokens (and at most the capacity). A piece's queries attend to every valid slot and,
causally, to each other (the direct form, [B, H, Dv, P, P] decays); only then is the piece written into slots.

Pruning (`prune_eps` set): after the update, a slot with max_h forget_bound < log(prune_eps)
(every channel of every head decayed below prune_eps) is invalidated and reused. The bound adds the largest
log gate of each step, so it never frees a slot that any channel still remembers above prune_eps. Dropping a
token removes its term from the softmax denominator too, which rescales u_i by a positive per-(row, head)
scalar: the mixer's mandatory per-head RMSNorm removes it, so RMSNorm(u) changes only by the
dropped numerator terms (each ≤ prune_eps·P_ij·|v_j| before renormalization).

Full cache: a piece's P tokens take invalid slots first; when there are fewer than P of them, the valid slots
with the smallest max_h forget_bound (the most forgotten; the oldest under time-constant gates, which makes
the cache a sliding window of S + P tokens) are overwritten and counted in `evicted`. Without pruning, a cache
with capacity ≥ the total length never evicts and equals the full forward at every position.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.gate_sums import segment_sums
from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels._common.segments import reverse_cumsum

_F32 = jnp.float32


class ValueForgetAttentionState(NamedTuple):
    """The decode state; the fields are described in the module docstring."""

    k: jax.Array
    v: jax.Array
    fgate_decay: jax.Array
    forget_bound: jax.Array
    valid: jax.Array
    length: jax.Array
    evicted: jax.Array


def init_value_forget_attention_state(batch: int, capacity: int, num_heads: int, num_kv_heads: int, head_dim: int,
                                      value_dim: int, dtype: jnp.dtype) -> ValueForgetAttentionState:
    """Empty state with `capacity` slots per row; keys in `dtype`, decayed values and gate sums in float32."""
    for name, value in (("batch", batch), ("capacity", capacity), ("num_heads", num_heads),
                        ("num_kv_heads", num_kv_heads), ("head_dim", head_dim), ("value_dim", value_dim)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"init_value_forget_attention_state: `{name}` is {value!r}; expected an int ≥ 1")
    if num_heads % num_kv_heads:
        raise ValueError(f"init_value_forget_attention_state: `num_kv_heads` = {num_kv_heads} must divide "
                         f"num_heads = {num_heads}")
    return ValueForgetAttentionState(
        k=jnp.zeros((batch, capacity, num_kv_heads, head_dim), dtype),
        v=jnp.zeros((batch, capacity, num_heads, value_dim), _F32),
        fgate_decay=jnp.zeros((batch, capacity, num_heads), _F32),
        forget_bound=jnp.zeros((batch, capacity, num_heads), _F32),
        valid=jnp.zeros((batch, capacity), bool),
        length=jnp.zeros((batch,), jnp.int32),
        evicted=jnp.zeros((batch,), jnp.int32),
    )


def _bad(name: str, x: jax.Array, expected: str) -> ValueError:
    return ValueError(f"value_forget_attention_step: `{name}` has shape {tuple(x.shape)} (dtype {x.dtype}); "
                      f"expected {expected}")


def _check(state: ValueForgetAttentionState, q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array,
           log_fgate: jax.Array | None, prune_eps: float | None, prefill_block: int) -> None:
    """Raise ValueError naming the argument, its shape or value and what was expected."""
    if not isinstance(state, ValueForgetAttentionState):
        raise ValueError(f"value_forget_attention_step: `state` must be the ValueForgetAttentionState made by "
                         f"init_value_forget_attention_state; got {type(state).__name__}")
    b, s, hkv, d = state.k.shape
    h, dv = state.v.shape[2:]
    if q.ndim != 4 or q.shape[0] != b or q.shape[2:] != (h, d) or q.shape[1] < 1:
        raise _bad("q", q, f"[B, T, H, D] = [{b}, T, {h}, {d}] with T ≥ 1")
    t = q.shape[1]
    if k.shape != (b, t, hkv, d):
        raise _bad("k", k, f"[B, T, Hkv, D] = {[b, t, hkv, d]}")
    if v.shape != (b, t, hkv, dv):
        raise _bad("v", v, f"[B, T, Hkv, Dv] = {[b, t, hkv, dv]}")
    if not jnp.issubdtype(q.dtype, jnp.floating) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"value_forget_attention_step: q, k, v must share one floating dtype; got {q.dtype}, "
                         f"{k.dtype}, {v.dtype}")
    for name, gate, shape in (("log_vgate", log_vgate, (b, t, h, dv)), ("log_fgate", log_fgate, (b, t, h))):
        if gate is None:
            continue
        if gate.shape != shape or not jnp.issubdtype(gate.dtype, jnp.floating):
            raise _bad(name, gate, f"{list(shape)}, floating")
        if not isinstance(gate, jax.core.Tracer) and bool(jnp.any(gate > 0)):
            raise ValueError(f"value_forget_attention_step: `{name}` must be ≤ 0 (a log forget gate); "
                             f"max is {float(jnp.max(gate))}")
    if not isinstance(prefill_block, int) or prefill_block < 1:
        raise ValueError(f"value_forget_attention_step: `prefill_block` is {prefill_block!r}; expected an int ≥ 1")
    if prune_eps is not None and not 0.0 < prune_eps < 1.0:
        raise ValueError(f"value_forget_attention_step: `prune_eps` is {prune_eps!r}; expected None or a float "
                         f"in (0, 1)")


def _exclusive_suffix(a: jax.Array) -> jax.Array:
    """ρ_i = Σ_{l>i} a_l along axis 1 (time), each a plain sum of its own terms. a [B, T, ...]."""
    later = reverse_cumsum(a, axis=1)[:, 1:]
    return jnp.concatenate([later, jnp.zeros_like(a[:, :1])], axis=1)


def _attend(state: ValueForgetAttentionState, q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array,
            af: jax.Array, scale: float) -> jax.Array:
    """u [B, T, H, Dv] float32 of the new queries over the valid slots and, causally, the new tokens."""
    b, t, h, _ = q.shape
    hkv = k.shape[2]
    qg = q.reshape(b, t, hkv, h // hkv, -1)
    lam_v = jnp.cumsum(av, axis=1)  # Λ_{n+i} − Λ_n: inclusive prefix inside the chunk [B, T, H, Dv]
    lam_f = jnp.cumsum(af, axis=1)  # [B, T, H]
    s_old = jnp.einsum("btkgd,bskd->btkgs", qg, state.k.astype(q.dtype), precision=HIGHEST,
                       preferred_element_type=_F32).reshape(b, t, h, -1) * scale
    s_old = s_old + lam_f[..., None] + jnp.moveaxis(state.fgate_decay, 1, 2)[:, None]
    s_old = jnp.where(state.valid[:, None, None, :], s_old, -jnp.inf)
    s_new = jnp.einsum("btkgd,bskd->btkgs", qg, k, precision=HIGHEST, preferred_element_type=_F32)
    s_new = s_new.reshape(b, t, h, t) * scale + jnp.moveaxis(segment_sums(jnp.moveaxis(af, 1, 2)), 1, 2)
    causal = jnp.tril(jnp.ones((t, t), bool))
    s_new = jnp.where(causal[:, None, :], s_new, -jnp.inf)
    # The new token itself is always visible, so m is finite and masked terms give exact zeros.
    m = jnp.maximum(jnp.max(s_old, axis=-1), jnp.max(s_new, axis=-1))[..., None]
    p_old, p_new = jnp.exp(s_old - m), jnp.exp(s_new - m)
    z = jnp.sum(p_old, axis=-1) + jnp.sum(p_new, axis=-1)
    num_old = jnp.exp(lam_v) * jnp.einsum("bths,bshc->bthc", p_old, state.v, precision=HIGHEST)
    sums = segment_sums(jnp.transpose(av, (0, 2, 3, 1)))  # [B, H, Dv, T, T]
    decay = jnp.exp(jnp.where(causal, sums, -jnp.inf))
    vq = jnp.repeat(v.astype(_F32), h // hkv, axis=2)
    num_new = jnp.einsum("bihj,bhcij,bjhc->bihc", p_new, decay, vq, precision=HIGHEST)
    return (num_old + num_new) / z[..., None]


def _choose_slots(valid: jax.Array, bound: jax.Array, t: int) -> jax.Array:
    """Slots [B, T] for the new tokens: invalid ones first, then the most forgotten (smallest max_h bound)."""
    score = jnp.where(valid, jnp.max(bound, axis=-1), -jnp.inf)
    _, slots = lax.top_k(-score, t)
    return slots


def _updated_state(state: ValueForgetAttentionState, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array,
                   prune_eps: float | None) -> ValueForgetAttentionState:
    """Decay every slot by the chunk's gates, prune, then write the T new tokens into chosen slots."""
    b, t, h, _ = av.shape
    tot_v = jnp.sum(av, axis=1)  # [B, H, Dv], a local sum of ≤ 0 terms
    step_bound = jnp.max(av, axis=-1)  # [B, T, H]: the slowest channel of each step
    values = state.v * jnp.exp(tot_v)[:, None]
    fgate_decay = state.fgate_decay + jnp.sum(af, axis=1)[:, None]
    bound = state.forget_bound + jnp.sum(step_bound, axis=1)[:, None]
    valid = state.valid
    if prune_eps is not None:
        valid = valid & (jnp.max(bound, axis=-1) >= math.log(prune_eps))
    slots = _choose_slots(valid, bound, t)
    rows = jnp.arange(b)[:, None]
    new_values = jnp.exp(_exclusive_suffix(av)) * jnp.repeat(v.astype(_F32), h // k.shape[2], axis=2)
    return ValueForgetAttentionState(
        k=state.k.at[rows, slots].set(k.astype(state.k.dtype)),
        v=values.at[rows, slots].set(new_values),
        fgate_decay=fgate_decay.at[rows, slots].set(_exclusive_suffix(af)),
        forget_bound=bound.at[rows, slots].set(_exclusive_suffix(step_bound)),
        valid=valid.at[rows, slots].set(True),
        length=state.length + jnp.int32(t),
        evicted=state.evicted + jnp.sum(jnp.take_along_axis(valid, slots, axis=1), axis=1, dtype=jnp.int32),
    )


def _step(state: ValueForgetAttentionState, q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array,
          scale: float, prune_eps: float | None) -> tuple[jax.Array, ValueForgetAttentionState]:
    """One piece of T ≤ capacity tokens: attend, then append. Returns (u [B, T, H, Dv] in v.dtype, state)."""
    u = _attend(state, q, k, v, av, af, scale)
    return u.astype(v.dtype), _updated_state(state, k, v, av, af, prune_eps)


def _split_pieces(x: jax.Array, n: int, size: int) -> jax.Array:
    """[B, T, ...] -> its first n·size steps as [n, B, size, ...] (pieces in time order)."""
    x = x[:, :n * size]
    return jnp.moveaxis(x.reshape(x.shape[0], n, size, *x.shape[2:]), 1, 0)


def value_forget_attention_step(
    q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array, log_fgate: jax.Array | None = None, *,
    state: ValueForgetAttentionState, scale: float | None = None, prune_eps: float | None = None,
    prefill_block: int = 64,
) -> tuple[jax.Array, ValueForgetAttentionState]:
    """Append T ≥ 1 tokens to the state and return their outputs (decoding or chunked prefill).

    Tokens are processed in pieces of P = min(prefill_block, capacity) (a `lax.scan` over the full pieces,
    then the remainder): each piece attends to the cache and causally to itself, then is appended, so the
    in-piece decays cost [B, H, Dv, P, P] whatever T, and T may exceed the capacity when slots free up
    (pruning) or get evicted (see the module docstring).

    Args:
      q: [B, T, H, D]; k: [B, T, Hkv, D]; v: [B, T, Hkv, Dv] (one floating dtype).
      log_vgate: [B, T, H, Dv] ≤ 0. log_fgate: [B, T, H] ≤ 0 or None (no scalar gate).
      state: from `init_value_forget_attention_state` (or a previous step); no segment ids: one sequence per
        row.
      scale: logit scale; None means D**-0.5.
      prune_eps: None (keep every token while there is room) or ε in (0, 1): free the slots whose every
        channel has decayed below ε (see the module docstring for the bound used and for a full cache).
      prefill_block: the piece length P (before the capacity cap), an int ≥ 1.

    Returns:
      (u [B, T, H, Dv] in v.dtype, softmax-normalized as the full op; the updated state).
    """
    _check(state, q, k, v, log_vgate, log_fgate, prune_eps, prefill_block)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    av = log_vgate.astype(_F32)
    af = jnp.zeros(q.shape[:3], _F32) if log_fgate is None else log_fgate.astype(_F32)
    t, size = q.shape[1], min(prefill_block, state.k.shape[1])
    if t <= size:
        return _step(state, q, k, v, av, af, scale, prune_eps)
    n = t // size
    inputs = (q, k, v, av, af)

    def piece(carry: ValueForgetAttentionState,
              xs: tuple[jax.Array, ...]) -> tuple[ValueForgetAttentionState, jax.Array]:
        u, carry = _step(carry, *xs, scale, prune_eps)
        return carry, u

    state, u_full = lax.scan(piece, state, tuple(_split_pieces(x, n, size) for x in inputs))
    u_full = jnp.moveaxis(u_full, 0, 1).reshape(q.shape[0], n * size, *u_full.shape[3:])
    if n * size == t:
        return u_full, state
    u_rest, state = _step(state, *(x[:, n * size:] for x in inputs), scale, prune_eps)
    return jnp.concatenate([u_full, u_rest], axis=1), state
