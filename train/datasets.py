"""The dataset registry: `data.name` -> the registered `train.data.registry.Dataset` class.

This module knows the registry, not the datasets: the built-in dataset modules (`BUILTIN_MODULES`) are imported
by name on the first lookup and register themselves, so the config layer (`train.config`, which checks
`data.name` and `data.task_options`) can look a dataset up without importing the data layer that is built on
the config. A name registered with a trailing ":" is a family that takes a suffix: "tfds:" serves every
"tfds:<name>".
"""

from __future__ import annotations

from typing import Any

from icml26zoo.registry import Registry
from icml26zoo.train.errors import RunError
from icml26zoo.validation import did_you_mean

__all__ = ["BUILTIN_MODULES", "DATASETS", "check_dataset_name", "dataset_extras", "dataset_for", "register_dataset"]

# Modules whose import registers the built-in datasets, imported on the first lookup.
BUILTIN_MODULES = ("icml26zoo.train.data.catalog", "icml26zoo.train.data.topics", "icml26zoo.train.data.digits",
                   "icml26zoo.train.data.image_rows", "icml26zoo.train.data.formal_languages",
                   "icml26zoo.train.data.function_composition", "icml26zoo.train.data.sparse_boolean",
                   "icml26zoo.train.data.pcfg", "icml26zoo.train.data.point_sets",
                   "icml26zoo.train.data.sphere_signals", "icml26zoo.train.data.darcy_amr",
                   "icml26zoo.train.data.digit_patches", "icml26zoo.train.data.multimodal",
                   "icml26zoo.train.data.backbones",
                   "icml26zoo.train.data.pockets",
                   "icml26zoo.train.data.fold_and_label",
                   "icml26zoo.train.data.camp_data",
                   "icml26zoo.train.data.rna_hairpins",
                   "icml26zoo.train.data.msa_data",
                   "icml26zoo.train.data.sprite_data")

DATASETS: Registry[type] = Registry("dataset", modules=BUILTIN_MODULES)
register_dataset = DATASETS.register


def _key(name: str) -> str:
    family, colon, _ = name.partition(":")
    return family + colon


def check_dataset_name(field: str, name: object) -> None:
    """Raises RunError (a ValueError) naming `field` and the registered datasets unless `name` is one of them."""
    if not (isinstance(name, str) and _key(name) in DATASETS and not name.endswith(":")):
        names = [n + "<name>" if n.endswith(":") else n for n in DATASETS.names()]
        raise RunError(f"{field} must be one of {names}, got {name!r}{did_you_mean(name, DATASETS.names())}")


def dataset_for(data: Any) -> Any:
    """The registered dataset (a `train.data.registry.Dataset` instance) that `data.name` names; `data` is a
    `train.config.DataConfig`."""
    check_dataset_name("data.name", data.name)
    return DATASETS.get(_key(data.name))()


def dataset_extras(data: Any) -> tuple[str, ...]:
    """The optional extras the dataset `data.name` declared at registration (e.g. ("sklearn",) for digits)."""
    check_dataset_name("data.name", data.name)
    return DATASETS.extras(_key(data.name))
