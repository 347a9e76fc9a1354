"""The `digits` dataset (scikit-learn's 8x8 digits as a TFDS builder) and the nc_digits presets."""

from __future__ import annotations

import numpy as np
import pytest

from icml26zoo.configs.nc_digits import digits_classifier
from icml26zoo.train.config import DataConfig, check_config
from icml26zoo.train.data import digits
from icml26zoo.train.data.sources import open_split
from icml26zoo.train.datasets import dataset_for


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return DataConfig(name="digits", data_dir=str(tmp_path_factory.mktemp("digits")), eval_split="test")


def test_tokens_are_offset_pixels_then_an_end_token():
    pixels = np.array([[0] * 63 + [16], list(range(16)) * 4])
    tokens = digits.to_tokens(pixels)
    assert tokens.shape == (2, 65) and tokens.dtype == np.int32
    np.testing.assert_array_equal(tokens[:, :64], pixels + 10)
    np.testing.assert_array_equal(tokens[:, 64], digits.END_TOKEN)
    assert tokens.max() < digits.VOCAB_SIZE and tokens.min() >= digits.NUM_CLASSES
    with pytest.raises(ValueError, match="pixels must lie in"):
        digits.to_tokens(pixels + 1)
    with pytest.raises(ValueError, match="pixels must have shape"):
        digits.to_tokens(pixels[:, :8])


def test_split_is_stratified_disjoint_and_deterministic():
    pixels, labels = digits.load_images()
    splits = digits.split_images(pixels, labels)
    (train_x, train_y), (test_x, test_y) = splits["train"], splits["test"]
    assert len(test_y) == 360 and len(train_y) + len(test_y) == len(labels) == 1797
    np.testing.assert_allclose(np.bincount(test_y) / 360, np.bincount(labels) / 1797, atol=0.01)
    # Together the splits are exactly the images (as a multiset of rows).
    assert sorted(row.tobytes() for row in np.concatenate([train_x, test_x])) == sorted(r.tobytes() for r in pixels)
    again = digits.split_images(pixels, labels)
    np.testing.assert_array_equal(again["test"][0], test_x)


def test_built_splits_hold_the_images_and_labels(data):
    pixels, labels = digits.load_images()
    want_x, want_y = digits.split_images(pixels, labels)["test"]
    documents = open_split(data, "test")
    np.testing.assert_array_equal(documents.tokens, digits.to_tokens(want_x))
    np.testing.assert_array_equal(documents.labels, want_y)
    assert len(open_split(data, "train")) == 1437
    dataset = dataset_for(data)
    assert dataset.vocab_size(data) == 28 and dataset.layout(data) == "single"
    with pytest.raises(ValueError, match="seq_len must be >= 64"):
        dataset.check_seq_len(data, 63)
    with pytest.raises(ValueError, match="data.eval_split='test'"):
        dataset.documents(None, "validation", data)


@pytest.mark.parametrize("objective", ["nc_nonl_k10", "nc_ntce_k10", "nc_nonl_etf_k10", "nc_scl_k10", "classification"])
def test_presets_pass_the_config_checks(objective):
    config = digits_classifier(objective)
    check_config(config)
    assert config.model.vocab_size >= digits.VOCAB_SIZE and config.data.eval_split == "test"
