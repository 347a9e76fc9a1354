"""Public entry point of SSD (Mamba2 scalar decay and diagonal decay): validation and dispatch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax

from icml26zoo.kernels._common import checks, segments
from icml26zoo.kernels._common.fla_hint import points_to_fla
from icml26zoo.kernels._dispatch import ALL_BACKENDS, XLA_EVERYWHERE, Implementations, select_implementation
from icml26zoo.kernels.ssd import attention_form, pallas_chunk, reference, xla

_NAME = "ssd"

# name -> (function, backends it can run on). "attention" is the O(T^2) masked-attention oracle: it runs
# everywhere but is never a default. Pallas picks its lowering per platform when lowered
# (kernels/_common/lowering.py): interpreted on CPU, Triton on GPU, Mosaic on TPU.
_IMPLEMENTATIONS: Implementations = {
    "reference": (reference.ssd, ALL_BACKENDS),
    "xla": (xla.ssd, ALL_BACKENDS),
    "attention": (attention_form.ssd, ALL_BACKENDS),
    "pallas": (pallas_chunk.ssd, ALL_BACKENDS),
}


def _check_shapes(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, initial_state: jax.Array | None,
                  segment_ids: jax.Array | None) -> None:
    """Raises ValueError naming the argument, its shape and the expected shape."""
    checks.require_arrays(_NAME, {"x": x, "a": a, "b": b, "c": c, "initial_state": initial_state,
                                  "segment_ids": segment_ids}, optional=("initial_state", "segment_ids"))
    if x.ndim != 4:
        checks.fail_shape(_NAME, "x", x.shape, "[B, T, H, P] (4 dims)")
    bsz, seqlen, heads, p = x.shape
    if b.ndim != 4 or b.shape[:3] != (bsz, seqlen, heads):
        checks.fail_shape(_NAME, "b", b.shape, f"[B, T, H, N] = ({bsz}, {seqlen}, {heads}, N)")
    n = b.shape[-1]
    if c.shape != b.shape:
        checks.fail_shape(_NAME, "c", c.shape, f"{b.shape} = b.shape [B, T, H, N]")
    if a.shape not in ((bsz, seqlen, heads), (bsz, seqlen, heads, n)):
        checks.fail_shape(_NAME, "a", a.shape,
                          f"{(bsz, seqlen, heads)} = [B, T, H] or {(bsz, seqlen, heads, n)} = [B, T, H, N]")
    if initial_state is not None and initial_state.shape != (bsz, heads, p, n):
        checks.fail_shape(_NAME, "initial_state", initial_state.shape, f"{(bsz, heads, p, n)} = [B, H, P, N]")
    checks.check_segment_ids(_NAME, segment_ids, bsz, seqlen)
    if seqlen < 1:
        checks.fail_shape(_NAME, "x", x.shape, "T >= 1")


def _check_dtypes(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, initial_state: jax.Array | None) -> None:
    checks.require_floating(_NAME, {"x": x})
    checks.require_dtype_of(_NAME, "x", x, {"b": b, "c": c})
    checks.require_floating(_NAME, {"a": a, "initial_state": initial_state})


def _check_values(a: jax.Array) -> None:
    """The sign check on `a`, which NaN fails, on a concrete `a` (a traced one only inside `kernels.checked`)."""
    checks.check_values(_NAME, "a", a, "finite and <= 0 (a log-decay, A times dt; a positive value would "
                        "make the state grow)", hi=0.0)


def _select(implementation: None | str | Sequence[str]) -> Callable:
    """First candidate that can run on the default backend; an explicit choice never falls back silently."""
    return select_implementation(_NAME, implementation, _IMPLEMENTATIONS, XLA_EVERYWHERE)


@points_to_fla("chunk_simple_gla")
def ssd(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, *, initial_state: jax.Array | None = None,
        segment_ids: jax.Array | None = None, chunk_size: int = 64,
        implementation: None | str | Sequence[str]=None) -> tuple[jax.Array, jax.Array]:
    """Structured state-space duality (Mamba2 SSD, Dao & Gu, arXiv 2405.21060), scalar or diagonal decay.

    Per step, state S [P, N] per (batch, head): S <- S diag(exp(a_t)) + x_t b_t^T; y_t = S c_t.

    Args:
      x: [B, T, H, P], the input already multiplied by dt.
      a: [B, T, H] (Mamba2: A times dt, one decay per head) or [B, T, H, N] (diagonal SSM); log-decay <= 0.
      b, c: [B, T, H, N], same dtype as x (B is not multiplied by dt).
      initial_state: [B, H, P, N] or None (zeros); applies to the first segment of each row.
      segment_ids: [B, T] int (packed sequences): the state resets to zero at every segment start.
      chunk_size: one of CHUNK_SIZES (chunked paths; smaller is more accurate under strong decay).
      implementation: None (best for the backend: "xla"), "reference", "xla", "attention" (O(T^2)
        oracle), "pallas", or a sequence tried in order (the first that can run on the backend).
    Returns:
      y [B, T, H, P] in x.dtype, final state [B, H, P, N] float32 (of each row's last segment).

    The check that `a` is finite and <= 0 runs on concrete arrays; under `jit`/`grad` it is skipped unless
    the call is wrapped in `icml26zoo.kernels.checked`. A NaN or inf in one packed segment stays in it:
    positions holding one are zeroed before any path runs and that segment's outputs from there on are NaN
    (`segments.quarantine`, docs/numerics.md).
    """
    _check_shapes(x, a, b, c, initial_state, segment_ids)
    _check_dtypes(x, a, b, c, initial_state)
    checks.check_chunk_size(_NAME, chunk_size)
    _check_values(a)
    fn = _select(implementation)
    clean, state, tainted = segments.quarantine({"x": x, "a": a, "b": b, "c": c}, segment_ids, initial_state)
    y, final = fn(clean["x"], clean["a"], clean["b"], clean["c"], initial_state=state, segment_ids=segment_ids,
                  chunk_size=chunk_size)
    return segments.poison(y, tainted), segments.poison_final_state(final, tainted)
