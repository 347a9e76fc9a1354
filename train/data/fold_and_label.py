"""`fold_and_label`: GeoCoupling's toy co-design task (icml26zoo.bio.geocoupling_toy).

Each example is one of four 12-residue fold templates (helix, hairpin, zigzag, ring) in a Haar-random orientation
with Gaussian noise σ = 0.1, centred, and its sequence: token s_i = the number of other residues within 1.2 of
residue i, clipped to 0..3 (a deterministic function of the structure). Generated from the split's seed
(SeedSequence([seed, split])), so deterministic per seed.

Batch fields (train.data.features): points [b, 12, 3] (the structure), features [b, 12, 0], weights [b, 12]
(ones), targets [b, 12, 1] (the tokens as float32). Options in data.task_options: train_examples, eval_examples,
seed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.bio.geocoupling_toy import NUM_RESIDUES, fold_and_label
from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, split_seed, split_size
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import TaskOptions, make_config


@dataclasses.dataclass(frozen=True)
class FoldAndLabelOptions(TaskOptions):
    """Fold-and-label examples (12 residues, 4 tokens)."""

    train_examples: int = 4096
    eval_examples: int = 256


class FoldAndLabel(GeneratedBuilder):
    """Examples {"points": float32 [12, 3], "weights": float32 [12], "targets": float32 [12, 1]}."""

    BUILDER_CONFIGS = [make_config(FoldAndLabelOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return feature_spec(NUM_RESIDUES, 3, 0, num_targets=1)

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        rng = np.random.default_rng(split_seed(config, split))
        points, tokens, _ = fold_and_label(split_size(config, split), rng)
        weights = np.ones(NUM_RESIDUES, np.float32)
        for index, (structure, sequence) in enumerate(zip(points, tokens, strict=True)):
            yield f"{index:08d}", {"points": structure, "weights": weights,
                                   "targets": sequence[:, None].astype(np.float32)}


@register_dataset("fold_and_label")
class FoldAndLabelDataset(FeatureDataset):
    """Co-design examples for objective "geocoupling_codesign"."""

    name, options_class, builder_class = "fold_and_label", FoldAndLabelOptions, FoldAndLabel
    labelled = False

    def max_points(self, options: FoldAndLabelOptions) -> int:
        return NUM_RESIDUES
