"""`tfds_image:<name>`: any prepared TFDS image-classification dataset as labelled rows of pixel tokens.

The dataset must already be prepared under data_dir (this loader never downloads) and have an "image" feature
(uint8 [H, W, C]) and a "label" ClassLabel feature with K classes. Each image becomes one row of H·W·C + 1
tokens: every channel value v in 0 .. 255, row-major, quantised to LEVELS = 16 levels as token K + v·16 // 256,
then an end token K + 16, so a row of seq_len = H·W·C input tokens holds every pixel. Token ids 0 .. K−1 are
never inputs (a model's output columns 0 .. K−1 read the label), as for `digits` and `topics`; the vocabulary
is K + 17. Use with `objective="classification"` or the `nc_*_k<K>` objectives, e.g.
`data.name="tfds_image:mnist"` (784 pixel tokens per row, seq_len >= 784).
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data.catalog import prepared_tfds_builder
from icml26zoo.train.data.documents import ArrayDocuments, read_arrays
from icml26zoo.train.data.registry import Dataset, register_dataset

LEVELS = 16
IMAGE, LABEL = "image", "label"


def quantize(images: np.ndarray, num_classes: int) -> np.ndarray:
    """images uint8-valued [N, H, W, C] -> tokens int32 [N, H·W·C + 1]: K + level, then the end token K + LEVELS."""
    images = np.asarray(images)
    if images.ndim != 4:
        raise ValueError(f"images must have shape [N, H, W, C], got shape {images.shape}")
    if images.size and (images.min() < 0 or images.max() > 255):
        raise ValueError(f"images must hold values in [0, 255], got [{images.min()}, {images.max()}]")
    levels = images.reshape(images.shape[0], -1).astype(np.int64) * LEVELS // 256
    end = np.full((images.shape[0], 1), num_classes + LEVELS)
    return np.concatenate([num_classes + levels, end], axis=1).astype(np.int32)


def image_info(builder: tfds.core.DatasetBuilder, name: str) -> tuple[int, int]:
    """(K classes, pixels per image H·W·C) from the builder's features; ValueError naming what is missing."""
    features = builder.info.features
    if IMAGE not in features or LABEL not in features:
        raise ValueError(f"data.name {name!r}: an image dataset needs features {IMAGE!r} and {LABEL!r}, got "
                         f"{sorted(features)}")
    shape = features[IMAGE].shape
    num_classes = getattr(features[LABEL], "num_classes", None)
    if None in shape or len(shape) != 3 or not num_classes:
        raise ValueError(f"data.name {name!r}: needs fixed-size images [H, W, C] and a ClassLabel label, got "
                         f"image shape {shape} and label {type(features[LABEL]).__name__}")
    return int(num_classes), int(np.prod(shape))


@register_dataset("tfds_image:")
class TfdsImageDataset(Dataset):
    """A prepared TFDS image dataset ("image", "label") as one labelled row of pixel tokens per image."""

    byte_level = False
    buildable = False

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        return prepared_tfds_builder(data, directory, "tfds_image:")

    def _info(self, data: DataConfig) -> tuple[int, int]:
        from icml26zoo.train.data.sources import data_dir

        return image_info(self.builder(data, data_dir(data)), data.name)

    def vocab_size(self, data: DataConfig) -> int:
        return self._info(data)[0] + LEVELS + 1

    def documents(self, builder: tfds.core.DatasetBuilder, split: str, data: DataConfig) -> ArrayDocuments:
        num_classes, pixels = image_info(builder, data.name)
        arrays = read_arrays(builder.as_data_source(split=split), (builder.data_dir, split, IMAGE), (IMAGE, LABEL))
        return ArrayDocuments(quantize(arrays[IMAGE], num_classes), np.ones(pixels + 1, np.float32),
                              labels=arrays[LABEL])

    def layout(self, data: DataConfig) -> str:
        return "single"

    def check_seq_len(self, data: DataConfig, seq_len: int) -> None:
        pixels = self._info(data)[1]
        if seq_len < pixels:
            raise ValueError(f"seq_len must be >= {pixels} (H·W·C of {data.name!r}) so that a row holds every "
                             f"pixel, got {seq_len}")
