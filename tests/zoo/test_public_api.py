"""The public API: every exported name resolves, optimizer names are constructors (not modules), every
registered mixer class is exported, every public function in the zoo carries type hints, and the README's
install commands use the repository URL of pyproject.toml. The docs' examples run in tests/test_docs_examples.py."""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import tomllib
import types
from collections.abc import Callable, Iterator

import jax.numpy as jnp
import optax
import pytest

import icml26zoo
from icml26zoo import mixers, optim
from icml26zoo.registry import MIXERS

# The examples compile small programs once each: XLA's cheap pipeline keeps that fast (tests/zoo/conftest.py).
pytestmark = pytest.mark.usefixtures("fast_compile")

PACKAGES = ("icml26zoo", "icml26zoo.optim", "icml26zoo.mixers", "icml26zoo.kernels")
ZOO = pathlib.Path(icml26zoo.__file__).resolve().parent
REPO = pathlib.Path(__file__).resolve().parents[2]
INSTALL_SECTION = "## Install"

# Each optax-style constructor of icml26zoo.optim with the fewest arguments it accepts.
OPTAX_CONSTRUCTORS: dict[str, Callable[[], optax.GradientTransformation]] = {
    "sam_polyak": lambda: optim.sam_polyak(),
    "scale_by_sam_polyak": lambda: optim.scale_by_sam_polyak(),
    "muon_finetune": lambda: optim.muon_finetune(1e-3),
    "cubic_damped_sgd": lambda: optim.cubic_damped_sgd(0.1, damping=0.1),
    "cubic_damped_adam": lambda: optim.cubic_damped_adam(1e-3, damping=0.1),
    "scale_by_cubic_damped_momentum": lambda: optim.scale_by_cubic_damped_momentum(),
    "scale_by_cubic_damped_adam": lambda: optim.scale_by_cubic_damped_adam(),
}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package: str):
    module = importlib.import_module(package)
    assert len(set(module.__all__)) == len(module.__all__), f"duplicate names in {package}.__all__"
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert not missing, f"{package}.__all__ names missing attributes: {missing}"


def test_optimizer_names_are_functions_not_modules():
    modules = [name for name in optim.__all__ if isinstance(getattr(optim, name), types.ModuleType)]
    assert not modules, f"icml26zoo.optim exports modules under constructor names: {modules}"
    for name in ("sam_polyak", "muon_finetune", "talda", "spike_diagnostics", "cubic_damped_adam"):
        assert isinstance(getattr(optim, name), types.FunctionType), name


@pytest.mark.parametrize("name", sorted(OPTAX_CONSTRUCTORS))
def test_optax_constructors_return_gradient_transformations(name: str):
    assert name in optim.__all__
    transformation = OPTAX_CONSTRUCTORS[name]()
    assert isinstance(transformation, optax.GradientTransformation)
    params = {"w": jnp.ones((3, 2), jnp.float32), "b": jnp.zeros((2,), jnp.float32)}
    assert transformation.init(params) is not None


def test_every_registered_mixer_class_is_exported():
    exported = {getattr(mixers, name) for name in mixers.__all__}
    unexported = [name for name in MIXERS.names() if MIXERS.get(name) not in exported]
    assert not unexported, f"mixer classes not in icml26zoo.mixers.__all__: {unexported}"


def _public_functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Module-level functions and the methods of classes, leaving out `_private` names (`__init__` and
    `__call__` count: they are how a module is built and called)."""
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, functions) and not node.name.startswith("_"):
            yield node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, functions) and (not item.name.startswith("_") or item.name in
                                                    ("__init__", "__call__")):
                    yield item


def _is_annotated(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    arguments = function.args
    named = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
    star = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    unannotated = [a for a in named + star if a.annotation is None and a.arg not in ("self", "cls")]
    return function.returns is not None and not unannotated


def test_public_functions_have_type_hints():
    public_modules = [p for p in sorted(ZOO.rglob("*.py"))
                      if not any(part.startswith("_") and part != "__init__.py" for part in p.relative_to(ZOO).parts)]
    assert len(public_modules) > 20, public_modules
    missing = [f"{path.relative_to(ZOO)}:{function.lineno} {function.name}"
               for path in public_modules
               for function in _public_functions(ast.parse(path.read_text()))
               if not _is_annotated(function)]
    assert not missing, f"public functions without argument or return hints: {missing}"


def _readme_section(heading: str) -> str:
    return (REPO / "README.md").read_text().split(f"{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_install_commands_use_the_pyproject_url():
    url = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    commands = re.findall(r"^pip install .*$", _readme_section(INSTALL_SECTION), re.MULTILINE)
    assert len(commands) == 2, commands
    assert all(f"@ git+{url}\"" in command for command in commands), (url, commands)
