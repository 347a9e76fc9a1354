"""Public entry point of the momentum delta rule: validation and `implementation=` dispatch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax

from icml26zoo.kernels._common import checks, segments
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
    states = {} if not isinstance(initial_state, tuple | list) else {
        f"initial_state[{i}]": x for i, x in enumerate(initial_state)}
    checks.require_arrays(_NAME, {"q": q, "k": k, "v": v, "p": p, **gates, **states, "segment_ids": segment_ids},
                          optional=("segment_ids",))
    if q.ndim != 4:
        checks.fail_shape(_NAME, "q", q.shape, "[B, T, H, K]")
    checks.require_length(_NAME, "q", q)
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


def _check_values(gates: dict[str, jax.Array], scale: float | None) -> None:
    """Range checks that NaN fails, on concrete inputs (traced ones only inside `kernels.checked`).

    log_mu must be finite: the chunked form sums log-gates by a matmul, where 0 * -inf is NaN; a large
    negative value such as -1e4 already gives mu = 0 exactly.
    """
    checks.check_values(_NAME, "g", gates["g"], "finite and <= 0 (a log-decay)", hi=0.0)
    checks.check_values(_NAME, "log_mu", gates["log_mu"], "finite and <= 0 (a log-decay; use e.g. -1e4 for "
                        "mu = 0)", hi=0.0)
    checks.check_values(_NAME, "beta", gates["beta"], "finite and in [0, 2]", lo=0.0, hi=2.0)
    checks.check_values(_NAME, "eta", gates["eta"], "finite and >= 0", lo=0.0)
    checks.check_scale(_NAME, scale)


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
      scale: multiplies q, a positive finite number; None means K**-0.5.
      initial_state: (S0, M0) each [B, H, K, V], or None (zeros); applies to the first segment of each row.
      segment_ids: [B, T] int; both states reset at every segment start, nothing crosses a boundary.
      chunk_size: one of CHUNK_SIZES (chunked path; smaller is more accurate under strong decay).
      implementation: None (best for the backend), "reference", "xla", "pallas",
        or a sequence tried in order (the first one that can run on the backend).
    Returns:
      o [B, T, H, V] in q.dtype, (S, M) final states each [B, H, K, V] float32 (of each row's last segment).

    The range checks on the gates and scale (NaN and inf fail them) run on concrete arrays; under
    `jit`/`grad` they are skipped unless the call is wrapped in `icml26zoo.kernels.checked`. A NaN or inf in
    one packed segment stays in it: positions holding one are zeroed before any path runs and that
    segment's outputs from there on are NaN (`segments.quarantine`, docs/numerics.md).
    """
    gates = dict(g=g, log_mu=log_mu, beta=beta, eta=eta)
    _check_shapes(q, k, v, p, gates, initial_state, segment_ids)
    _check_dtypes(q, k, v, p, gates, initial_state)
    checks.check_chunk_size(_NAME, chunk_size)
    _check_values(gates, scale)
    fn = _select(implementation)
    state = None if initial_state is None else tuple(initial_state)
    clean, state, tainted = segments.quarantine({"q": q, "k": k, "v": v, "p": p, **gates}, segment_ids, state)
    o, final = fn(clean["q"], clean["k"], clean["v"], p=clean["p"], g=clean["g"], log_mu=clean["log_mu"],
                  beta=clean["beta"], eta=clean["eta"], scale=scale, initial_state=state,
                  segment_ids=segment_ids, chunk_size=chunk_size)
    return segments.poison(o, tainted), segments.poison_final_state(final, tainted)
