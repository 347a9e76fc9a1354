"""Public entry point of the momentum delta rule: validation and `implementation=` dispatch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np

from icml26zoo.kernels._common import checks
from icml26zoo.kernels._dispatch import ALL_BACKENDS, XLA_EVERYWHERE, Implementations, select_implementation
from icml26zoo.kernels.momentum_delta_rule import pallas_chunk, reference, xla

_NAME = "momentum_delta_rule"

# name -> # (function, backends it can run on). Pallas picks its lowering per platform when lowered
# (kernels/_common/lowering.py): interpreted on CPU, Triton on GPU, Mosaic on TPU.
_IMPLEMENTATIONS: Implementations = {
    "reference": (reference.momentum_delta_rule, ALL_BACKENDS),
    "xla": (xla.momentum_delta_rule, ALL_BACKENDS),
    "pallas": (pallas_chunk.momentum_delta_rule, ALL_BACKENDS),
}


def _check_shapes(q: jax.Array, k: jax.Array, v: jax.Array, p: jax.Array, gates: dict[str, jax.Array],
                  initial_state: tuple[jax.Array, jax.Array] | None, segment_ids: jax.Array | None) -> None:
    """Raises ValueError naming the argument, its shape and the expected shape."""
    if q.ndim != 4:
        checks.fail_shape(_NAME, "q", q.shape, "[B, T, H, K]")
    b, t, h, dk = q.shape
    for name, x in (("k", k), ("p", p)):
        if x.shape != q.shape:
            checks.fail_shape(_NAME, name, x.shape, f"{(b, t, h, dk)} = q.shape")
    if v.ndim != 4 or v.shape[:3] != (b, t, h):
        checks.fail_shape(_NAME, "v", v.shape, f"[B, T, H, V] = ({b}, {t}, {h}, V)")
    for name, x in gates.items():
        if x.shape != (b, t, h):
            checks.fail_shape(_NAME, name, x.shape, f"{(b, t, h)} = [B, T, H]")
    if initial_state is not None:
        want = (b, h, dk, v.shape[-1])
        if not isinstance(initial_state, tuple | list) or len(initial_state) != 2:
            raise ValueError(f"{_NAME}: `initial_state` must be None or a pair (S0, M0), got "
                             f"{type(initial_state).__name__}")
        for name, x in zip(("initial_state[0]", "initial_state[1]"), initial_state, strict=True):
            if x.shape != want:
                checks.fail_shape(_NAME, name, x.shape, f"{want} = [B, H, K, V]")
    checks.check_segment_ids(_NAME, segment_ids, b, t)


def _check_dtypes(q: jax.Array, k: jax.Array, v: jax.Array, p: jax.Array, gates: dict[str, jax.Array],
                  initial_state: tuple[jax.Array, jax.Array] | None) -> None:
    checks.require_floating(_NAME, {"q": q})
    checks.require_dtype_of(_NAME, "q", q, {"k": k, "v": v, "p": p})
    states = {} if initial_state is None else {f"initial_state[{i}]": x for i, x in enumerate(initial_state)}
    checks.require_floating(_NAME, {**gates, **states})


def _check_values(gates: dict[str, jax.Array]) -> None:
    """Range checks on concrete inputs only (under jit/grad tracing the values are unknown; skipped).

    log_mu must be finite: the chunked form sums log-gates by a matmul, where 0 * -inf is NaN; a large
    negative value such as -1e4 already gives mu = 0 exactly.
    """
    concrete = {n: np.asarray(x, np.float32) for n, x in gates.items() if checks.is_concrete(x)}
    bounds = {"g": (-np.inf, 0.0), "log_mu": (-np.inf, 0.0), "beta": (0.0, 2.0), "eta": (0.0, np.inf)}
    text = {"g": "is a log-decay and must be finite and <= 0", "log_mu": "is a log-decay and must be finite "
            "and <= 0 (use e.g. -1e4 for mu = 0)", "beta": "must lie in [0, 2]", "eta": "must be finite, >= 0"}
    for name, x in concrete.items():
        lo, hi = bounds[name]
        if not np.all(np.isfinite(x)) or bool(np.any((x < lo) | (x > hi))):
            raise ValueError(f"{_NAME}: `{name}` (shape {x.shape}) {text[name]}")


def _select(implementation: None | str | Sequence[str]) -> Callable:
    """First candidate that can run on the default backend; an explicit choice never falls back silently."""
    return select_implementation(_NAME, implementation, _IMPLEMENTATIONS, XLA_EVERYWHERE)


def momentum_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, p: jax.Array, *, g: jax.Array, log_mu: jax.Array,
                        beta: jax.Array, eta: jax.Array, scale: float | None = None,
                        initial_state: tuple[jax.Array, jax.Array] | None = None,
                        segment_ids: jax.Array | None = None, chunk_size: int = 64,
                        implementation: None | str | Sequence[str] = None,
                        ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Momentum delta rule (Momentum DeltaNet, MDN: Huang et al., ICML 2026, arXiv 2605.05838).

    Per step: e = S^T p - v; M <- exp(log_mu) M + (eta k) e^T; S <- exp(g) S - beta M; o = S^T (scale q).
    With p = exp(g) k and log_mu -> -inf it is the gated delta rule with beta * eta.

    Args:
      q, k, p: [B, T, H, K]; v: [B, T, H, V] (all one dtype).
      g, log_mu: [B, T, H] log-decays (finite, <= 0); beta: [B, T, H] in [0, 2]; eta: [B, T, H] >= 0.
      scale: multiplies q; None means K**-0.5.
      initial_state: (S0, M0) each [B, H, K, V], or None (zeros); applies to the first segment of each row.
      segment_ids: [B, T] int; both states reset at every segment start, nothing crosses a boundary.
      chunk_size: one of CHUNK_SIZES (chunked path; smaller is more accurate under strong decay).
      implementation: None (best for the backend), "reference", "xla", "pallas",
        or a sequence tried in order (the first one that can run on the backend).
    Returns:
      o [B, T, H, V] in q.dtype, (S, M) final states each [B, H, K, V] float32 (of each row's last segment).

    The range checks on the gates run only on concrete arrays; under `jit`/`grad` they are skipped.
    """
    gates = dict(g=g, log_mu=log_mu, beta=beta, eta=eta)
    _check_shapes(q, k, v, p, gates, initial_state, segment_ids)
    _check_dtypes(q, k, v, p, gates, initial_state)
    checks.check_chunk_size(_NAME, chunk_size)
    _check_values(gates)
    fn = _select(implementation)
    state = None if initial_state is None else tuple(initial_state)
    return fn(q, k, v, p=p, g=g, log_mu=log_mu, beta=beta, eta=eta, scale=scale, initial_state=state,
              segment_ids=segment_ids, chunk_size=chunk_size)
