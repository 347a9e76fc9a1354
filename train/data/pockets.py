"""`zoo_pockets`: synthetic protein–ligand complexes for ConGLUDe (issue 34; generator icml26zoo.bio.conglude_data).

Each example is one protein of L ~ UniformInt[min_length, max_length] residues with 1 or 2 planted pockets (2 with
probability two_pocket_fraction) and one ligand drawn from the profile of one of its pockets (chosen uniformly):
a structure-based training complex. Batch fields (train.data.features):
    points    [b, N, 3]   Cα coordinates in Å, the protein centred at the origin (padding residues zeros)
    features  [b, N, 32]  per-residue features (the ESM-2 stand-in, pocket signatures added on binding sites)
    weights   [b, N]      1 on the L real residues (they come first)
    targets   [b, N, 142] column 0: the ligand's binding site; row 0: pocket centre, pocket types, ligand vector
                          (layout: conglude_data.pack_targets / unpack_targets)
Options go in data.task_options, e.g. (("max_length", 96),).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.bio.conglude_data import RESIDUE_FEATURES, TARGET_WIDTH, ligands, pack_targets, protein
from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import TaskOptions, check_option, make_config


@dataclasses.dataclass(frozen=True)
class PocketOptions(TaskOptions):
    """Synthetic complexes."""

    min_length: int = 60
    max_length: int = 150
    # Percent of proteins with two pockets (an integer, as the task options' checks take).
    two_pocket_percent: int = 50
    train_examples: int = 512
    eval_examples: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("min_length", self.min_length, 24)
        check_option("max_length", self.max_length, self.min_length)
        check_option("two_pocket_percent", self.two_pocket_percent, 0, 100)


def generate(options: PocketOptions, num_examples: int, seed: np.random.SeedSequence) -> dict[str, np.ndarray]:
    """{"points" [E, M, 3], "features" [E, M, F], "weights" [E, M], "targets" [E, M, TARGET_WIDTH]} float32,
    M = max_length, deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    size = options.max_length
    out = {"points": np.zeros((num_examples, size, 3), np.float32),
           "features": np.zeros((num_examples, size, RESIDUE_FEATURES), np.float32),
           "weights": np.zeros((num_examples, size), np.float32),
           "targets": np.zeros((num_examples, size, TARGET_WIDTH), np.float32)}
    for index in range(num_examples):
        length = int(rng.integers(options.min_length, options.max_length + 1))
        chain = protein(length, 2 if rng.random() * 100 < options.two_pocket_percent else 1, rng)
        pocket = int(rng.integers(len(chain.types)))
        ligand = ligands(chain.types[pocket: pocket + 1], rng)[0]
        out["points"][index, :length] = chain.coordinates
        out["features"][index, :length] = chain.features
        out["weights"][index, :length] = 1.0
        out["targets"][index, :length] = pack_targets(chain, pocket, ligand)
    return out


class ZooPockets(GeneratedBuilder):
    """Examples {"points", "features", "weights", "targets"} of one complex each (module docstring)."""

    BUILDER_CONFIGS = [make_config(PocketOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return feature_spec(self.builder_config.options.max_length, 3, RESIDUE_FEATURES, num_targets=TARGET_WIDTH)

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        arrays = generate(config.options, split_size(config, split), split_seed(config, split))
        for index in range(len(arrays["points"])):
            yield f"{index:08d}", {name: values[index] for name, values in arrays.items()}


@register_dataset("zoo_pockets")
class PocketsDataset(FeatureDataset):
    """Protein–ligand complexes for objective "conglude"."""

    name, options_class, builder_class = "zoo_pockets", PocketOptions, ZooPockets
    labelled = False

    def max_points(self, options: PocketOptions) -> int:
        return options.max_length

    def feature_dim(self, options: PocketOptions) -> int:
        return RESIDUE_FEATURES
