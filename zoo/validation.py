"""The checks every config, option and op argument uses: each raises ValueError naming the field, the value it
got and what it expects, and returns the checked value.

One helper per idea, used everywhere (no private copies):

    check_int("num_layers", n)                         # an int >= 1 (a bool is not an int here)
    check_int("top_k", k, minimum=1, maximum=vocab)    # an int in [1, vocab]
    check_positive("learning_rate", lr)                # a number > 0 (finite=True: and finite)
    check_non_negative("weight_decay", wd)             # a number >= 0
    check_finite("offset", x)                          # a finite number
    check_probability("dropout", p)                    # a number in [0, 1]
    check_interval("momentum", m, 0, 1, closed="left") # a number in [0, 1)
    check_choice("norm", name, ("rmsnorm", "dyt"))     # one of the allowed values
    check_bool("tie_embeddings", flag)                 # True or False
    check_shape("q", q, (batch, None, heads, dim), "[B, T, H, K]")   # an array of that shape (None: any size)
    check_float_array("logits", x, (None, vocab), "[B, V]")          # ... and of a floating-point dtype
    check_int_array("positions", p, (batch, seq), "[B, T]")          # ... and of an integer dtype
    check_pairs("mixer_options", pairs)                # a tuple of (name, value) pairs

Numbers are Python ints and floats or NumPy / JAX scalars, never bools; NaN fails every numeric check.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["check_bool", "check_choice", "check_finite", "check_float_array", "check_int", "check_int_array",
           "check_interval", "check_non_negative", "check_number", "check_pairs", "check_positive",
           "check_probability", "check_shape", "check_unit_interval", "did_you_mean", "is_integer", "is_number"]

INTERVALS = {"both": ("[", "]"), "left": ("[", ")"), "right": ("(", "]"), "neither": ("(", ")")}


def is_number(value: Any) -> bool:
    """A real number (int, float, NumPy / JAX scalar), not a bool, not an array of several values."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return False
    if isinstance(value, numbers.Real):
        return True
    return getattr(value, "shape", None) == () and getattr(getattr(value, "dtype", None), "kind", "") in "iuf"


