"""Decoding with the causal long convolution: a cache of every input seen so far, and the outputs of new tokens only.

A long convolution has no finite state (every past token reaches every later output through its own tap), so
the decode form keeps the inputs: `state.buffer` [B, S, D] float32 holds u_0 … u_{index−1}, and a step of T'
new tokens writes them at `index` and computes only their outputs y_p = Σ_{s ≤ p} h[p − s] u_s, O(T'·S·D),
instead of re-running the convolution over the whole prefix. The sums are float32 over the same taps as the
forward's direct path, so decoding equals the forward.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.checks import check_capacity
from icml26zoo.kernels._common.precision import HIGHEST


class LongConvState(NamedTuple):
    """buffer [B, S, D] float32: the inputs so far (zeros after `index`); index: int32 scalar, the next position."""

    buffer: jax.Array
    index: jax.Array


def causal_long_conv_init(batch: int, max_len: int, dim: int) -> LongConvState:
    """An empty decode state for up to `max_len` tokens of width `dim`."""
    for name, value in (("batch", batch), ("max_len", max_len), ("dim", dim)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"causal_long_conv_init: `{name}` is {value!r}, expected a positive int")
    return LongConvState(jnp.zeros((batch, max_len, dim), jnp.float32), jnp.zeros((), jnp.int32))


def _check(u: jax.Array, h: jax.Array, state: LongConvState) -> None:
    """Raises ValueError naming the argument, its shape and the expected shape."""
    if u.ndim not in (2, 3):
        raise ValueError(f"causal_long_conv_step: `u` has shape {u.shape}, expected [B, D] or [B, T', D]")
    batch, dim = u.shape[0], u.shape[-1]
    if h.ndim != 2 or h.shape[1] != dim:
        raise ValueError(f"causal_long_conv_step: `h` has shape {h.shape}, expected [L, D] with D = {dim}")
    buffer = state.buffer
    if buffer.ndim != 3 or buffer.shape[0] != batch or buffer.shape[2] != dim:
        raise ValueError(f"causal_long_conv_step: `state.buffer` has shape {buffer.shape}, "
                         f"expected [B, S, D] = ({batch}, S, {dim})")
    if jnp.shape(state.index) != ():
        raise ValueError(f"causal_long_conv_step: `state.index` has shape {jnp.shape(state.index)}, expected ()")


def causal_long_conv_step(u: jax.Array, h: jax.Array, *, state: LongConvState) -> tuple[jax.Array, LongConvState]:
    """Writes the new inputs at `state.index` and returns their outputs and the advanced state.

    Args:
      u: [B, D] (one token) or [B, T', D] (T' tokens at once).
      h: [L, D] the filter; taps beyond L are zero.
      state: from `causal_long_conv_init` or a previous step; index + T' must not exceed S (a ValueError
        otherwise; under `jit` only inside `kernels.checked`).
    Returns:
      y shaped like u, in u.dtype (summed in float32), and the state with the inputs written and index + T'.
    """
    _check(u, h, state)
    chunk = u[:, None] if u.ndim == 2 else u  # [B, T', D]
    check_capacity("causal_long_conv_step", state.index, chunk.shape[1], state.buffer.shape[1])
    zero = jnp.zeros((), jnp.int32)
    buffer = jax.lax.dynamic_update_slice(state.buffer, chunk.astype(state.buffer.dtype), (zero, state.index, zero))
    h32 = h.astype(jnp.float32)
    rows = state.index + jnp.arange(chunk.shape[1])
    lag = rows[:, None] - jnp.arange(buffer.shape[1])[None, :]  # [T', S]
    valid = (lag >= 0) & (lag < h32.shape[0])
    taps = jnp.where(valid[..., None], h32[jnp.clip(lag, 0, h32.shape[0] - 1)], 0.0)  # [T', S, D]
    y = jnp.einsum("psd,bsd->bpd", taps, buffer, precision=HIGHEST).astype(u.dtype)
    index = state.index + jnp.asarray(chunk.shape[1], jnp.int32)
    return (y[:, 0] if u.ndim == 2 else y), LongConvState(buffer, index)
