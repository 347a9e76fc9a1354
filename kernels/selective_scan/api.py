"""Public entry point of the selective scan (Mamba1's diagonal SSM): validation and dispatch."""

from __future__ import annotations

import reprlib
from collections.abc import Sequence

import jax
import numpy as np

from icml26zoo.kernels._common import checks
from icml26zoo.kernels._common.chunks import CHUNK_SIZES
from icml26zoo.kernels._dispatch import ALL_BACKENDS, XLA_EVERYWHERE, Implementations, select_implementation
from icml26zoo.kernels.selective_scan import pallas, reference, xla

_NAME = "selective_scan"

# name -> (function, backends it can run on). "pallas" keeps the [D_block, N] state on chip instead of
# materializing the chunk's [B, Q, D_in, N] states; "xla" stays the default until a run on the hardware
# shows the kernel correct and faster there.
_IMPLEMENTATIONS: Implementations = {
    "reference": (reference.selective_scan, ALL_BACKENDS),
    "xla": (xla.selective_scan, ALL_BACKENDS),
    "pallas": (pallas.selective_scan, ALL_BACKENDS),
}


def _check_shapes(u: jax.Array, delta: jax.Array, A: jax.Array, B: jax.Array, C: jax.Array, D: jax.Array | None,
                  initial_state: jax.Array | None, segment_ids: jax.Array | None) -> None:
    """Raises ValueError naming the argument, its shape and the expected shape."""
    if u.ndim != 3:
        checks.fail_shape(_NAME, "u", u.shape, "[B, T, D_in] (3 dims)")
    bsz, seqlen, d_in = u.shape
    if seqlen < 1:
        checks.fail_shape(_NAME, "u", u.shape, "T >= 1")
    if delta.shape != u.shape:
        checks.fail_shape(_NAME, "delta", delta.shape, f"{u.shape} = u.shape [B, T, D_in]")
    if A.ndim != 2 or A.shape[0] != d_in:
        checks.fail_shape(_NAME, "A", A.shape, f"[D_in, N] = ({d_in}, N)")
    n = A.shape[1]
    for name, z in (("B", B), ("C", C)):
        if z.shape != (bsz, seqlen, n):
            checks.fail_shape(_NAME, name, z.shape, f"{(bsz, seqlen, n)} = [B, T, N]")
    if D is not None and D.shape != (d_in,):
        checks.fail_shape(_NAME, "D", D.shape, f"{(d_in,)} = [D_in]")
    if initial_state is not None and initial_state.shape != (bsz, d_in, n):
        checks.fail_shape(_NAME, "initial_state", initial_state.shape, f"{(bsz, d_in, n)} = [B, D_in, N]")
    checks.check_segment_ids(_NAME, segment_ids, bsz, seqlen)


def _check_dtypes(u: jax.Array, delta: jax.Array, A: jax.Array, B: jax.Array, C: jax.Array, D: jax.Array | None,
                  initial_state: jax.Array | None) -> None:
    checks.require_floating(_NAME, {"u": u})
    checks.require_dtype_of(_NAME, "u", u, {"B": B, "C": C})
    checks.require_floating(_NAME, {"delta": delta, "A": A, "D": D, "initial_state": initial_state})


# The arguments that may be None; the others (u, delta, A, B, C) are required arrays.
_OPTIONAL = ("D", "initial_state", "segment_ids")


def _check_arrays(arrays: dict[str, object]) -> None:
    """Every argument is a JAX or NumPy array, not a list or a scalar (None only for the `_OPTIONAL` ones)."""
    for name, x in arrays.items():
        if x is None and name in _OPTIONAL:
            continue
        if not isinstance(x, (jax.Array, np.ndarray)):
            allowed = " or None" if name in _OPTIONAL else ""
            raise ValueError(f"{_NAME}: `{name}` is {reprlib.repr(x)} (a {type(x).__name__}), expected a jax "
                             f"or numpy array{allowed}")


def _check_chunk_size(chunk_size: object) -> None:
    """An integer from CHUNK_SIZES; 64.0 or "64" are refused even where they compare equal to one."""
    if not checks.is_int(chunk_size):
        raise ValueError(f"{_NAME}: `chunk_size` is {chunk_size!r} (a {type(chunk_size).__name__}), expected an "
                         f"int, one of {CHUNK_SIZES}")
    checks.check_chunk_size(_NAME, int(chunk_size))


