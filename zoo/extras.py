"""The optional extras of the distribution and the packages each one brings, checked without importing them.

`pip install "icml26-zoo[train]"` adds the training loop; the field extras add one library each. An entry
point calls `require_extras("train", "rl", what="experiment 'target_update'")` before it builds anything, so a
missing extra is one line with the exact command to run instead of a traceback deep inside a run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

__all__ = ["EXTRAS", "MissingExtraError", "install_command", "missing_extras", "require_extras"]

DISTRIBUTION = "icml26-zoo"
# Not on any package index yet: the install commands name the repository (pyproject.toml's Repository URL;
# tests/test_install.py checks the two agree).
REPOSITORY = "https://github.com/icml26-zoo/icml26-zoo"
# extra -> the top-level packages it installs that the zoo imports (pyproject.toml's optional dependencies;
# tests/test_install.py checks that the two agree).
EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("orbax", "grain", "tensorflow_datasets", "array_record", "tensorboardX", "tqdm", "matplotlib",
              "scipy"),
    "rl": ("gymnax",),
    "flows": ("diffrax",),
    "privacy": ("dp_accounting",),
    "sklearn": ("sklearn",),
    "geometric": ("e3nn_jax",),
    "ot": ("ott",),
    "chem": ("rdkit",),
}


class MissingExtraError(ImportError):
    """An optional extra is not installed; the message is one line ending in the pip command that fixes it."""


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def missing_extras(extras: Iterable[str]) -> dict[str, list[str]]:
    """extra -> its packages that are not installed, for each extra in `extras` missing something."""
    missing = {}
    for extra in extras:
        if extra not in EXTRAS:
            raise ValueError(f"extras: unknown extra {extra!r}; extras: {sorted(EXTRAS)}")
        absent = [package for package in EXTRAS[extra] if not _installed(package)]
        if absent:
            missing[extra] = absent
    return missing


def install_command(extras: Iterable[str]) -> str:
    """`pip install "icml26-zoo[a,b] @ git+<repository>"` for `extras`."""
    return f'pip install "{DISTRIBUTION}[{",".join(extras)}] @ git+{REPOSITORY}"'


def require_extras(*extras: str, what: str) -> None:
    """Raises MissingExtraError (one line: what needs which extra, the missing packages, the pip command) when
    any of `extras` is not fully installed; `what` names the caller, e.g. "experiment 'target_update'"."""
    missing = missing_extras(extras)
    if missing:
        packages = sorted({package for absent in missing.values() for package in absent})
        raise MissingExtraError(f"{what} needs the {', '.join(f'[{e}]' for e in missing)} extra "
                                f"(missing: {', '.join(packages)}); install it with: {install_command(extras)}")
