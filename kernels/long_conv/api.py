"""Public entry point of the causal long convolution (Hyena's long conv): validation and dispatch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from kernels._dispatch import select_implementation
from kernels.long_conv import reference, xla

_ALL = ("cpu", "gpu", "tpu")

# name -> (function, backends). "reference" is the O(T²) direct sum, never a default.
_IMPLEMENTATIONS: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "reference": (reference.causal_long_conv, _ALL),
    "xla": (xla.causal_long_conv, _ALL),
    "direct": (xla.direct_long_conv, _ALL),
}
_DEFAULT = {"cpu": "xla", "gpu": "xla", "tpu": "xla"}


def _fail(name: str, shape: Sequence[int], expected: str) -> None:
    raise ValueError(f"causal_long_conv: `{name}` has shape {tuple(shape)}, expected {expected}")


def _check(u: jax.Array, h: jax.Array, segment_ids: jax.Array | None) -> None:
    """Raises ValueError naming the argument, its shape or dtype and what was expected."""
    if u.ndim != 3 or u.shape[1] < 1:
        _fail("u", u.shape, "[B, T, D] with T >= 1")
    batch, length, dim = u.shape
    if h.ndim != 2 or h.shape[1] != dim or not 1 <= h.shape[0] <= length:
        _fail("h", h.shape, f"[L, D] with 1 <= L <= T = {length} and D = {dim}")
    if segment_ids is not None and segment_ids.shape != (batch, length):
        _fail("segment_ids", segment_ids.shape, f"{(batch, length)} = [B, T]")
    for name, arr in (("u", u), ("h", h)):
        if not jnp.issubdtype(arr.dtype, jnp.floating):
            raise ValueError(f"causal_long_conv: `{name}` has dtype {arr.dtype}, expected a floating dtype")
    if segment_ids is not None and not jnp.issubdtype(segment_ids.dtype, jnp.integer):
        raise ValueError(f"causal_long_conv: `segment_ids` has dtype {segment_ids.dtype}, expected an integer dtype")


def causal_long_conv(
    u: jax.Array,
    h: jax.Array,
    *,
    segment_ids: jax.Array | None = None,
    implementation: None | str | Sequence[str] = None,
) -> jax.Array:
    """Causal depthwise long convolution y[b, t, d] = Σ_{s ≤ t} h[t − s, d] · u[b, s, d].

    Args:
      u: [B, T, D] signal, any floating dtype.
      h: [L, D] filter with 1 ≤ L ≤ T; taps beyond L are zero (a filter shorter than the sequence).
      segment_ids: [B, T] int or None. Packed rows: the sum runs only over s in t's segment, so nothing
        crosses a boundary (segments are contiguous runs of equal ids; 0 = padding is a segment too).
      implementation: None (the backend default, "xla"), "reference" (direct O(T²) sum), "xla" (FFT with
        zero-padding to ≥ 2T; exact masked blocked sum when segment_ids is given), "direct" (the blocked
        masked sum always: exactly causal gradients, O(T²·D)), or a sequence.
    Returns:
      y [B, T, D] in u.dtype, accumulated in float32.
    """
    _check(u, h, segment_ids)
    fn = select_implementation("causal_long_conv", implementation, _IMPLEMENTATIONS, _DEFAULT)
    return fn(u, h, segment_ids=segment_ids)
