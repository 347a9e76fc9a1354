"""The TFDS builder shape shared by the zoo's generated datasets (pystdlib, mqar, topics, nucleotide).

Nothing is downloaded, examples keep their key order on disk, and a synthetic dataset's splits "train" and
"validation" are generated from their own seeds, SeedSequence([config.seed, split index]).
"""

from __future__ import annotations

import abc
import dataclasses
import sys
from collections.abc import Iterator
from typing import Any, Self

import numpy as np
import tensorflow_datasets as tfds

SPLITS = ("train", "validation")

Examples = Iterator[tuple[str, dict[str, Any]]]


@dataclasses.dataclass(kw_only=True)
class GeneratedConfig(tfds.core.BuilderConfig):
    """Split sizes and seed of a synthetic dataset; each dataset's `make_config` names it and gives defaults."""

    train_examples: int
    eval_examples: int
    seed: int


class GeneratedBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A builder whose examples are computed here; subclasses give `_features` and `_generate_examples`.

    The default `_split_generators` suits the synthetic datasets: `_generate_examples(split)` per split.
    """

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First release."}
    # Nothing is downloaded, so there is no checksums file to find; without this, TFDS's lookup of the
    # module's code path imports the `importlib_resources` backport, which Python >= 3.9 does not ship.
    code_path = None

    @abc.abstractmethod
    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        """The feature of each example field."""

    def _info(self) -> tfds.core.DatasetInfo:
        # The dataset's description is the docstring of the module that defines the builder.
        description = sys.modules[type(self).__module__].__doc__
        features = tfds.features.FeaturesDict(self._features())
        # disable_shuffling keeps the key order on disk (TFDS otherwise orders by key hash).
        return tfds.core.DatasetInfo(builder=self, description=description, features=features,
                                     disable_shuffling=True)

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Examples]:
        del dl_manager  # Nothing to download.
        return {split: self._generate_examples(split) for split in SPLITS}

    @classmethod
    def for_config(cls, data_dir: str, config: tfds.core.BuilderConfig) -> Self:
        """The builder for `config` under `data_dir` (prepared or not)."""
        # A config listed in BUILDER_CONFIGS must be named; TFDS refuses an equal custom object.
        config_arg = config.name if config.name in {c.name for c in cls.BUILDER_CONFIGS} else config
        return cls(data_dir=data_dir, config=config_arg, file_format="array_record")


def split_size(config: GeneratedConfig, split: str) -> int:
    """`config.train_examples` for "train", `config.eval_examples` for "validation"."""
    return config.train_examples if split == "train" else config.eval_examples


def split_seed(config: GeneratedConfig, split: str) -> np.random.SeedSequence:
    """The seed of `split`: SeedSequence([config.seed, split index])."""
    return np.random.SeedSequence([config.seed, SPLITS.index(split)])
