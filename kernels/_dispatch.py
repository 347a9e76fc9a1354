"""The `implementation=` rule shared by the ops' api.py files.

`None` picks the backend's default; a name or a sequence of names is tried in order, and an explicitly
named path that cannot run on the current backend raises instead of silently falling back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import jax

Implementations = Mapping[str, tuple[Callable, tuple[str, ...]]]
ALL_BACKENDS = ("cpu", "gpu", "tpu")
# Every op defaults to its chunked XLA path on every backend.
XLA_EVERYWHERE = {backend: "xla" for backend in ALL_BACKENDS}


def candidate_names(op: str, implementation: None | str | Sequence[str], implementations: Implementations,
                    defaults: Mapping[str, str]) -> list[str]:
    """The implementation names to try, validated against `implementations` (ValueError naming `op`)."""
    if implementation is None:
        return [defaults.get(jax.default_backend(), "xla")]
    names = [implementation] if isinstance(implementation, str) else list(implementation)
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{op}: bad `implementation` {implementation!r}")
    unknown = [n for n in names if n not in implementations]
    if unknown:
        raise ValueError(f"{op}: unknown implementation(s) {unknown}; expected one of {sorted(implementations)}")
    return names


def select_implementation(op: str, implementation: None | str | Sequence[str], implementations: Implementations,
                          defaults: Mapping[str, str]) -> Callable:
    """The first candidate whose backends include the default backend; RuntimeError when none can run."""
    backend = jax.default_backend()
    names = candidate_names(op, implementation, implementations, defaults)
    for name in names:
        fn, backends = implementations[name]
        if backend in backends:
            return fn
    raise RuntimeError(f"{op}: implementation(s) {names} cannot run on backend {backend!r}")
