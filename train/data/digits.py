"""`zoo_digits`: scikit-learn's 8x8 handwritten digits (1,797 images, 10 classes) as labelled token rows.

Built offline by the zoo from `sklearn.datasets.load_digits` (bundled with scikit-learn: nothing is
downloaded; install the `sklearn` extra). Each image becomes one row of 65 tokens: its 64 pixel intensities
(0 .. 16, row-major) as tokens 10 .. 26, then an end token 27, so that a row of seq_len = 64 input tokens holds
every pixel (the trainer's inputs are a row's tokens but the last). The label is the digit.

Vocabulary layout (size 28):
    0 ... 9      reserved, never in an input: a model's output columns 0 .. 9 read the label
    10 ... 26    pixel intensity v as token 10 + v
    27           end of image

Splits: "train" (1,437 images) and "test" (360), a stratified split with a fixed seed (0) through
`sklearn.model_selection.train_test_split`; use data.eval_split="test".
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data.documents import ArrayDocuments, read_arrays
from icml26zoo.train.data.generated import Examples, GeneratedBuilder, GeneratedConfig
from icml26zoo.train.data.registry import Dataset, register_dataset

NUM_CLASSES = 10
PIXELS = 64
MAX_INTENSITY = 16
END_TOKEN = NUM_CLASSES + MAX_INTENSITY + 1
VOCAB_SIZE = END_TOKEN + 1
ROW_LENGTH = PIXELS + 1
SPLITS = ("train", "test")
TEST_EXAMPLES = 360
SPLIT_SEED = 0


def load_images() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: (pixels int64 [1797, 64] in 0 .. 16, labels int64 [1797])."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:
        raise ImportError('the digits dataset needs scikit-learn: pip install "icml26-zoo[sklearn]"') from error
    bunch = load_digits()
    return bunch.data.astype(np.int64), bunch.target.astype(np.int64)


def split_images(pixels: np.ndarray, labels: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": (pixels, labels), "test": (pixels, labels)}: stratified, TEST_EXAMPLES test images, seed 0."""
    from sklearn.model_selection import train_test_split

    train_x, test_x, train_y, test_y = train_test_split(pixels, labels, test_size=TEST_EXAMPLES, stratify=labels,
                                                        random_state=SPLIT_SEED)
    return {"train": (train_x, train_y), "test": (test_x, test_y)}


def to_tokens(pixels: np.ndarray) -> np.ndarray:
    """pixels [N, 64] in 0 .. 16 -> rows int32 [N, 65]: 10 + pixel, then END_TOKEN."""
    pixels = np.asarray(pixels)
    if pixels.ndim != 2 or pixels.shape[1] != PIXELS:
        raise ValueError(f"pixels must have shape [N, {PIXELS}], got shape {pixels.shape}")
    if pixels.size and (pixels.min() < 0 or pixels.max() > MAX_INTENSITY):
        raise ValueError(f"pixels must lie in [0, {MAX_INTENSITY}], got [{pixels.min()}, {pixels.max()}]")
    end = np.full((pixels.shape[0], 1), END_TOKEN)
    return np.concatenate([NUM_CLASSES + pixels, end], axis=1).astype(np.int32)


class ZooDigits(GeneratedBuilder):
    """Examples {"tokens": int32 [65], "label": int32}; splits "train" and "test"."""

    BUILDER_CONFIGS = [GeneratedConfig(name="default", train_examples=1437, eval_examples=TEST_EXAMPLES,
                                       seed=SPLIT_SEED, description="scikit-learn digits, stratified split.")]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return {"tokens": tfds.features.Tensor(shape=(ROW_LENGTH,), dtype=np.int32),
                "label": tfds.features.Tensor(shape=(), dtype=np.int32)}

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Examples]:
        del dl_manager  # scikit-learn bundles the images.
        splits = split_images(*load_images())
        return {name: self._generate(*splits[name]) for name in SPLITS}

    def _generate(self, pixels: np.ndarray, labels: np.ndarray) -> Examples:
        for index, (row, label) in enumerate(zip(to_tokens(pixels), labels, strict=True)):
            yield f"{index:08d}", {"tokens": row, "label": np.int32(label)}

    def _generate_examples(self, split: str) -> Examples:
        return self._split_generators(None)[split]


@register_dataset("digits", extras=("sklearn",))
class DigitsDataset(Dataset):
    """Labelled rows for `objective="classification"` or the nc_*_k10 objectives; batch["labels"] [B]."""

    byte_level = False

    def builder(self, data: DataConfig, directory: str) -> tfds.core.DatasetBuilder:
        return ZooDigits.for_config(directory, ZooDigits.BUILDER_CONFIGS[0])

    def vocab_size(self, data: DataConfig) -> int:
        return VOCAB_SIZE

    def documents(self, builder: tfds.core.DatasetBuilder, split: str, data: DataConfig) -> ArrayDocuments:
        if split not in SPLITS:
            raise ValueError(f"digits has splits {list(SPLITS)} (set data.train_split / data.eval_split, "
                             f"e.g. data.eval_split='test'), got {split!r}")
        arrays = read_arrays(builder.as_data_source(split=split), (builder.data_dir, split), ("tokens", "label"))
        return ArrayDocuments(arrays["tokens"], np.ones(ROW_LENGTH, np.float32), labels=arrays["label"])

    def layout(self, data: DataConfig) -> str:
        return "single"

    def check_seq_len(self, data: DataConfig, seq_len: int) -> None:
        if seq_len < PIXELS:
            raise ValueError(f"seq_len must be >= {PIXELS} so that a row holds every pixel of a digit, got {seq_len}")
