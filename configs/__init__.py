"""Experiment presets: each module has `get_config() -> TrainConfig`.

Run one by name (`python -m icml26zoo.train --config llama_tiny --workdir DIR`) or by file
(`--config configs/llama_tiny.py`); `names()` lists the presets installed with the package and
`load_preset(name_or_file)` returns one checked config. A preset file is Python and runs when loaded: load only
files you trust (as with ml_collections config files).
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import pkgutil
import traceback

from icml26zoo.train.config import TrainConfig, check_config
from icml26zoo.train.errors import RunError
from icml26zoo.validation import did_you_mean

__all__ = ["load_preset", "names"]


def names() -> list[str]:
    """The preset names of this package (its modules), sorted: `["boolean_rl", ..., "puma_tiny"]`."""
    return sorted(module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith("_"))


def load_preset(preset: str | pathlib.Path, *, field: str = "config") -> TrainConfig:
    """The `get_config()` of preset `preset`, a name from `names()` or a path to a Python file.

    The config is checked with `check_config`. An unknown name or a missing file raises RunError naming `field`
    (the CLI passes "--config") and the closest preset name; a file that fails to import or whose `get_config`
    raises is a RunError naming the file, the line and the error.
    """
    name = str(preset)
    path = pathlib.Path(preset)
    presets = names()
    if isinstance(preset, str) and preset in presets:
        module = importlib.import_module(f"icml26zoo.configs.{preset}")
    elif path.is_file():
        spec = importlib.util.spec_from_file_location(f"_zoo_preset_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        _run_preset_code(spec.loader.exec_module, module, field=field, path=path, what="failed to import")
    elif isinstance(preset, str) and preset.isidentifier():
        raise RunError(f"{field} {name!r} is not a preset name or a file{did_you_mean(preset, presets)}; presets: "
                       f"{', '.join(presets)}")
    else:
        raise RunError(f"{field} file {name!r} does not exist; preset names: {', '.join(presets)}")
    if not hasattr(module, "get_config"):
        raise RunError(f"{field} {name!r} defines no get_config()")
    config = _run_preset_code(module.get_config, field=field, path=path if path.is_file() else None,
                              what="get_config() raised")
    if not isinstance(config, TrainConfig):
        raise RunError(f"get_config() of {field} {name!r} must return a TrainConfig, got {type(config).__name__}")
    check_config(config)
    return config


def _run_preset_code(function, *args, field: str, path: pathlib.Path | None, what: str):
    """`function(*args)`; an exception raised by a user's preset file becomes a RunError naming the file's line.
    A ValueError (a config field rejected its value) passes through: it already names the field."""
    try:
        return function(*args)
    except ValueError:
        raise
    except Exception as error:  # the user's code: any error, reported in one line with its place
        if path is None:
            raise
        frames = [f for f in traceback.extract_tb(error.__traceback__) if pathlib.Path(f.filename) == path.resolve()
                  or pathlib.Path(f.filename) == path]
        line = getattr(error, "lineno", None) if isinstance(error, SyntaxError) else (
            frames[-1].lineno if frames else None)
        where = f"{path}:{line}" if line else str(path)
        raise RunError(f"{field} file {where}: {what}: {type(error).__name__}: {error}") from None
