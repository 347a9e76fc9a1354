"""Name -> factory registries for architectures, sequence mixers and optimizers.

A new model, mixer or optimizer registers itself at import time with a decorator; the trainer only
looks names up, so adding one never edits the trainer:

    @register_mixer("attention")
    class Attention(nnx.Module): ...
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Modules whose import registers the built-in entries. Imported lazily on first lookup so that
# `import zoo.registry` stays cheap and free of import cycles.
_BUILTIN_MODULES = ("zoo.mixers", "zoo.models", "zoo.optim")


class Registry(Generic[T]):
    """A mapping from names to factories of one kind (`kind` appears in error messages)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering `obj` under `name`; registering a taken name raises ValueError."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorator(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered to {self._entries[name]!r}")
            self._entries[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        """The entry registered as `name`; an unknown name raises ValueError listing the known ones."""
        load_builtins()
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {sorted(self._entries)}")
        return self._entries[name]

    def names(self) -> list[str]:
        load_builtins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        load_builtins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


_loaded = False


def load_builtins() -> None:
    """Imports the zoo's own modules once so that their decorators have run."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


MODELS: Registry[Callable[..., Any]] = Registry("model")
MIXERS: Registry[type] = Registry("mixer")
OPTIMIZERS: Registry[Callable[..., Any]] = Registry("optimizer")

register_model = MODELS.register
register_mixer = MIXERS.register
register_optimizer = OPTIMIZERS.register
