"""Public entry point of forgetting attention (FoX): validation and `implementation=` dispatch."""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from kernels.forgetting_attention import pallas, reference, xla

_IMPLEMENTATIONS = {
    "reference": reference.forgetting_attention,
    "xla": xla.forgetting_attention,
    "pallas": pallas.forgetting_attention,
}
# Best path per backend for implementation=None. The blocked XLA path is the portable default; the Pallas
# kernels are tested in interpret mode on CPU only, so they are opt-in until measured on a device.
_DEFAULT = {"cpu": "xla", "gpu": "xla", "tpu": "xla"}


def _unavailable_reason(name, backend):
    """Why `name` cannot run on `backend`, or None when it can."""
    if name == "pallas" and backend == "tpu":
        return "the Pallas kernels are GPU-style (Triton) and have no Mosaic TPU lowering"
    return None


def _candidates(implementation):
    """Names to try, in order. An unknown name raises; None means the backend's default."""
    if implementation is None:
        return [_DEFAULT.get(jax.default_backend(), "xla")]
    if isinstance(implementation, str):
        names = [implementation]
    elif isinstance(implementation, Sequence) and implementation:
        names = list(implementation)
    else:
        raise ValueError(f"implementation must be None, a name or a sequence of names; "
                         f"got {implementation!r}")
    for name in names:
        if name not in _IMPLEMENTATIONS:
            raise ValueError(f"implementation {name!r} is unknown; "
                             f"expected one of {sorted(_IMPLEMENTATIONS)}")
    return names


def _select(implementation):
    """The first candidate that can run here; raise (never fall back silently) when none can."""
    backend = jax.default_backend()
    reasons = []
    for name in _candidates(implementation):
        reason = _unavailable_reason(name, backend)
        if reason is None:
            return _IMPLEMENTATIONS[name]
        reasons.append(f"{name!r}: {reason}")
    raise NotImplementedError(f"no requested implementation can run on backend {backend!r}: {reasons}")


def _bad(name, x, expected):
    return ValueError(f"{name} has shape {tuple(x.shape)} (dtype {x.dtype}); expected {expected}")


def _check_inputs(q, k, v, log_fgate, segment_ids):
    """Raise ValueError naming the argument, its shape and the expected shape."""
    if q.ndim != 4:
        raise _bad("q", q, "[B, T, H, D]")
    b, t, h, d = q.shape
    if k.ndim != 4 or k.shape[:2] != (b, t) or k.shape[3] != d:
        raise _bad("k", k, f"[B, T, Hkv, D] = [{b}, {t}, Hkv, {d}]")
    hkv = k.shape[2]
    if hkv == 0 or h % hkv != 0:
        raise _bad("k", k, f"a number of key/value heads Hkv that divides H = {h}")
    if v.shape != k.shape:
        raise _bad("v", v, f"the shape of k {tuple(k.shape)}")
    if not jnp.issubdtype(q.dtype, jnp.floating) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one floating dtype; got {q.dtype}, {k.dtype}, {v.dtype} "
                         f"(shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)})")
    if log_fgate is not None:
        if log_fgate.shape != (b, t, h) or not jnp.issubdtype(log_fgate.dtype, jnp.floating):
            raise _bad("log_fgate", log_fgate, f"[B, T, H] = [{b}, {t}, {h}], floating (float32 advised)")
        # numpy, not jnp: inside an outer jit a captured concrete array would be traced by jnp.any.
        if not isinstance(log_fgate, jax.core.Tracer) and bool(np.any(np.asarray(log_fgate) > 0)):
            raise ValueError(f"log_fgate (shape {tuple(log_fgate.shape)}) must be ≤ 0 (a log forget gate); "
                             f"max is {float(np.max(np.asarray(log_fgate)))}")
    if segment_ids is not None and (segment_ids.shape != (b, t)
                                    or not jnp.issubdtype(segment_ids.dtype, jnp.integer)):
        raise _bad("segment_ids", segment_ids, f"[B, T] = [{b}, {t}], integer")


def forgetting_attention(q, k, v, log_fgate, *, scale=None, segment_ids=None, causal=True,
                         implementation=None):
    """Forgetting attention (FoX): causal softmax attention with a scalar forget gate per head and token.

    o_i = Σ_{j ≤ i} softmax_j(scale·q_i·k_j + Σ_{l=j+1..i} log_fgate_l) v_j, i.e. logits
    scale·q_i·k_j + Λ_i − Λ_j with Λ = cumsum(log_fgate) (every path builds these sums locally).

    Args:
      q: [B, T, H, D]. k, v: [B, T, Hkv, D], same dtype as q; query head h reads kv head h // (H // Hkv).
      log_fgate: [B, T, H], ≤ 0 (log of the forget gate, one per query head), computed in float32.
        None skips the gate terms: plain causal attention (same result as all zeros, less work).
      scale: logit scale; None means D**-0.5.
      segment_ids: [B, T] int for packed sequences; no attention across segments.
      causal: must be True (FoX is causal only); present so that non-causal use fails loudly.
      implementation: None (best for the backend), "reference", "xla", "pallas", or a sequence of those
        tried in order; an explicitly named path that cannot run raises.

    Returns:
      o: [B, T, H, D] in q.dtype.
    """
    if causal is not True:
        raise ValueError(f"causal={causal!r}: forgetting attention is causal only; expected causal=True")
    _check_inputs(q, k, v, log_fgate, segment_ids)
    return _select(implementation)(q, k, v, log_fgate, scale=scale, segment_ids=segment_ids)