def is_integer(value: Any) -> bool:
    """An integer (int, NumPy / JAX integer scalar), not a bool."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return False
    if isinstance(value, numbers.Integral):
        return True
    return getattr(value, "shape", None) == () and getattr(getattr(value, "dtype", None), "kind", "") in "iu"


def check_number(field: str, value: Any, *, expected: str = "a number") -> float:
    """`value` as a float when it is a real number that is not NaN; else ValueError naming `field`."""
    if not is_number(value) or math.isnan(float(value)):
        raise ValueError(f"{field} must be {expected}, got {value!r}")
    return float(value)


def check_int(field: str, value: Any, *, minimum: int | None = 1, maximum: int | None = None) -> int:
    """An integer in [minimum, maximum] (either bound None: unbounded)."""
    ok = is_integer(value) and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        if minimum is not None and maximum is not None:
            expected = f"an integer in [{minimum}, {maximum}]"
        elif maximum is not None:
            expected = f"an integer <= {maximum}"
        else:
            expected = "an integer" if minimum is None else f"an integer >= {minimum}"
        raise ValueError(f"{field} must be {expected}, got {value!r}")
    return int(value)


def check_positive(field: str, value: Any, *, finite: bool = False) -> float:
    """A number > 0 (and finite when `finite`)."""
    expected = "a finite positive number" if finite else "a positive number"
    number = check_number(field, value, expected=expected)
    if not number > 0 or (finite and not math.isfinite(number)):
        raise ValueError(f"{field} must be {expected}, got {value!r}")
    return number


def check_non_negative(field: str, value: Any, *, finite: bool = False) -> float:
    """A number >= 0 (and finite when `finite`)."""
    expected = "a finite non-negative number" if finite else "a non-negative number"
    number = check_number(field, value, expected=expected)
    if not number >= 0 or (finite and not math.isfinite(number)):
        raise ValueError(f"{field} must be {expected}, got {value!r}")
    return number


def check_finite(field: str, value: Any) -> float:
    """A finite number."""
    number = check_number(field, value, expected="a finite number")
    if not math.isfinite(number):
        raise ValueError(f"{field} must be a finite number, got {value!r}")
    return number


def check_interval(field: str, value: Any, low: float, high: float, *, closed: str = "both") -> float:
    """A number between `low` and `high`; `closed` says which ends belong: "both", "left", "right", "neither"."""
    if closed not in INTERVALS:
        raise ValueError(f"closed must be one of {list(INTERVALS)}, got {closed!r}")
    left, right = INTERVALS[closed]
    expected = f"a number in {left}{low:g}, {high:g}{right}"
    number = check_number(field, value, expected=expected)
    above = number >= low if left == "[" else number > low
    below = number <= high if right == "]" else number < high
    if not (above and below):
        raise ValueError(f"{field} must be {expected}, got {value!r}")
    return number


def check_probability(field: str, value: Any) -> float:
    """A number in [0, 1]."""
    return check_interval(field, value, 0.0, 1.0, closed="both")


def check_unit_interval(field: str, value: Any, *, closed_right: bool = False) -> float:
    """A number in [0, 1) (or [0, 1] with `closed_right`)."""
    return check_interval(field, value, 0.0, 1.0, closed="both" if closed_right else "left")


def did_you_mean(value: Any, choices: Iterable[Any]) -> str:
    """`" (did you mean 'x'?)"` when `value` is a string close to one of the string `choices`, else ""."""
    if not isinstance(value, str):
        return ""
    import difflib

    close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_choice(field: str, value: Any, allowed: Iterable[Any]) -> Any:
    """One of `allowed`; the message lists them (and the closest one when `value` looks misspelt)."""
    allowed = tuple(allowed)
    try:
        ok = value in allowed
    except TypeError:  # an unhashable value against a set-like collection
        ok = False
    if not ok:
        raise ValueError(f"{field} must be one of {list(allowed)}, got {value!r}{did_you_mean(value, allowed)}")
    return value


def check_bool(field: str, value: Any) -> bool:
    """True or False (not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be True or False, got {value!r}")
    return value


def _shape_matches(shape: tuple[int, ...], expected: Sequence[int | None]) -> bool:
    return len(shape) == len(expected) and all(e is None or s == e for s, e in zip(shape, expected, strict=False))


def _named_shape(expected: Sequence[int | None], layout: str | None) -> str:
    sizes = ["*" if e is None else str(e) for e in expected]
    wanted = "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"
    return f"{layout} = {wanted}" if layout else wanted


def check_shape(field: str, array: Any, expected: Sequence[int | None], layout: str | None = None) -> tuple[int, ...]:
    """An array whose shape is `expected` (None matches any size); `layout` names the axes in the message,
    e.g. "[B, T, H, K]". Returns the array's shape."""
    shape = getattr(array, "shape", None)
    if shape is None:
        raise ValueError(f"{field} must be an array, got {type(array).__name__}")
    shape = tuple(shape)
    if not _shape_matches(shape, expected):
        raise ValueError(f"{field} must have shape {_named_shape(expected, layout)}, got {shape}")
    return shape


def _check_typed_array(field: str, array: Any, expected: Sequence[int | None], layout: str | None, kind: str,
                       what: str) -> tuple[int, ...]:
    import jax.numpy as jnp  # only here: the scalar checks need no JAX

    shape, dtype = getattr(array, "shape", None), getattr(array, "dtype", None)
    if shape is None or dtype is None:
        raise ValueError(f"{field} must be {what}, got {type(array).__name__}")
    shape = tuple(shape)
    if not (_shape_matches(shape, expected) and jnp.issubdtype(dtype, getattr(jnp, kind))):
        raise ValueError(f"{field} must be {what} of shape {_named_shape(expected, layout)}, got {dtype} {shape}")
    return shape


def check_float_array(field: str, array: Any, expected: Sequence[int | None],
                      layout: str | None = None) -> tuple[int, ...]:
    """An array of a floating-point dtype (bfloat16 and float8 included) whose shape is `expected`, as in
    check_shape; the message names the dtype and the shape it got. Returns the array's shape."""
    return _check_typed_array(field, array, expected, layout, "floating", "a float array")


def check_int_array(field: str, array: Any, expected: Sequence[int | None],
                    layout: str | None = None) -> tuple[int, ...]:
    """An array of an integer dtype (signed or unsigned, not bool) whose shape is `expected`, as in
    check_shape (token ids, positions, segment ids); the message names the dtype and the shape it got.
    Returns the array's shape."""
    return _check_typed_array(field, array, expected, layout, "integer", "an integer array")


def check_pairs(field: str, value: Any) -> tuple:
    """A tuple of (name, value) pairs with string names, as in `mixer_options`."""
    if not isinstance(value, tuple) or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in value
    ):
        raise ValueError(f"{field} must be a tuple of (name, value) pairs, got {value!r}")
    return value
