"""Public entry point of value-forget attention (FiX): validation and `implementation=` dispatch.

FiX is a RECONSTRUCTION from the abstract of "FiX: Introducing Fine-grained Forget Gate into Softmax Attention"
(ICML 2026), not read from code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common import checks, segments
from icml26zoo.kernels._dispatch import ALL_BACKENDS, XLA_EVERYWHERE, select_implementation
from icml26zoo.kernels.value_forget_attention import pallas, reference, xla

# name -> (function, backends it can run on). "reference" materializes [T, T, Dv]: short sequences only.
_IMPLEMENTATIONS: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "reference": (reference.value_forget_attention, ALL_BACKENDS),
    "xla": (xla.value_forget_attention, ALL_BACKENDS),
    "pallas": (pallas.value_forget_attention, ALL_BACKENDS),
}
_DEFAULT = XLA_EVERYWHERE
_NAME = "value_forget_attention"


def _bad(name: str, x: jax.Array, expected: str) -> ValueError:
    return ValueError(f"value_forget_attention: `{name}` has shape {tuple(x.shape)} (dtype {x.dtype}); "
                      f"expected {expected}")


def _check_log_gate(name: str, gate: jax.Array, shape: tuple[int, ...]) -> None:
    """A log gate: the given shape, floating, and finite and ≤ 0 wherever its values are known (not traced)."""
    if gate.shape != shape or not jnp.issubdtype(gate.dtype, jnp.floating):
        dims = "[B, T, H, Dv]" if len(shape) == 4 else "[B, T, H]"
        raise _bad(name, gate, f"{dims} = {list(shape)}, floating (float32 advised)")
    checks.check_values(_NAME, name, gate, "finite and ≤ 0 (a log forget gate)", hi=0.0)


def _check_inputs(q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array, log_fgate: jax.Array | None,
                  segment_ids: jax.Array | None, block_size: int | None) -> None:
    """Raise ValueError naming the argument, its shape or value and what was expected."""
    checks.require_arrays(_NAME, {"q": q, "k": k, "v": v, "log_vgate": log_vgate, "log_fgate": log_fgate,
                                  "segment_ids": segment_ids}, optional=("log_fgate", "segment_ids"))
    if q.ndim != 4 or q.shape[1] < 1:
        raise _bad("q", q, "[B, T, H, D] with T ≥ 1")
    b, t, h, _ = q.shape
    hkv = checks.check_gqa_keys(q, k, _bad)
    if v.ndim != 4 or v.shape[:3] != (b, t, hkv):
        raise _bad("v", v, f"[B, T, Hkv, Dv] = [{b}, {t}, {hkv}, Dv]")
    if not jnp.issubdtype(q.dtype, jnp.floating) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"value_forget_attention: q, k, v must share one floating dtype; got {q.dtype}, "
                         f"{k.dtype}, {v.dtype} (shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)})")
    _check_log_gate("log_vgate", log_vgate, (b, t, h, v.shape[3]))
    if log_fgate is not None:
        _check_log_gate("log_fgate", log_fgate, (b, t, h))
    if segment_ids is not None and (segment_ids.shape != (b, t)
                                    or not jnp.issubdtype(segment_ids.dtype, jnp.integer)):
        raise _bad("segment_ids", segment_ids, f"[B, T] = [{b}, {t}], integer")
    checks.check_positive_int("value_forget_attention", "block_size", block_size, optional=True)


def value_forget_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array, *,
                           log_fgate: jax.Array | None = None, scale: float | None = None,
                           segment_ids: jax.Array | None = None, block_size: int | None = None, causal: bool = True,
                           implementation: None | str | Sequence[str] = None) -> jax.Array:
    """Value-forget attention (FiX): causal softmax attention with per-channel forget gates on the values.

    P_ij = softmax_{j ≤ i, same segment}(scale·q_i·k_j + Λ^f_i − Λ^f_j) and
    u_i = Σ_j P_ij · exp(Λ^v_i − Λ^v_j) ⊙ v_j, with Λ^v = cumsum(log_vgate) per value channel and
    Λ^f = cumsum(log_fgate). Every path builds these exponents as local sums of the log gates (never as
    differences of a global float32 cumsum). u is normalized by the softmax denominator; there is NO RMSNorm
    inside the op: the FiX mixer must apply the fp32 RMSNorm (eps 1e-6) that makes the denominator redundant.
    FiX is a reconstruction from the paper's abstract (docs/papers.md).

    Args:
      q: [B, T, H, D]. k: [B, T, Hkv, D]. v: [B, T, Hkv, Dv]; q, k, v share one floating dtype. GQA:
        query head h reads key/value head h // (H // Hkv).
      log_vgate: [B, T, H, Dv], finite and ≤ 0: per query head and value channel log forget gate (computed in float32).
      log_fgate: [B, T, H], finite and ≤ 0, or None: optional FoX scalar gate added to the logits.
      scale: logit scale, a positive finite number; None means D**-0.5.
      segment_ids: [B, T] int or None: packed sequences, nothing attends or decays across a boundary.
      block_size: query/key block of the blocked paths (None: their default); unused by "reference".
      causal: must be True (FiX is causal only); present so that non-causal use fails loudly.
      implementation: None (the backend default), "reference", "xla", "pallas", or a sequence tried in
        order; an explicitly named path that cannot run raises.

    Returns:
      u: [B, T, H, Dv] in v.dtype.

    Value checks (finite gates ≤ 0) run on concrete inputs; under `jit` they are skipped unless the call
    is wrapped in `icml26zoo.kernels.checked`. A NaN or inf in one packed segment stays in it: positions
    holding one are zeroed before any path runs and that segment's outputs from there on are NaN
    (`segments.quarantine`, docs/numerics.md).
    """
    if causal is not True:
        raise ValueError(f"value_forget_attention: causal={causal!r}: FiX is causal only; expected causal=True")
    _check_inputs(q, k, v, log_vgate, log_fgate, segment_ids, block_size)
    checks.check_scale(_NAME, scale)
    fn = select_implementation(_NAME, implementation, _IMPLEMENTATIONS, _DEFAULT)
    kwargs = {} if block_size is None else {"block_size": block_size}
    clean, _, tainted = segments.quarantine({"q": q, "k": k, "v": v, "log_vgate": log_vgate,
                                             "log_fgate": log_fgate}, segment_ids)
    u = fn(clean["q"], clean["k"], clean["v"], clean["log_vgate"], log_fgate=clean["log_fgate"], scale=scale,
           segment_ids=segment_ids, **kwargs)
    return segments.poison(u, tainted)
