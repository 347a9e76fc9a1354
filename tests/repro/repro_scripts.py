"""Loads a reproduction's command-line script (`scripts/repro/<name>.py`, outside the package) as a module."""

import importlib.util
import pathlib
from types import ModuleType

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "repro"


def load_repro_script(name: str) -> ModuleType:
    """The module of scripts/repro/<name>.py, freshly executed (its `main(argv)` is what the tests call)."""
    path = SCRIPTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"repro_script_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
