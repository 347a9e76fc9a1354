"""`points_to_fla(entry_point)`: a call of a zoo op in flash-linear-attention's style names the fla entry point.

fla's ops take their gates positionally (`chunk_gated_delta_rule(q, k, v, g, beta)`) and know
`output_final_state=`, `cu_seqlens=`, `use_qk_l2norm_in_kernel=`; the zoo's ops take the gates by keyword and
know none of those. Python's own TypeError ("takes 3 positional arguments but 5 were given") does not say
where the fla signature lives, so the decorated op re-raises it with the name of its counterpart in
`icml26zoo.kernels.fla` (docs/fla.md).

A correct call costs a length test and a set test in Python (at trace time only under `jit`) and goes to the
op unchanged; `functools.wraps` keeps its name, docstring and signature (`inspect.signature` follows
`__wrapped__`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _hint(name: str, positional: list[str], entry_point: str) -> str:
    """The sentence appended to the binding error."""
    return (f"{name} takes {', '.join(positional)} positionally and the rest by keyword; for "
            f"flash-linear-attention's signature use icml26zoo.kernels.fla.{entry_point} (docs/fla.md)")


def _problem(err: TypeError, given: int, accepted: int) -> str:
    """What did not bind, with the counts when there were too many positional arguments."""
    if given > accepted:
        return f"takes {accepted} positional arguments but {given} were given"
    return str(err)


def points_to_fla(entry_point: str) -> Callable[[F], F]:
    """Decorator: a call that does not bind to the op's signature raises a TypeError naming `entry_point`.

    `entry_point` is the name of the function of `icml26zoo.kernels.fla` that takes fla's signature for
    this op (e.g. "chunk_gated_delta_rule"). Only binding errors are rewritten; a TypeError raised inside
    the op propagates as it is.
    """

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        params = signature.parameters.values()
        positional = [p.name for p in params if p.kind in _POSITIONAL]
        keywords = frozenset(p.name for p in params if p.kind != inspect.Parameter.POSITIONAL_ONLY)
        required = frozenset(p.name for p in params
                             if p.kind == inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if len(args) > len(positional) or not keywords.issuperset(kwargs) or not required.issubset(kwargs):
                try:
                    signature.bind(*args, **kwargs)
                except TypeError as err:
                    raise TypeError(f"{fn.__name__}(): {_problem(err, len(args), len(positional))}; "
                                    f"{_hint(fn.__name__, positional, entry_point)}") from None
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
