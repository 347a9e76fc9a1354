"""Name -> factory registries for architectures, sequence mixers, optimizers and training objectives.

A new model, mixer, optimizer or objective registers itself at import time with a decorator; the trainer
only looks names up, so adding one never edits the trainer. An entry that needs an optional extra says so
(`register_model("sola", extras=("geometric",))`): the command line checks a run's extras before it builds
anything (`Registry.extras`).

    @register_mixer("attention")
    class Attention(nnx.Module): ...

An optimizer that needs more than one gradient per step declares its update at registration
(`register_optimizer("sam_polyak", update=make_update)`); the trainer reads it with `OPTIMIZERS.update(name)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from icml26zoo.validation import did_you_mean

T = TypeVar("T")

# `update(loss_fn, params, batch, opt_state, optimizer) -> (loss, grads, updates, opt_state)`, with
# `loss_fn(params, batch) -> float32 scalar`: one optimizer step that computes its own gradients.
UpdateFn = Callable[..., tuple[Any, Any, Any, Any]]
# `make_update(optim_config) -> UpdateFn`, declared by an optimizer that needs more than one gradient.
UpdateFactory = Callable[[Any], UpdateFn]

# Modules whose import registers the built-in entries. Imported lazily on first lookup so that
# `import zoo.registry` stays cheap and free of import cycles.
_BUILTIN_MODULES = ("icml26zoo.mixers", "icml26zoo.models", "icml26zoo.optim", "icml26zoo.privacy",
                    "icml26zoo.geometric", "icml26zoo.bio", "icml26zoo.multimodal",
                    "icml26zoo.robotics")


class Registry(Generic[T]):
    """A mapping from names to factories of one kind (`kind` appears in error messages).

    `modules` are imported on the first lookup so that their decorators have run; None means the zoo's
    built-in modules (`load_builtins`).
    """

    def __init__(self, kind: str, modules: tuple[str, ...] | None = None) -> None:
        self.kind = kind
        self._modules = modules
        self._modules_loaded = False
        self._entries: dict[str, T] = {}
        self._extras: dict[str, tuple[str, ...]] = {}

    def register(self, name: str, *, extras: tuple[str, ...] = ()) -> Callable[[T], T]:
        """Decorator registering `obj` under `name`; registering a taken name raises ValueError. `extras`: the
        optional extras (zoo.extras.EXTRAS) the entry needs at run time."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorator(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered to {self._entries[name]!r}")
            self._entries[name] = obj
            if extras:
                self._extras[name] = tuple(extras)
            return obj

        return decorator

    def extras(self, name: str) -> tuple[str, ...]:
        """The optional extras entry `name` declared at registration (empty for most)."""
        self.get(name)
        return self._extras.get(name, ())

    def get(self, name: str) -> T:
        """The entry registered as `name`; an unknown name raises ValueError listing the known ones."""
        self._load()
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {sorted(self._entries)}"
                             f"{did_you_mean(name, self._entries)}")
        return self._entries[name]

    def names(self) -> list[str]:
        """The registered names, sorted."""
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _load(self) -> None:
        if self._modules is None:
            load_builtins()
            return
        if not self._modules_loaded:
            self._modules_loaded = True
            for module in self._modules:
                importlib.import_module(module)


class OptimizerRegistry(Registry[Callable[..., Any]]):
    """Optimizer factories `factory(learning_rate, optim_config) -> optax transformation`, each with an
    optional declared update for optimizers that need more than `optimizer.update(grads, state, params)`."""

    def __init__(self, kind: str, modules: tuple[str, ...] | None = None) -> None:
        super().__init__(kind, modules)
        self._updates: dict[str, UpdateFactory] = {}

    def register(self, name: str, *, update: UpdateFactory | None = None,
                 extras: tuple[str, ...] = ()) -> Callable[[T], T]:
        """Decorator registering a factory under `name`, with its own `update` factory when it has one."""
        register = super().register(name, extras=extras)

        def decorator(obj: T) -> T:
            register(obj)
            if update is not None:
                self._updates[name] = update
            return obj

        return decorator

    def update(self, name: str) -> UpdateFactory | None:
        """The update factory declared by optimizer `name`, or None for the default single-gradient step."""
        self.get(name)
        return self._updates.get(name)


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
OPTIMIZERS = OptimizerRegistry("optimizer")
# Objectives `objective(model, batch, rng) -> (loss, metrics)` (see zoo.losses.objectives).
OBJECTIVES: Registry[Callable[..., Any]] = Registry("objective", modules=("icml26zoo.losses",))

register_model = MODELS.register
register_mixer = MIXERS.register
register_optimizer = OPTIMIZERS.register
register_objective = OBJECTIVES.register
