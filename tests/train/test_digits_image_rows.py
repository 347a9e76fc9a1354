"""`tfds_image:<name>`: a prepared TFDS image dataset (here a tiny one built in a temp dir) as labelled rows."""

from __future__ import annotations

import numpy as np
import PIL.Image
import pytest
import tensorflow_datasets as tfds

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import make_train_iterator
from icml26zoo.train.data.image_rows import LEVELS, quantize
from icml26zoo.train.data.sources import open_split
from icml26zoo.train.datasets import dataset_for

NUM_CLASSES, SHAPE = 3, (4, 4, 1)


def images(split):
    rng = np.random.default_rng(0 if split == "train" else 1)
    count = 12 if split == "train" else 6
    return rng.integers(0, 256, (count, *SHAPE), dtype=np.uint8), np.arange(count) % NUM_CLASSES


class ZooTestImages(tfds.core.GeneratorBasedBuilder, skip_registration=False):
    """A tiny image-classification dataset for this test."""

    VERSION = tfds.core.Version("1.0.0")
    code_path = None

    def _info(self):
        features = tfds.features.FeaturesDict({"image": tfds.features.Image(shape=SHAPE),
                                               "label": tfds.features.ClassLabel(num_classes=NUM_CLASSES)})
        return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True)

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split) for split in ("train", "test")}

    def _generate_examples(self, split):
        pixels, labels = images(split)
        for index, (image, label) in enumerate(zip(pixels, labels, strict=True)):
            # A PIL image: TFDS encodes numpy images with TensorFlow, which the zoo does not install.
            yield f"{index:04d}", {"image": PIL.Image.fromarray(image[:, :, 0]), "label": int(label)}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("images"))
    ZooTestImages(data_dir=directory, file_format="array_record").download_and_prepare()
    return DataConfig(name="tfds_image:zoo_test_images", data_dir=directory, eval_split="test")


def test_quantize_levels_and_end_token():
    pixels = np.array([[[[0], [15]], [[16], [255]]]])
    np.testing.assert_array_equal(quantize(pixels, 10), [[10, 10, 11, 10 + LEVELS - 1, 10 + LEVELS]])
    with pytest.raises(ValueError, match="images must have shape"):
        quantize(pixels[0], 10)


def test_rows_hold_the_quantized_images_and_labels(data):
    want_images, want_labels = images("test")
    documents = open_split(data, "test")
    np.testing.assert_array_equal(documents.tokens, quantize(want_images, NUM_CLASSES))
    np.testing.assert_array_equal(documents.labels, want_labels)
    dataset = dataset_for(data)
    assert dataset.vocab_size(data) == NUM_CLASSES + LEVELS + 1
    with pytest.raises(ValueError, match="seq_len must be >= 16"):
        dataset.check_seq_len(data, 15)
    batch = next(make_train_iterator(data, batch_size=4, seq_len=16, seed=0))
    assert batch["inputs"].shape == (4, 16) and batch["labels"].shape == (4,)
    assert batch["inputs"].min() >= NUM_CLASSES


def test_unprepared_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="zoo_test_images"):
        open_split(DataConfig(name="tfds_image:zoo_test_images", data_dir=str(tmp_path)), "train")
