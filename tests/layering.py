"""Reads the package's import graph from the syntax trees of its modules (nothing is imported).

Every `import` and `from ... import` counts, wherever it sits: at module level, inside a function, under
`if TYPE_CHECKING:` or in a `try/except ImportError`. `violations(scan(...))` lists what breaks the
layering of docs/contributing.md ("The layers"): kernels -> zoo (model layer) -> train -> repro (experiments),
configs read by train and repro, argparse and matplotlib only in the experiments and the command lines, no
private name imported across subpackages, and no import cycle between subpackages.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
from collections.abc import Iterable, Mapping

ROOT = "icml26zoo"
# repository folder -> the package it is installed as (setup.py)
FOLDERS = {"zoo": ROOT, "kernels": f"{ROOT}.kernels", "train": f"{ROOT}.train", "configs": f"{ROOT}.configs",
           "repro": f"{ROOT}.repro"}
LAYERS = ("kernels", "train", "configs", "repro")
# Modules that may use argparse or matplotlib: the experiments layer, the command lines and train's plots.
CLI_AND_PLOTS = (f"{ROOT}.repro", f"{ROOT}.train.__main__", f"{ROOT}.train.plotting")


@dataclasses.dataclass(frozen=True)
class Import:
    """One imported module (and the names taken from it) in one module of the package."""

    importer: str  # the importing module, e.g. "icml26zoo.mixers.fox"
    target: str  # the imported module, e.g. "icml26zoo.kernels._common.masks" or "argparse"
    names: tuple[str, ...]  # names of `from target import a, b` (empty for `import target`)
    where: str  # "path:line"


def module_names(folders: Mapping[pathlib.Path, str]) -> dict[str, pathlib.Path]:
    """module name -> file, for every .py file under each folder (folder -> its package name)."""
    modules = {}
    for folder, package in folders.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


@functools.cache
def _tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@functools.cache
def _file_imports(name: str, path: pathlib.Path) -> tuple[Import, ...]:
    """The imports written in one file (parsed and walked once per session, whatever `scan` is asked)."""
    is_package = path.name == "__init__.py"
    imports = []
    for node in ast.walk(_tree(path)):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            imports += [Import(name, alias.name, (), where) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            imports.append(Import(name, _absolute(node, name, is_package), names, where))
    return tuple(imports)


def scan(modules: Mapping[str, pathlib.Path]) -> list[Import]:
    """Every import of every module in `modules` (module name -> file)."""
    imports = []
    for name, path in modules.items():
        for found in _file_imports(name, path):
            imports.append(found)
            # `from package import submodule` imports the submodule itself.
            imports += [Import(name, f"{found.target}.{n}", (), found.where) for n in found.names
                        if f"{found.target}.{n}" in modules]
    return imports


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def layer(module: str) -> str | None:
    """"kernels", "train", "configs", "repro" or "zoo" for a module of the package; None outside it."""
    parts = module.split(".")
    if parts[0] != ROOT:
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "zoo"


def subpackage(module: str) -> str:
    """The unit cycles and private names are judged by: a first-level subpackage or module of a layer, i.e.
    `icml26zoo.mixers` or `icml26zoo.registry` in the model layer, an op of kernels (`icml26zoo.kernels.ssd`),
    `icml26zoo.train.data` or `icml26zoo.train.config` in the trainer, `icml26zoo.repro.fox_fix`; the presets
    (`icml26zoo.configs`) are one unit. Finer than whole layers because the layer rules have the trainer read the
    presets (`train.__main__` -> `configs`) while presets build the trainer's config (`configs` ->
    `train.config`): the two layers meet, but no module of either may sit on a cycle."""
    parts = module.split(".")
    if layer(module) == "configs":
        return ".".join(parts[:2])
    if layer(module) == "zoo":
        return ".".join(parts[:2])
    return ".".join(parts[:3])


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def private_imports(imports: Iterable[Import], modules: Iterable[str]) -> list[str]:
    """Imports of a private module from outside its parent package, or of a private name of another
    subpackage's module."""
    modules = set(modules)
    found = []
    for item in imports:
        if layer(item.target) is None:
            continue
        parts = item.target.split(".")
        for index, part in enumerate(parts):
            owner = ".".join(parts[:index])
            if _private(part) and not _inside(item.importer, owner):
                found.append(f"{item.where}: {item.importer} imports {item.target}, private to {owner}")
                break
        for name in item.names:
            if _private(name) and f"{item.target}.{name}" not in modules and (
                    subpackage(item.importer) != subpackage(item.target)):
                found.append(f"{item.where}: {item.importer} imports {name} from {item.target}, private to "
                             f"{subpackage(item.target)}")
    return found


def layer_violations(imports: Iterable[Import]) -> list[str]:
    """Imports that go upward or sideways against the layers (docs/contributing.md), and argparse/matplotlib where
    they do not belong."""
    forbidden = {"kernels": ("zoo", "train", "configs", "repro"), "zoo": ("train", "configs", "repro"),
                 "train": ("repro",), "configs": ("repro",), "repro": ()}
    found = []
    for item in imports:
        source, target = layer(item.importer), layer(item.target)
        if target in forbidden[source]:
            found.append(f"{item.where}: {item.importer} ({source}) imports {item.target} ({target})")
        top = item.target.partition(".")[0]
        if top in ("argparse", "matplotlib") and not any(_inside(item.importer, m) for m in CLI_AND_PLOTS):
            found.append(f"{item.where}: {item.importer} imports {item.target} (argparse and matplotlib belong "
                         f"to repro, the command lines and train.plotting)")
        if item.target == "matplotlib.pyplot" or (item.target == "matplotlib" and "pyplot" in item.names):
            found.append(f"{item.where}: {item.importer} imports pyplot (use matplotlib.figure.Figure)")
    return found


def cycles(imports: Iterable[Import]) -> list[list[str]]:
    """The strongly connected sets of more than one subpackage in the subpackage import graph, each sorted."""
    graph: dict[str, set[str]] = {}
    for item in imports:
        if layer(item.target) is None:
            continue
        source, target = subpackage(item.importer), subpackage(item.target)
        graph.setdefault(source, set())
        graph.setdefault(target, set())
        if source != target and not _inside(source, target) and not _inside(target, source):
            graph[source].add(target)
    return [sorted(component) for component in _strongly_connected(graph) if len(component) > 1]


def _strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def cycle_edges(imports: Iterable[Import], component: Iterable[str]) -> list[str]:
    """Where the imports inside one cycle are (for the failure message)."""
    members = set(component)
    return sorted({f"{item.where}: {subpackage(item.importer)} -> {subpackage(item.target)}" for item in imports
                   if layer(item.target) is not None and subpackage(item.importer) in members
                   and subpackage(item.target) in members and subpackage(item.importer) != subpackage(item.target)})


def violations(modules: Mapping[str, pathlib.Path]) -> list[str]:
    """Every layering problem of `modules` (name -> file), one line each."""
    imports = scan(modules)
    found = layer_violations(imports) + private_imports(imports, modules)
    for component in cycles(imports):
        edges = cycle_edges(imports, component)
        shown = "; ".join(edges[:12]) + (f"; ... {len(edges) - 12} more" if len(edges) > 12 else "")
        found.append(f"import cycle between {component}: {shown}")
    return found
