"""Checks of a user-prepared TFDS dataset's directory before TFDS opens it.

A dataset the zoo does not build ("tfds:<name>") is read from `<data_dir>/<name>/[<config>/]<version>/`.
TFDS rebuilds its features from `features.json` (and the `features` entry of `dataset_info.json`), and
resolves each feature class by its Python path, importing that module: a doctored file could make the
trainer import any module by name. `check_prepared` therefore refuses to hand a directory to TFDS unless
it holds a prepared dataset whose feature classes all come from TFDS's own feature package, and it names
a missing dataset and how to prepare it without listing TFDS's whole catalogue.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Iterator
from typing import Any

from icml26zoo.train.errors import RunError

# TFDS writes the class of every feature, e.g. "tensorflow_datasets.core.features.text_feature.Text".
SAFE_FEATURE_CLASS = re.compile(r"tensorflow_datasets\.(core\.)?features(\.[A-Za-z_][A-Za-z0-9_]*)+")
# The keys under which TFDS stores a feature class: the proto's field as JSON writes it, the proto's own name,
# and "type" in the legacy {"type": ..., "content": ...} form.
CLASS_KEYS = ("pythonClassName", "python_class_name")
METADATA_FILES = ("features.json", "dataset_info.json")
DATASET_NAME = re.compile(r"[A-Za-z0-9_]+")


def dataset_root(directory: str, tfds_name: str) -> pathlib.Path:
    """`<directory>/<name>` for a TFDS name "name", "name/config", "name:1.0.0" or "name/config:1.0.0"."""
    return pathlib.Path(directory) / re.split(r"[/:]", tfds_name, maxsplit=1)[0]


def check_prepared(field: str, value: str, tfds_name: str, directory: str) -> None:
    """Raises RunError unless TFDS dataset `tfds_name` is prepared under `directory` with safe metadata.

    `field` and `value` name the config entry in messages ("data.name", "tfds:lm1b"). Every
    features.json and dataset_info.json under the dataset's folder is checked with `check_metadata_file`.
    """
    base = re.split(r"[/:]", tfds_name, maxsplit=1)[0]
    if not DATASET_NAME.fullmatch(base):
        raise RunError(f"{field} {value!r}: {tfds_name!r} is not a TFDS dataset name (letters, digits and "
                       "underscores, then optionally /<config> and :<version>)")
    root = dataset_root(directory, tfds_name)
    infos = sorted(root.rglob("dataset_info.json")) if root.is_dir() else []
    if not infos:
        raise RunError(f"{field} {value!r}: TFDS dataset {tfds_name!r} is not prepared under data_dir "
                       f"{directory!r}; prepare it there first (e.g. `tfds build {base} --data_dir {directory}`), "
                       "the trainer never downloads")
    for path in sorted(root.rglob("features.json")) + infos:
        check_metadata_file(path)


def check_metadata_file(path: pathlib.Path) -> None:
    """Raises RunError naming `path` and the class when the JSON file names a feature class outside TFDS's
    feature package (or cannot be read as JSON)."""
    try:
        content = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunError(f"TFDS metadata file {str(path)!r} cannot be read as JSON: {error}") from None
    for class_name in feature_classes(content):
        if not (isinstance(class_name, str) and SAFE_FEATURE_CLASS.fullmatch(class_name)):
            raise RunError(f"TFDS metadata file {str(path)!r} names feature class {class_name!r}; only classes "
                           "of tensorflow_datasets.core.features are accepted (TFDS would import its module)")


def feature_classes(node: Any) -> Iterator[Any]:
    """Every feature class a TFDS metadata JSON document names, at any depth (nested features included)."""
    if isinstance(node, list):
        for item in node:
            yield from feature_classes(item)
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        names_class = key in CLASS_KEYS or (key == "type" and "content" in node)
        # A dict under such a key is a feature that happens to be named like one (FeaturesDict entries).
        if names_class and not isinstance(value, dict | list):
            yield value
        else:
            yield from feature_classes(value)
