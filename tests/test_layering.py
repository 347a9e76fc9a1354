"""The layers of docs/contributing.md, read from every module's syntax tree (in-function and TYPE_CHECKING imports
included), and a planted violation of each rule to show the check catches it."""

from __future__ import annotations

import functools
import pathlib

import pytest
from layering import FOLDERS, module_names, violations

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = module_names({REPO / folder: package for folder, package in FOLDERS.items()})


@functools.cache
def package_violations() -> tuple[str, ...]:
    """The package's own violations, computed once: every planted case compares against them."""
    return tuple(violations(PACKAGE))


def test_the_package_keeps_its_layers():
    found = package_violations()
    assert not found, f"{len(found)} layering violations:\n" + "\n".join(found)


def test_every_folder_is_scanned():
    layers = {name.split(".")[1] if "." in name else "" for name in PACKAGE}
    assert {"kernels", "train", "configs", "repro", "models", "mixers"} <= layers
    assert len(PACKAGE) > 300


PLANTS = {
    "kernel imports the model layer": (
        "icml26zoo.kernels.ssd.planted", "def f():\n    from icml26zoo.models import ModelConfig\n",
        "icml26zoo.kernels.ssd.planted (kernels) imports icml26zoo.models (zoo)"),
    "model layer imports train inside a function": (
        "icml26zoo.mixers.planted", "def f():\n    import icml26zoo.train.loop\n",
        "icml26zoo.mixers.planted (zoo) imports icml26zoo.train.loop (train)"),
    "model layer imports configs under TYPE_CHECKING": (
        "icml26zoo.models.planted",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from icml26zoo.configs import default\n",
        "imports icml26zoo.configs"),
    "model layer imports repro": (
        "icml26zoo.losses.planted", "from icml26zoo.repro.common import Budget\n",
        "icml26zoo.losses.planted (zoo) imports icml26zoo.repro.common (repro)"),
    "train imports repro": (
        "icml26zoo.train.planted", "from icml26zoo import repro\n",
        "icml26zoo.train.planted (train) imports icml26zoo.repro (repro)"),
    "argparse in the model layer": (
        "icml26zoo.optim.planted", "import argparse\n", "imports argparse (argparse and matplotlib belong"),
    "pyplot in an experiment": (
        "icml26zoo.repro.planted", "import matplotlib.pyplot as plt\n", "imports pyplot"),
    "matplotlib in the trainer's loop": (
        "icml26zoo.train.planted", "def f():\n    from matplotlib.figure import Figure\n",
        "icml26zoo.train.planted imports matplotlib.figure"),
    "a private module of kernels from a mixer": (
        "icml26zoo.mixers.planted", "from icml26zoo.kernels._common.masks import attention_mask\n",
        "private to icml26zoo.kernels"),
    "a private name of another subpackage": (
        "icml26zoo.moe.planted", "from icml26zoo.models.lm import _check_tokens\n",
        "imports _check_tokens from icml26zoo.models.lm, private to icml26zoo.models"),
    "relative import of a private name across subpackages": (
        "icml26zoo.privacy.planted", "from ..optim.muon import _helper\n", "imports _helper from icml26zoo.optim.muon"),
}


@pytest.mark.parametrize("case", sorted(PLANTS))
def test_a_planted_violation_is_caught(case, tmp_path):
    module, source, expected = PLANTS[case]
    path = tmp_path / "planted.py"
    path.write_text(source)
    assert not any("planted" in line for line in package_violations())
    found = [line for line in violations({**PACKAGE, module: path}) if "planted" in line]
    assert any(expected in line for line in found), found


def test_a_planted_cycle_is_caught(tmp_path):
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text("def f():\n    from icml26zoo.plantedb import g\n")
    second.write_text("from icml26zoo.planteda import f\n")
    found = violations({**PACKAGE, "icml26zoo.planteda": first, "icml26zoo.plantedb": second})
    assert any(line.startswith("import cycle between ['icml26zoo.planteda', 'icml26zoo.plantedb']") for line in found)
