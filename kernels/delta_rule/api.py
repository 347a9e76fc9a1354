"""Public entry point of the gated delta rule: validation and `implementation=` dispatch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from kernels._common.chunks import CHUNK_SIZES
from kernels._dispatch import select_implementation
from kernels.delta_rule import pallas_chunk, reference, xla

# name -> (function, backends it can run on). Pallas runs in interpret mode on CPU only: the kernels have
# not been lowered and checked on a GPU/TPU backend yet, so naming it there raises instead of guessing.
_IMPLEMENTATIONS: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "reference": (reference.gated_delta_rule, ("cpu", "gpu", "tpu")),
    "xla": (xla.gated_delta_rule, ("cpu", "gpu", "tpu")),
    "pallas": (pallas_chunk.gated_delta_rule, ("cpu",)),
}
_DEFAULT = {"cpu": "xla", "gpu": "xla", "tpu": "xla"}


def _fail(name: str, shape: tuple[int, ...], expected: str) -> None:
    raise ValueError(f"gated_delta_rule: `{name}` has shape {tuple(shape)}, expected {expected}")


def _is_concrete(x: jax.Array) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_shapes(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, g: jax.Array | None,
                  initial_state: jax.Array | None, segment_ids: jax.Array | None) -> None:
    """Raises ValueError naming the argument, its shape and the expected shape."""
    if q.ndim != 4:
        _fail("q", q.shape, "[B, T, H, K]")
    b, t, h, dk = q.shape
    if k.shape != q.shape:
        _fail("k", k.shape, f"{(b, t, h, dk)} = q.shape")
    if v.ndim != 4 or v.shape[:3] != (b, t, h):
        _fail("v", v.shape, f"[B, T, H, V] = ({b}, {t}, {h}, V)")
    if beta.shape != (b, t, h):
        _fail("beta", beta.shape, f"{(b, t, h)} = [B, T, H]")
    if g is not None and g.shape not in ((b, t, h), (b, t, h, dk)):
        _fail("g", g.shape, f"None, {(b, t, h)} = [B, T, H] or {(b, t, h, dk)} = [B, T, H, K]")
    if initial_state is not None and initial_state.shape != (b, h, dk, v.shape[-1]):
        _fail("initial_state", initial_state.shape, f"{(b, h, dk, v.shape[-1])} = [B, H, K, V]")
    if segment_ids is not None and segment_ids.shape != (b, t):
        _fail("segment_ids", segment_ids.shape, f"{(b, t)} = [B, T]")


def _check_dtypes(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, g: jax.Array | None,
                  initial_state: jax.Array | None, segment_ids: jax.Array | None) -> None:
    if not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"gated_delta_rule: `q` has dtype {q.dtype}, expected a floating dtype")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise ValueError(f"gated_delta_rule: `{name}` has dtype {x.dtype}, expected q.dtype = {q.dtype}")
    for name, x in (("beta", beta), ("g", g), ("initial_state", initial_state)):
        if x is not None and not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"gated_delta_rule: `{name}` has dtype {x.dtype}, expected a floating dtype")
    if segment_ids is not None and not jnp.issubdtype(segment_ids.dtype, jnp.integer):
        raise ValueError(f"gated_delta_rule: `segment_ids` has dtype {segment_ids.dtype}, expected int")


def _check_values(beta: jax.Array, g: jax.Array | None) -> None:
    """Range checks on concrete inputs only (under jit/grad tracing the values are unknown; skipped)."""
    if g is not None and _is_concrete(g) and bool(np.any(np.asarray(g, np.float32) > 0)):
        raise ValueError(f"gated_delta_rule: `g` (shape {tuple(g.shape)}) is a log-decay and must be <= 0")
    if _is_concrete(beta):
        b = np.asarray(beta, np.float32)
        if bool(np.any((b < 0) | (b > 2))):
            raise ValueError(f"gated_delta_rule: `beta` (shape {tuple(beta.shape)}) must lie in [0, 2]")


def _select(implementation: None | str | Sequence[str]) -> Callable:
    """First candidate that can run on the default backend; an explicit choice never falls back silently."""
    return select_implementation("gated_delta_rule", implementation, _IMPLEMENTATIONS, _DEFAULT)


def gated_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, *, beta: jax.Array, g: jax.Array | None = None,
                     scale: float | None = None, initial_state: jax.Array | None = None,
                     segment_ids: jax.Array | None = None, chunk_size: int = 64,
                     implementation: None | str | Sequence[str] = None) -> tuple[jax.Array, jax.Array]:
    """Gated delta rule (DeltaNet / Gated DeltaNet / KDA).

    Per step: S <- exp(g) S; S <- S + beta k (v - S^T k)^T; o = S^T (scale q). No normalization inside
    (the layer L2-normalizes q and k).

    Args:
      q, k: [B, T, H, K]; v: [B, T, H, V] (same dtype); beta: [B, T, H] in [0, 2].
      g: None (DeltaNet), [B, T, H] (Gated DeltaNet) or [B, T, H, K] (KDA, decays the rows of S); <= 0.
      scale: multiplies q; None means K**-0.5.
      initial_state: [B, H, K, V] or None (zeros); applies to the first segment of each row.
      segment_ids: [B, T] int; the state resets at every segment start, nothing crosses a boundary.
      chunk_size: one of CHUNK_SIZES (chunked paths; smaller is more accurate under strong decay).
      implementation: None (best for the backend), "reference", "xla", "pallas", or a sequence tried in
        order (the first one that can run on the backend).
    Returns:
      o [B, T, H, V] in q.dtype, final state [B, H, K, V] float32 (of each row's last segment).

    The range checks on g and beta run only on concrete arrays; under `jit`/`grad` they are skipped.
    """
    _check_shapes(q, k, v, beta, g, initial_state, segment_ids)
    _check_dtypes(q, k, v, beta, g, initial_state, segment_ids)
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"gated_delta_rule: `chunk_size` is {chunk_size!r}, expected one of {CHUNK_SIZES}")
    _check_values(beta, g)
    fn = _select(implementation)
    return fn(q, k, v, beta=beta, g=g, scale=scale, initial_state=initial_state,
              segment_ids=segment_ids, chunk_size=chunk_size)
