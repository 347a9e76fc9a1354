"""Public entry point of SSD (Mamba2 scalar decay and diagonal decay): validation and dispatch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from kernels._dispatch import select_implementation
from kernels.ssd import attention_form, pallas_chunk, reference, xla

CHUNK_SIZES = (16, 32, 64, 128)
_ALL = ("cpu", "gpu", "tpu")

# name -> (function, backends it can run on). "attention" is the O(T^2) masked-attention oracle: it runs
# everywhere but is never a default. Pallas is registered for CPU (interpret mode) only: its kernels have
# not been lowered and checked on a GPU/TPU backend, so naming it there raises instead of guessing.
_IMPLEMENTATIONS: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "reference": (reference.ssd, _ALL),
    "xla": (xla.ssd, _ALL),
    "attention": (attention_form.ssd, _ALL),
    "pallas": (pallas_chunk.ssd, ("cpu",)),
}
_DEFAULT = {"cpu": "xla", "gpu": "xla", "tpu": "xla"}


def _fail(name: str, shape: Sequence[int], expected: str) -> None:
    raise ValueError(f"ssd: `{name}` has shape {tuple(shape)}, expected {expected}")


def _check_shapes(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, initial_state: jax.Array | None,
                  segment_ids: jax.Array | None) -> None:
    """Raises ValueError naming the argument, its shape and the expected shape."""
    if x.ndim != 4:
        _fail("x", x.shape, "[B, T, H, P] (4 dims)")
    bsz, seqlen, heads, p = x.shape
    if b.ndim != 4 or b.shape[:3] != (bsz, seqlen, heads):
        _fail("b", b.shape, f"[B, T, H, N] = ({bsz}, {seqlen}, {heads}, N)")
    n = b.shape[-1]
    if c.shape != b.shape:
        _fail("c", c.shape, f"{b.shape} = b.shape [B, T, H, N]")
    if a.shape not in ((bsz, seqlen, heads), (bsz, seqlen, heads, n)):
        _fail("a", a.shape, f"{(bsz, seqlen, heads)} = [B, T, H] or {(bsz, seqlen, heads, n)} = [B, T, H, N]")
    if initial_state is not None and initial_state.shape != (bsz, heads, p, n):
        _fail("initial_state", initial_state.shape, f"{(bsz, heads, p, n)} = [B, H, P, N]")
    if segment_ids is not None and segment_ids.shape != (bsz, seqlen):
        _fail("segment_ids", segment_ids.shape, f"{(bsz, seqlen)} = [B, T]")
    if seqlen < 1:
        _fail("x", x.shape, "T >= 1")


def _check_dtypes(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, initial_state: jax.Array | None,
                  segment_ids: jax.Array | None) -> None:
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"ssd: `x` has dtype {x.dtype}, expected a floating dtype")
    for name, z in (("b", b), ("c", c)):
        if z.dtype != x.dtype:
            raise ValueError(f"ssd: `{name}` has dtype {z.dtype}, expected x.dtype = {x.dtype}")
    for name, z in (("a", a), ("initial_state", initial_state)):
        if z is not None and not jnp.issubdtype(z.dtype, jnp.floating):
            raise ValueError(f"ssd: `{name}` has dtype {z.dtype}, expected a floating dtype")
    if segment_ids is not None and not jnp.issubdtype(segment_ids.dtype, jnp.integer):
        raise ValueError(f"ssd: `segment_ids` has dtype {segment_ids.dtype}, expected an integer dtype")


def _check_values(a: jax.Array) -> None:
    """Range check on a concrete `a` only (under jit/grad tracing the values are unknown; skipped)."""
    if isinstance(a, jax.core.Tracer):
        return
    if bool(np.any(np.asarray(a, np.float32) > 0)):
        raise ValueError(f"ssd: `a` (shape {tuple(a.shape)}) is a log-decay (A times dt) and must be <= 0; "
                         "a positive value would make the state grow")


def _select(implementation: None | str | Sequence[str]) -> Callable:
    """First candidate that can run on the default backend; an explicit choice never falls back silently."""
    return select_implementation("ssd", implementation, _IMPLEMENTATIONS, _DEFAULT)


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

    The sign check on `a` runs only on concrete arrays; under `jit`/`grad` it is skipped.
    """
    _check_shapes(x, a, b, c, initial_state, segment_ids)
    _check_dtypes(x, a, b, c, initial_state, segment_ids)
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"ssd: `chunk_size` is {chunk_size!r}, expected one of {CHUNK_SIZES}")
    _check_values(a)
    fn = _select(implementation)
    return fn(x, a, b, c, initial_state=initial_state, segment_ids=segment_ids, chunk_size=chunk_size)
