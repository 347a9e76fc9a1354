"""Public entry point of the gated delta rule: validation and `implementation=` dispatch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax

from icml26zoo.kernels._common import checks, segments
from icml26zoo.kernels._common.fla_hint import points_to_fla
from icml26zoo.kernels._dispatch import ALL_BACKENDS, XLA_EVERYWHERE, Implementations, select_implementation
from icml26zoo.kernels.delta_rule import pallas_chunk, reference, xla

# name -> # (function, backends it can run on). Pallas picks its lowering per platform when lowered
# (kernels/_common/lowering.py): interpreted on CPU, Triton on GPU, Mosaic on TPU.
_IMPLEMENTATIONS: Implementations = {
    "reference": (reference.gated_delta_rule, ALL_BACKENDS),
    "xla": (xla.gated_delta_rule, ALL_BACKENDS),
    "pallas": (pallas_chunk.gated_delta_rule, ALL_BACKENDS),
}
_NAME = "gated_delta_rule"


def _check_shapes(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, g: jax.Array | None,
                  initial_state: jax.Array | None, segment_ids: jax.Array | None) -> None:
    """Raises ValueError naming the argument, its shape and the expected shape."""
    checks.require_arrays(_NAME, {"q": q, "k": k, "v": v, "beta": beta, "g": g, "initial_state": initial_state,
                                  "segment_ids": segment_ids}, optional=("g", "initial_state", "segment_ids"))
    if q.ndim != 4:
        checks.fail_shape(_NAME, "q", q.shape, "[B, T, H, K]")
    checks.require_length(_NAME, "q", q)
    b, t, h, dk = q.shape
    if k.shape != q.shape:
        checks.fail_shape(_NAME, "k", k.shape, f"{(b, t, h, dk)} = q.shape")
    if v.ndim != 4 or v.shape[:3] != (b, t, h):
        checks.fail_shape(_NAME, "v", v.shape, f"[B, T, H, V] = ({b}, {t}, {h}, V)")
    if beta.shape != (b, t, h):
        checks.fail_shape(_NAME, "beta", beta.shape, f"{(b, t, h)} = [B, T, H]")
    if g is not None and g.shape not in ((b, t, h), (b, t, h, dk)):
        checks.fail_shape(_NAME, "g", g.shape, f"None, {(b, t, h)} = [B, T, H] or {(b, t, h, dk)} = [B, T, H, K]")
    if initial_state is not None and initial_state.shape != (b, h, dk, v.shape[-1]):
        checks.fail_shape(_NAME, "initial_state", initial_state.shape, f"{(b, h, dk, v.shape[-1])} = [B, H, K, V]")
    checks.check_segment_ids(_NAME, segment_ids, b, t)


def _check_dtypes(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, g: jax.Array | None,
                  initial_state: jax.Array | None) -> None:
    checks.require_floating(_NAME, {"q": q})
    checks.require_dtype_of(_NAME, "q", q, {"k": k, "v": v})
    checks.require_floating(_NAME, {"beta": beta, "g": g, "initial_state": initial_state})


def _check_values(beta: jax.Array, g: jax.Array | None, scale: float | None) -> None:
    """Range checks that NaN fails, on concrete inputs (traced ones only inside `kernels.checked`)."""
    checks.check_values(_NAME, "g", g, "finite and <= 0 (a log-decay)", hi=0.0)
    checks.check_values(_NAME, "beta", beta, "finite and in [0, 2]", lo=0.0, hi=2.0)
    checks.check_scale(_NAME, scale)


def _select(implementation: None | str | Sequence[str]) -> Callable:
    """First candidate that can run on the default backend; an explicit choice never falls back silently."""
    return select_implementation(_NAME, implementation, _IMPLEMENTATIONS, XLA_EVERYWHERE)


@points_to_fla("chunk_gated_delta_rule")
def gated_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, *, beta: jax.Array, g: jax.Array | None = None,
                     scale: float | None = None, initial_state: jax.Array | None = None,
                     segment_ids: jax.Array | None = None, chunk_size: int = 64,
                     implementation: None | str | Sequence[str] = None) -> tuple[jax.Array, jax.Array]:
    """Gated delta rule (DeltaNet / Gated DeltaNet / KDA).

    Per step: S <- exp(g) S; S <- S + beta k (v - S^T k)^T; o = S^T (scale q). No normalization inside
    (the layer L2-normalizes q and k).

    Args:
      q, k: [B, T, H, K] with T >= 1; v: [B, T, H, V] (same dtype); beta: [B, T, H] in [0, 2].
      g: None (DeltaNet), [B, T, H] (Gated DeltaNet) or [B, T, H, K] (KDA, decays the rows of S); <= 0.
      scale: multiplies q, a positive finite number; None means K**-0.5.
      initial_state: [B, H, K, V] or None (zeros); applies to the first segment of each row.
      segment_ids: [B, T] int; the state resets at every segment start, nothing crosses a boundary.
      chunk_size: one of CHUNK_SIZES (chunked paths; smaller is more accurate under strong decay).
      implementation: None (best for the backend), "reference", "xla", "pallas", or a sequence tried in
        order (the first one that can run on the backend).
    Returns:
      o [B, T, H, V] in q.dtype, final state [B, H, K, V] float32 (of each row's last segment).

    The range checks on g, beta and scale (NaN and inf fail them) run on concrete arrays; under `jit`/`grad`
    they are skipped unless the call is wrapped in `icml26zoo.kernels.checked`. A NaN or inf in one packed
    segment stays in it: positions holding one are zeroed before any path runs and that segment's outputs
    from there on are NaN (`segments.quarantine`, docs/numerics.md).
    """
    _check_shapes(q, k, v, beta, g, initial_state, segment_ids)
    _check_dtypes(q, k, v, beta, g, initial_state)
    checks.check_chunk_size(_NAME, chunk_size)
    _check_values(beta, g, scale)
    fn = _select(implementation)
    clean, state, tainted = segments.quarantine({"q": q, "k": k, "v": v, "beta": beta, "g": g}, segment_ids,
                                                initial_state)
    o, final = fn(clean["q"], clean["k"], clean["v"], beta=clean["beta"], g=clean["g"], scale=scale,
                  initial_state=state, segment_ids=segment_ids, chunk_size=chunk_size)
    return segments.poison(o, tainted), segments.poison_final_state(final, tainted)
