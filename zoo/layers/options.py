"""Typed options: a frozen dataclass per mixer or optimizer, filled from `(name, value)` pairs.

A config carries a component's own settings as pairs (`ModelConfig.mixer_options`, `OptimConfig.options`).
`option_values` turns them into the fields of the component's options dataclass: an unknown name raises a
ValueError naming the component, the name and the valid ones; a missing field takes its default; each
value is checked against the field's annotation (bool, int, float, str, `X | None`, `tuple[...]`, a
`Literal`). Range and cross-field checks stay with the component, which knows what they mean.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Collection, Iterable
from typing import Any, Literal, TypeVar, Union

from icml26zoo import validation

T = TypeVar("T")


def option_values(
    cls: type, pairs: Iterable[tuple[str, Any]], *, owner: str, exclude: Collection[str] = ()
) -> dict[str, Any]:
    """The fields of dataclass `cls` (less `exclude`) read from `pairs`, type-checked, defaults applied.

    `owner` names the component in messages ("fox mixer", "muon optimizer"). A name listed twice takes
    its last value, as `dict(pairs)` does. A list given for a tuple field becomes a tuple, so that the
    options stay hashable (nnx keeps them as static graph data).
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in exclude}
    given = dict(pairs)
    unknown = [name for name in given if name not in fields]
    if unknown:
        raise ValueError(f"unknown {owner} option {unknown[0]!r}; valid options: {sorted(fields)}")
    values = {}
    for name, field in fields.items():
        if name not in given:
            values[name] = field.default
            continue
        value = given[name]
        if not _matches(value, hints[name]):
            raise ValueError(f"{owner} option {name!r} must be {_describe(hints[name])}, got {value!r}")
        values[name] = tuple(value) if isinstance(value, list) else value
    return values


def build_options(
    cls: type[T], pairs: Iterable[tuple[str, Any]], *, owner: str, exclude: Collection[str] = ()
) -> T:
    """`cls(**option_values(cls, pairs, owner=owner, exclude=exclude))`: the typed options, defaults applied."""
    return cls(**option_values(cls, pairs, owner=owner, exclude=exclude))


def check_choice(owner: str, name: str, value: Any, choices: Collection[Any]) -> None:
    """`validation.check_choice` for option `name` of `owner`: the message names both, as option_values's do
    ("fox mixer option 'gate' must be one of [...], got ...")."""
    validation.check_choice(f"{owner} option {name!r}", value, choices)


def check_implementation(owner: str, value: Any, choices: Collection[str]) -> None:
    """Raises ValueError unless `value` is None, one of `choices` or a non-empty sequence of them.

    The value is an op's `implementation=` argument: a name, or names tried in order.
    """
    names = (value,) if isinstance(value, str) else value
    valid = isinstance(names, tuple | list) and len(names) > 0 and all(n in choices for n in names)
    if value is not None and not valid:
        raise ValueError(
            f"{owner} option 'implementation' must be None, one of {list(choices)} or a sequence of those, "
            f"got {value!r}"
        )


def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if origin is Literal:
        return value in typing.get_args(hint)
    if origin is tuple:
        return isinstance(value, tuple | list)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, origin or hint)


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if origin is Literal:
        return f"one of {list(typing.get_args(hint))}"
    if origin is tuple:
        return "a tuple"
    names = {type(None): "None", bool: "a bool", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))
