"""Public entry point of forgetting attention (FoX): validation and `implementation=` dispatch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common import checks, segments
from icml26zoo.kernels._common.fla_hint import points_to_fla
from icml26zoo.kernels._dispatch import ALL_BACKENDS, XLA_EVERYWHERE, select_implementation
from icml26zoo.kernels.forgetting_attention import pallas, reference, xla

# name -> (function, backends it can run on). Pallas picks its lowering per platform when lowered
# (kernels/_common/lowering.py): interpreted on CPU, Triton on GPU, Mosaic on TPU.
_IMPLEMENTATIONS: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "reference": (reference.forgetting_attention, ALL_BACKENDS),
    "xla": (xla.forgetting_attention, ALL_BACKENDS),
    "pallas": (pallas.forgetting_attention, ALL_BACKENDS),
}
# Best path per backend for implementation=None: XLA until a run on the hardware shows Pallas correct and faster.
_DEFAULT = XLA_EVERYWHERE
_NAME = "forgetting_attention"


def _bad(name: str, x: jax.Array, expected: str) -> ValueError:
    return ValueError(f"{_NAME}: `{name}` has shape {tuple(x.shape)} (dtype {x.dtype}); expected {expected}")


def _check_inputs(q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None,
                  segment_ids: jax.Array | None) -> None:
    """Raise ValueError naming the argument, its shape and the expected shape."""
    checks.require_arrays(_NAME, {"q": q, "k": k, "v": v, "log_fgate": log_fgate, "segment_ids": segment_ids},
                          optional=("log_fgate", "segment_ids"))
    if q.ndim != 4 or q.shape[1] < 1:
        raise _bad("q", q, "[B, T, H, D] with T ≥ 1")
    b, t, h, _ = q.shape
    checks.check_gqa_keys(q, k, _bad)
    if v.shape != k.shape:
        raise _bad("v", v, f"the shape of k {tuple(k.shape)}")
    if not jnp.issubdtype(q.dtype, jnp.floating) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"{_NAME}: q, k, v must share one floating dtype; got {q.dtype}, {k.dtype}, {v.dtype} "
                         f"(shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)})")
    if log_fgate is not None:
        if log_fgate.shape != (b, t, h) or not jnp.issubdtype(log_fgate.dtype, jnp.floating):
            raise _bad("log_fgate", log_fgate, f"[B, T, H] = [{b}, {t}, {h}], floating (float32 advised)")
        checks.check_values(_NAME, "log_fgate", log_fgate, "finite and ≤ 0 (a log forget gate)", hi=0.0)
    if segment_ids is not None and (segment_ids.shape != (b, t)
                                    or not jnp.issubdtype(segment_ids.dtype, jnp.integer)):
        raise _bad("segment_ids", segment_ids, f"[B, T] = [{b}, {t}], integer")


@points_to_fla("parallel_forgetting_attn")
def forgetting_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None, *,
                         scale: float | None = None, segment_ids: jax.Array | None = None, causal: bool = True,
                         implementation: None | str | Sequence[str] = None) -> jax.Array:
    """Forgetting attention (FoX): causal softmax attention with a scalar forget gate per head and token.

    o_i = Σ_{j ≤ i} softmax_j(scale·q_i·k_j + Σ_{l=j+1..i} log_fgate_l) v_j, i.e. logits
    scale·q_i·k_j + Λ_i − Λ_j with Λ = cumsum(log_fgate) (every path builds these sums locally).

    Args:
      q: [B, T, H, D]. k, v: [B, T, Hkv, D], same dtype as q; query head h reads kv head h // (H // Hkv).
      log_fgate: [B, T, H], finite and ≤ 0 (log of the forget gate, one per query head), computed in float32.
        None skips the gate terms: plain causal attention (same result as all zeros, less work).
      scale: logit scale, a positive finite number; None means D**-0.5.
      segment_ids: [B, T] int for packed sequences; no attention across segments.
      causal: must be True (FoX is causal only); present so that non-causal use fails loudly.
      implementation: None (best for the backend), "reference", "xla", "pallas", or a sequence of those
        tried in order; an explicitly named path that cannot run raises (RuntimeError; an unknown name
        raises ValueError).

    Returns:
      o: [B, T, H, D] in q.dtype.

    Value checks (finite gates ≤ 0) run on concrete inputs; under `jit` they are skipped unless the call
    is wrapped in `icml26zoo.kernels.checked`. A NaN or inf in one packed segment stays in it: positions
    holding one are zeroed before any path runs and that segment's outputs from there on are NaN
    (`segments.quarantine`, docs/numerics.md).
    """
    if causal is not True:
        raise ValueError(f"{_NAME}: causal={causal!r}: forgetting attention is causal only; expected causal=True")
    _check_inputs(q, k, v, log_fgate, segment_ids)
    checks.check_scale(_NAME, scale)
    fn = select_implementation(_NAME, implementation, _IMPLEMENTATIONS, _DEFAULT)
    clean, _, tainted = segments.quarantine({"q": q, "k": k, "v": v, "log_fgate": log_fgate}, segment_ids)
    o = fn(clean["q"], clean["k"], clean["v"], clean["log_fgate"], scale=scale, segment_ids=segment_ids)
    return segments.poison(o, tainted)
