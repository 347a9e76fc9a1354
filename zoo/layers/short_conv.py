"""The short causal depthwise convolution of the recurrent mixers (DeltaNet, GDN, KDA, MDN, Mamba, Mamba2,
Hyena's short filter), with one rule at segment starts and a decode state.

    y_t[c] = bias[c] + Σ_{j<K} weight[K−1−j, c] · u_{t−j}[c]

The rule: u_{t−j} counts as zero before the sequence start and whenever it lies in another packed segment
than u_t, so nothing crosses a boundary. The decode state is the last K−1 inputs (pre-convolution); a
cache holds one sequence per row, so `state` and `segment_ids` are never given together.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

SMALL_INIT = nnx.initializers.normal(0.02)


def short_conv(
    u: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None = None,
    *,
    segment_ids: jax.Array | None = None,
    state: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Causal depthwise convolution of u [B, T, C] with weight [K, C] (weight[K−1] multiplies u_t).

    Args:
      u: [B, T, C] inputs; weight: [K, C]; bias: [C] or None.
      segment_ids: [B, T] int or None; u_{t−j} contributes only when it lies in t's segment.
      state: [B, K−1, C] the previous K−1 inputs (oldest first), or None (zeros: a new sequence).
    Returns:
      y [B, T, C] float32 (accumulated in float32 whatever the dtype) and the new state [B, K−1, C] in
      u.dtype (the last K−1 inputs, history included). Decoding in pieces with the state equals one call.
    """
    batch, length, channels = u.shape
    width = weight.shape[0]
    if weight.shape != (width, channels) or (bias is not None and bias.shape != (channels,)):
        bias_shape = None if bias is None else bias.shape
        raise ValueError(
            f"weight must be [K, {channels}] and bias [{channels}] or None, got {weight.shape}, {bias_shape}"
        )
    if state is not None and segment_ids is not None:
        raise ValueError("short_conv takes state (decoding, one sequence per row) or segment_ids, not both")
    if state is None:
        state = jnp.zeros((batch, width - 1, channels), u.dtype)
    if state.shape != (batch, width - 1, channels):
        raise ValueError(f"state must have shape {(batch, width - 1, channels)}, got {state.shape}")
    full = jnp.concatenate([state.astype(u.dtype), u], axis=1)  # [B, K−1+T, C]
    w32 = weight.astype(jnp.float32)
    start = jnp.zeros((channels,), jnp.float32) if bias is None else bias.astype(jnp.float32)
    y = jnp.broadcast_to(start, (batch, length, channels))
    for lag in range(width):
        first = width - 1 - lag
        term = full[:, first : first + length].astype(jnp.float32) * w32[width - 1 - lag]
        if segment_ids is not None and lag > 0:
            term = jnp.where(_same_segment(segment_ids, lag)[..., None], term, 0.0)
        y = y + term
    return y, full[:, length:]


def _same_segment(segment_ids: jax.Array, lag: int) -> jax.Array:
    """[B, T] bool: token t−lag exists and is in t's segment (False for t < lag: the zero history)."""
    earlier = segment_ids[:, :-lag]
    same = earlier == segment_ids[:, lag:]
    return jnp.concatenate([jnp.zeros((segment_ids.shape[0], lag), jnp.bool_), same], axis=1)[:, : segment_ids.shape[1]]


def init_conv(key: jax.Array, width: int, channels: int) -> tuple[jax.Array, jax.Array]:
    """Depthwise conv weight [K, C] and bias [C], U(±1/√K): PyTorch's Conv1d default (fan-in K per channel)."""
    bound = 1.0 / math.sqrt(width)
    wkey, bkey = jax.random.split(key)
    weight = jax.random.uniform(wkey, (width, channels), jnp.float32, -bound, bound)
    bias = jax.random.uniform(bkey, (channels,), jnp.float32, -bound, bound)
    return weight, bias


class ShortConv(nnx.Module):
    """`short_conv` without bias, then SiLU ("ShortConvolution" of the delta-rule mixers); weight [K, C]
    initialized N(0, 0.02²)."""

    def __init__(self, channels: int, width: int, *, rngs: nnx.Rngs) -> None:
        self.width = width
        self.weight = nnx.Param(SMALL_INIT(rngs.params(), (width, channels), jnp.float32))

    def __call__(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, state: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """x: [B, T, C]; segment_ids [B, T] or None; state [B, W−1, C] (decode) or None (zeros).

        Returns (SiLU(conv) [B, T, C] float32, new state [B, W−1, C] in x.dtype: the last W−1 inputs).
        """
        y, new_state = short_conv(x, self.weight[...], segment_ids=segment_ids, state=state)
        return jax.nn.silu(y), new_state