def _check_values(A: jax.Array, delta: jax.Array) -> None:
    """Range checks on concrete `A` and `delta`; traced ones only inside `icml26zoo.kernels.checked`.

    Written as "not (x in range)", so that a NaN, which fails every comparison, is refused too.
    """
    tiny = float(np.finfo(np.float32).tiny)
    if not checks.is_concrete(A):
        checks.check_values(_NAME, "A", A, "finite and < 0 (A = -exp(A_log))", hi=-tiny)
    if not checks.is_concrete(delta):
        checks.check_values(_NAME, "delta", delta, "finite and > 0 (the step Δ after softplus)", lo=tiny)
    if checks.is_concrete(A):
        a = np.asarray(A, np.float32)
        if np.any(~(a < 0)):
            raise ValueError(f"{_NAME}: `A` (shape {tuple(A.shape)}) has {int(np.sum(~(a < 0)))} entries that are "
                             "not < 0 (NaN or >= 0), expected A < 0 (A = -exp(A_log)); a non-negative entry would "
                             "make the state grow or never forget")
    if checks.is_concrete(delta):
        dt = np.asarray(delta, np.float32)
        bad = ~((dt > 0) & np.isfinite(dt))
        if np.any(bad):
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{_NAME}: `delta` has {int(np.sum(bad))} entries that are not finite and > 0 (the "
                             f"first at {first}: {dt[first]}), expected the step Δ > 0 and finite (after softplus)")


def selective_scan(u: jax.Array, delta: jax.Array, A: jax.Array, B: jax.Array, C: jax.Array, *,
                   D: jax.Array | None = None, initial_state: jax.Array | None = None,
                   segment_ids: jax.Array | None = None, chunk_size: int = 64,
                   implementation: None | str | Sequence[str] = None) -> tuple[jax.Array, jax.Array]:
    """Mamba1's selective scan (Gu & Dao, arXiv 2312.00752): a diagonal SSM with input-dependent Δ, B and C.

    Per step, per channel d and state n: h[d, n] <- exp(Δ_t[d] A[d, n]) h[d, n] + Δ_t[d] u_t[d] B_t[n];
    y_t[d] = Σ_n h[d, n] C_t[n] + D[d] u_t[d].

    Args:
      u: [B, T, D_in] the input (a floating dtype); delta: [B, T, D_in] the step Δ > 0 (after softplus;
        used in float32 whatever its dtype).
      A: [D_in, N], < 0 (A = -exp(A_log)).
      B, C: [B, T, N], same dtype as u, shared by all channels.
      D: [D_in] or None (no skip).
      initial_state: [B, D_in, N] or None (zeros); applies to the first segment of each row.
      segment_ids: [B, T] int (packed sequences): the state resets to zero at every segment start.
      chunk_size: one of CHUNK_SIZES (the "xla" path's chunk; only memory and speed depend on it).
      implementation: None (best for the backend: "xla"), "reference", "xla", "pallas" (the state kept on
        chip: Triton on GPU, Mosaic on TPU, interpreted on CPU), or a sequence tried in order (the first
        that can run on the backend); an explicit name never falls back silently.
    Returns:
      y [B, T, D_in] in u.dtype, final state [B, D_in, N] float32 (of each row's last segment).

    The value checks (A < 0; Δ > 0 and finite; NaN fails both) run only on concrete arrays; under
    `jit`/`grad` they are skipped. A NaN inside one packed segment never reaches another segment's outputs
    or gradients, in every implementation.
    """
    _check_arrays({"u": u, "delta": delta, "A": A, "B": B, "C": C, "D": D, "initial_state": initial_state,
                   "segment_ids": segment_ids})
    _check_shapes(u, delta, A, B, C, D, initial_state, segment_ids)
    _check_dtypes(u, delta, A, B, C, D, initial_state)
    _check_chunk_size(chunk_size)
    _check_values(A, delta)
    fn = select_implementation(_NAME, implementation, _IMPLEMENTATIONS, XLA_EVERYWHERE)
    return fn(u, delta, A, B, C, D=D, initial_state=initial_state, segment_ids=segment_ids, chunk_size=chunk_size)
