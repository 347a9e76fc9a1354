"""Small checks shared by config dataclasses and ops: each raises ValueError naming the field."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def check_choice(field: str, value: Any, allowed: Iterable[Any]) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{field} must be one of {list(allowed)}, got {value!r}")


def check_positive(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{field} must be a positive number, got {value!r}")


def check_non_negative(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{field} must be a non-negative number, got {value!r}")


def check_int(field: str, value: Any, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field} must be an integer >= {minimum}, got {value!r}")


def check_unit_interval(field: str, value: Any, *, closed_right: bool = False) -> None:
    ok = isinstance(value, int | float) and 0 <= value and (value <= 1 if closed_right else value < 1)
    if not ok:
        bracket = "[0, 1]" if closed_right else "[0, 1)"
        raise ValueError(f"{field} must lie in {bracket}, got {value!r}")


def check_pairs(field: str, value: Any) -> None:
    """`value` must be a tuple of (name, value) pairs with string names, as in `mixer_options`."""
    if not isinstance(value, tuple) or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in value
    ):
        raise ValueError(f"{field} must be a tuple of (name, value) pairs, got {value!r}")
