"""`zoo_digit_patches`: scikit-learn's 8x8 digits as 16 tokens of 2x2 patches (PACE).

Built offline from `sklearn.datasets.load_digits` (bundled with scikit-learn, the `sklearn` extra) with the same
stratified train/test split as `zoo_digits` (`train.data.digits`: 1,437 train and 360 test images, seed 0).
Each image becomes 16 points, one per non-overlapping 2x2 patch in row-major patch order: the point is the patch
centre in 2-D, ((column + 0.5) / 4, (row + 0.5) / 4) in [0, 1]², and its features are the patch's 4 intensities
(top-left, top-right, bottom-left, bottom-right) divided by 16, in [0, 1]. The label is the digit.

Batch fields (train.data.features): points [b, N, 2], features [b, N, 4], weights [b, N] (ones on the 16 real
points), labels [b]. Splits "train" and "test": use data.eval_split="test".
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.data.digits import MAX_INTENSITY, PIXELS, SPLITS, TEST_EXAMPLES, load_images, split_images
from icml26zoo.train.data.features import FeatureDataset, feature_spec
from icml26zoo.train.data.generated import Examples, GeneratedBuilder
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import TaskOptions, make_config

SIDE = 8
PATCH = 2
PATCHES_PER_SIDE = SIDE // PATCH
NUM_PATCHES = PATCHES_PER_SIDE**2
PATCH_PIXELS = PATCH * PATCH


@dataclasses.dataclass(frozen=True)
class DigitPatchesOptions(TaskOptions):
    """scikit-learn digits as 2x2 patch tokens (the split is fixed; these options only name the build)."""

    train_examples: int = 1437
    eval_examples: int = TEST_EXAMPLES


def patch_centres() -> np.ndarray:
    """[16, 2] (x, y) centres of the 2x2 patches in [0, 1]², row-major patch order."""
    rows, cols = np.divmod(np.arange(NUM_PATCHES), PATCHES_PER_SIDE)
    return np.stack([(cols + 0.5) / PATCHES_PER_SIDE, (rows + 0.5) / PATCHES_PER_SIDE], axis=1)


def to_patches(pixels: np.ndarray) -> np.ndarray:
    """pixels [E, 64] in 0 .. 16 (row-major 8x8) -> patch intensities [E, 16, 4] in [0, 1]."""
    pixels = np.asarray(pixels)
    if pixels.ndim != 2 or pixels.shape[1] != PIXELS:
        raise ValueError(f"pixels must have shape [E, {PIXELS}], got shape {pixels.shape}")
    images = pixels.reshape(-1, PATCHES_PER_SIDE, PATCH, PATCHES_PER_SIDE, PATCH)
    patches = images.transpose(0, 1, 3, 2, 4).reshape(-1, NUM_PATCHES, PATCH_PIXELS)
    return patches.astype(np.float32) / MAX_INTENSITY


class ZooDigitPatches(GeneratedBuilder):
    """Examples {"points": [16, 2], "features": [16, 4], "weights": [16], "label": int32}; splits train, test."""

    BUILDER_CONFIGS = [make_config(DigitPatchesOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return feature_spec(NUM_PATCHES, 2, PATCH_PIXELS)

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Examples]:
        del dl_manager  # scikit-learn bundles the images.
        splits = split_images(*load_images())
        return {name: self._generate(*splits[name]) for name in SPLITS}

    def _generate(self, pixels: np.ndarray, labels: np.ndarray) -> Examples:
        points, weights = patch_centres().astype(np.float32), np.ones(NUM_PATCHES, np.float32)
        for index, (patches, label) in enumerate(zip(to_patches(pixels), labels, strict=True)):
            yield f"{index:08d}", {"points": points, "features": patches, "weights": weights, "label": np.int32(label)}

    def _generate_examples(self, split: str) -> Examples:
        return self._split_generators(None)[split]


@register_dataset("zoo_digit_patches", extras=("sklearn",))
class DigitPatchesDataset(FeatureDataset):
    """Labelled patch sets for objective "set_classification" (10 classes)."""

    name, options_class, builder_class = "zoo_digit_patches", DigitPatchesOptions, ZooDigitPatches

    def max_points(self, options: DigitPatchesOptions) -> int:
        return NUM_PATCHES

    def feature_dim(self, options: DigitPatchesOptions) -> int:
        return PATCH_PIXELS
