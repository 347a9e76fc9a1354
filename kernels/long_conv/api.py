"""Public entry point of the causal long convolution (Hyena's long conv): validation and dispatch."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common import checks, segments
from icml26zoo.kernels._dispatch import ALL_BACKENDS, XLA_EVERYWHERE, Implementations, select_implementation
from icml26zoo.kernels.long_conv import reference, xla

_NAME = "causal_long_conv"

# name -> (function, backends). "reference" is the O(T²) direct sum, never a default.
_IMPLEMENTATIONS: Implementations = {
    "reference": (reference.causal_long_conv, ALL_BACKENDS),
    "xla": (xla.causal_long_conv, ALL_BACKENDS),
    "direct": (xla.direct_long_conv, ALL_BACKENDS),
}


def _check(u: jax.Array, h: jax.Array, segment_ids: jax.Array | None) -> None:
    """Raises ValueError naming the argument, its shape or dtype and what was expected."""
    checks.require_arrays(_NAME, {"u": u, "h": h, "segment_ids": segment_ids}, optional=("segment_ids",))
    if u.ndim != 3 or u.shape[1] < 1:
        checks.fail_shape(_NAME, "u", u.shape, "[B, T, D] with T >= 1")
    batch, length, dim = u.shape
    if h.ndim != 2 or h.shape[1] != dim or not 1 <= h.shape[0] <= length:
        checks.fail_shape(_NAME, "h", h.shape, f"[L, D] with 1 <= L <= T = {length} and D = {dim}")
    checks.check_segment_ids(_NAME, segment_ids, batch, length)
    checks.require_floating(_NAME, {"u": u, "h": h})


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
        crosses a boundary (segments are contiguous runs of equal ids, as in every op: ids 1, 2, 1 are three
        segments; 0 = padding is a segment too).
      implementation: None (the backend default, "xla"), "reference" (direct O(T²) sum), "xla" (FFT with
        zero-padding to ≥ 2T; exact masked blocked sum when segment_ids is given), "direct" (the blocked
        masked sum always: exactly causal gradients, O(T²·D)), or a sequence.
    Returns:
      y [B, T, D] in u.dtype, accumulated in float32.

    A NaN or inf in one packed segment of u stays in it: positions holding one are zeroed before any path
    runs and that segment's outputs from there on are NaN (`segments.quarantine`, docs/numerics.md). The
    filter h is shared by every segment, so a NaN in h reaches every output.
    """
    _check(u, h, segment_ids)
    fn = select_implementation(_NAME, implementation, _IMPLEMENTATIONS, XLA_EVERYWHERE)
    # NumPy inputs are accepted like the other ops': the blocked path indexes `h` with traced lags.
    u, h = jnp.asarray(u), jnp.asarray(h)
    clean, _, tainted = segments.quarantine({"u": u}, segment_ids)
    # Segments are contiguous runs (ids 1, 2, 1 are three segments): the paths compare the run counts.
    runs = None if segment_ids is None else segments.segment_counts(segment_ids, *segment_ids.shape)
    return segments.poison(fn(clean["u"], h, segment_ids=runs), tainted)
