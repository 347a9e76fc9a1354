"""The zoo_multimodal dataset, registered with train.data: it stores the generator's examples as point sets (exact
round trip), the training split's missing modalities flagged for a fill drawn in training, the validation
split's filled from the training split; it names every setting on disk, checks its options and the row length
by name; the confsmoe_multimodal preset takes the trainer's overrides (model.moe.* included)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow_datasets as tfds
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.models import build_model
from icml26zoo.moe.multimodal_data import fill_split, make_multimodal_data, pack_points
from icml26zoo.train.config import DataConfig, apply_overrides
from icml26zoo.train.data.features import open_rows
from icml26zoo.train.data.multimodal import MultimodalOptions, ZooMultimodal, config_name
from icml26zoo.train.datasets import dataset_for

OPTIONS = (("train_examples", 40), ("eval_examples", 24), ("tokens", 4), ("setting", "III"),
           ("feature_dims", (3, 4, 5)), ("signal", (1.0, 0.5, 2.0)), ("modality_missing_rates", (0.1, 0.2, 0.3)),
           ("dropped_modality", 2), ("pool_size", 3))


def test_dataset_round_trip_equals_the_generator_and_names_every_setting(tmp_path):
    data = DataConfig(name="zoo_multimodal", data_dir=str(tmp_path), task_options=OPTIONS)
    options = dataset_for(data).options(data)
    reference = make_multimodal_data(options.task)
    for split, part in (("train", "train"), ("validation", "test")):
        rows = open_rows(data, split, 3 * 4)
        stored = (pack_points(reference.train, to_fill=True) if split == "train"
                  else pack_points(fill_split(reference, part, 3)))
        for got, want in zip((rows.points, rows.features, rows.weights), stored, strict=True):
            np.testing.assert_array_equal(got, want)
        assert rows.features.any() == (split == "train")
        raw = getattr(reference, part)
        np.testing.assert_array_equal(rows.labels, raw.labels)
        # The generator's raw inputs come back where a modality is present (zeros elsewhere in both).
        present = rows.weights.reshape(-1, 3, 4)[:, :, 0] > 0
        np.testing.assert_array_equal(present, raw.present)
        for m, x in enumerate(raw.inputs):
            stored = rows.points.reshape(-1, 3, 4, 5)[:, m, :, :x.shape[-1]]
            np.testing.assert_array_equal(np.where(present[:, m, None, None], stored, 0.0), x)
    assert not present[:, 2].any() and present[:, :2].all()  # setting III at validation
    assert tfds.builder_cls("zoo_multimodal") is ZooMultimodal
    names = {config_name(MultimodalOptions(setting=s)) for s in ("I", "II", "III")}
    names |= {config_name(MultimodalOptions(seed=1)), config_name(MultimodalOptions(pool_size=3))}
    assert len(names) == 5


@pytest.mark.parametrize(("options", "match"), [
    ((("pool", 3),), r"data.task_options: unknown zoo_multimodal dataset option 'pool'; valid options: \[.*'pool_"),
    ((("missing_ratio", 1.5),), "data.task_options: missing_ratio"),
    ((("feature_dims", (3, 4, 5)),), "data.task_options: .*signal"),
    ((("pool_size", 0),), "data.task_options option 'pool_size' must be an integer >= 1, got 0"),
])
def test_bad_options_name_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        DataConfig(name="zoo_multimodal", task_options=options)


def test_rows_must_hold_every_modality_token():
    data = DataConfig(name="zoo_multimodal", task_options=(("tokens", 4),))
    dataset_for(data).check_seq_len(data, 8)
    with pytest.raises(ValueError, match="seq_len must be >= 8, the points per zoo_multimodal example"):
        dataset_for(data).check_seq_len(data, 7)


def test_the_preset_takes_the_trainers_overrides():
    config = apply_overrides(load_preset("confsmoe_multimodal"), [
        "model.moe.router=topk_softmax", "model.moe.num_experts=4", "objective_options=(('impute', False),)",
        "num_steps=7"])
    assert (config.model.moe.router, config.model.moe.num_experts, config.num_steps) == ("topk_softmax", 4, 7)
    assert config.objective_options == (("impute", False),) and config.model.name == "confsmoe"
    assert config.seq_len == 3 * 8  # M·S points per row
    for bad, match in (("model.moe.top_k=9", "top_k must be at most num_experts"),
                       ("model.moe.nope=1", "unknown config field 'model.moe.nope'"),
                       ("objective_options=(('impute', 1),)", "impute' must be a bool")):
        with pytest.raises(ValueError, match=match):
            apply_overrides(load_preset("confsmoe_multimodal"), [bad])
    without = apply_overrides(load_preset("confsmoe_multimodal"), ["model.moe=none"])
    with pytest.raises(ValueError, match="model.moe must be a MoEConfig for model 'confsmoe'"):
        build_model(without.model, rngs=nnx.Rngs(0))
