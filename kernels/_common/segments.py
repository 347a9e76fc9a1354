"""Packed-sequence helpers with one convention for every op.

`segment_ids` is `[B, T]` int (or None: one segment per row). A *start* is a position t > 0 whose id
differs from position t − 1: the state resets there. Position 0 is never a start, because
`initial_state` (or a decode cache) applies to the first segment of each row.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax


def segment_starts(segment_ids: jax.Array | None, batch: int, length: int) -> jax.Array:
    """[B, T] bool: True where a new segment starts after position 0 (all False when `segment_ids` is None)."""
    if segment_ids is None:
        return jnp.zeros((batch, length), dtype=bool)
    first = jnp.zeros((batch, 1), dtype=bool)
    return jnp.concatenate([first, segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)


def segment_counts(segment_ids: jax.Array | None, batch: int, length: int) -> jax.Array:
    """[B, T] int32: the number of starts up to and including t, so "same segment" is `k_t == k_s`.

    Works for any packed ids, monotone or not (two tokens are in one segment when no start lies between).
    """
    return jnp.cumsum(segment_starts(segment_ids, batch, length).astype(jnp.int32), axis=1)


def reverse_cumsum(x: jax.Array, axis: int = -1) -> jax.Array:
    """Σ_{s≥t} x_s along `axis`."""
    return jnp.flip(jnp.cumsum(jnp.flip(x, axis), axis=axis), axis)


def nonfinite_positions(arrays: Sequence[jax.Array | None]) -> jax.Array:
    """[B, T] bool: True where any of the `[B, T, ...]` arrays (None skipped) holds a NaN or an inf."""
    bad = None
    for x in arrays:
        if x is None:
            continue
        here = ~jnp.isfinite(x).reshape(x.shape[:2] + (-1,)).all(axis=-1)
        bad = here if bad is None else bad | here
    if bad is None:
        raise ValueError("nonfinite_positions: `arrays` holds no array, expected at least one [B, T, ...] array")
    return bad


def tainted_positions(bad: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
    """[B, T] bool: True at every position at or after a `bad` position of its own segment (causal, per segment).

    Compares two running maxima of positions: the last segment start and the last bad position up to t.
    """
    batch, length = bad.shape
    t = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
    last_start = lax.cummax(jnp.where(segment_starts(segment_ids, batch, length), t, 0), axis=1)
    last_bad = lax.cummax(jnp.where(bad, t, -1), axis=1)
    return last_bad >= last_start


def quarantine(time_inputs: Mapping[str, jax.Array | None], segment_ids: jax.Array | None,
               initial_state: Any = None) -> tuple[dict[str, jax.Array | None], Any, jax.Array]:
    """Inputs with every non-finite position zeroed, and where the bad values would have reached.

    time_inputs: name -> [B, T, ...] (or None); initial_state: None or a pytree of [B, ...] arrays.
    Returns (clean time inputs, clean initial state, tainted [B, T] bool). A position is zeroed in every
    time input when any of them is non-finite there; a row whose initial state is non-finite gets a zero
    state and a bad position 0. The ops' paths contract over time with matmuls, where a masked weight of
    zero times a NaN is still NaN: once no NaN or inf enters, none can cross a segment boundary. `poison`
    then puts NaN back on the tainted positions, so a bad segment still shows NaN outputs.
    """
    bad = nonfinite_positions(list(time_inputs.values()))
    if initial_state is not None:
        rows = [~jnp.isfinite(s).reshape(s.shape[0], -1).all(axis=-1) for s in jax.tree.leaves(initial_state)]
        bad_rows = functools.reduce(jnp.logical_or, rows)
        initial_state = jax.tree.map(lambda s: jnp.where(_expand(bad_rows, s.ndim), 0, s), initial_state)
        bad = bad.at[:, 0].set(bad[:, 0] | bad_rows)
    clean = {n: None if x is None else jnp.where(_expand(bad, x.ndim), jnp.zeros((), x.dtype), x)
             for n, x in time_inputs.items()}
    return clean, initial_state, tainted_positions(bad, segment_ids)


def _expand(mask: jax.Array, ndim: int) -> jax.Array:
    """mask [B] or [B, T] with trailing unit axes up to `ndim` dims, to broadcast against an array."""
    return mask.reshape(mask.shape + (1,) * (ndim - mask.ndim))


def poison(y: jax.Array, tainted: jax.Array) -> jax.Array:
    """y [B, T, ...] with NaN at the tainted positions ([B, T] bool)."""
    return jnp.where(_expand(tainted, y.ndim), jnp.array(jnp.nan, y.dtype), y)


def poison_final_state(state: Any, tainted: jax.Array) -> Any:
    """Final states (a pytree of [B, ...]) with NaN in the rows whose last segment is tainted at its end."""
    last = tainted[:, -1]
    return jax.tree.map(lambda s: jnp.where(_expand(last, s.ndim), jnp.array(jnp.nan, s.dtype), s), state)
