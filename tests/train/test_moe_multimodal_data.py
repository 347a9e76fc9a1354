"""The zoo_multimodal TFDS builder stores the generator's examples exactly; the ConfSMoE presets run from the
command line on it, with overrides checked by name."""

import json

import numpy as np
import pytest
import tensorflow_datasets as tfds

from icml26zoo.moe.multimodal_cli import apply_overrides, main
from icml26zoo.moe.multimodal_data import MultimodalTaskConfig, make_multimodal_data
from icml26zoo.moe.multimodal_train import PRESETS
from icml26zoo.train.data.multimodal import ZooMultimodal, config_name, load_multimodal

pytestmark = pytest.mark.usefixtures("fast_compile")

TINY = ["task.feature_dims=(3, 4)", "task.signal=(1.0, 1.0)", "task.modality_missing_rates=(0.3, 0.3)",
        "task.dropped_modality=1", "task.train_size=48", "task.test_size=16", "task.tokens=4", "model.dim=16",
        "model.pool_size=2", "moe.num_experts=4", "train.steps=2", "train.batch_size=8"]


def test_builder_round_trip_equals_the_generator_and_names_every_setting(tmp_path):
    task = MultimodalTaskConfig(train_size=40, test_size=24, tokens=4, setting="III", feature_dims=(3, 4, 5),
                                signal=(1.0, 0.5, 2.0), modality_missing_rates=(0.1, 0.2, 0.3), dropped_modality=2)
    data, reference = load_multimodal(task, tmp_path), make_multimodal_data(task)
    for split, expected in ((data.train, reference.train), (data.test, reference.test)):
        for got, want in zip(split.inputs, expected.inputs, strict=True):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(split.present, expected.present)
        np.testing.assert_array_equal(split.labels, expected.labels)
    assert not data.test.present[:, 2].any() and data.test.present[:, :2].all()  # setting III at test
    assert tfds.builder_cls("zoo_multimodal") is ZooMultimodal
    names = {config_name(MultimodalTaskConfig(setting=s)) for s in ("I", "II", "III")}
    names.add(config_name(MultimodalTaskConfig(seed=1)))
    assert len(names) == 4


def test_overrides_follow_the_task_and_bad_ones_name_themselves():
    task, model, train = apply_overrides(PRESETS["setting_I"], ["task.tokens=4", "moe.router=topk_softmax",
                                                                 "train.steps=7", "task.signal=(1, 2, 3)"])
    assert (task.tokens, model.tokens, model.moe.router, train.steps) == (4, 4, "topk_softmax", 7)
    assert task.signal == (1, 2, 3) and task.setting == "I"
    for bad, match in (("task.tokens", "section.field=value"), ("optim.lr=1", "section must be one of"),
                       ("task.nope=1", "has no field 'nope'"),
                       ("task.feature_dims=(3, 4)", "signal"), ("model.tokens=3", "has no field 'tokens'"),
                       ("train.steps=0", "'steps': 0"), ("moe.top_k=9", "top_k")):
        with pytest.raises(ValueError, match=match):
            apply_overrides(PRESETS["setting_II"], [bad])


def test_a_preset_runs_from_the_command_line(tmp_path, capsys):
    results = main(["--preset", "setting_III", "--data-dir", str(tmp_path / "tfds"), "--workdir",
                    str(tmp_path / "run"), *TINY])
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert written["preset"] == "setting_III" and written["router"] == "confidence"
    for tag in ("impute", "no_impute"):
        assert 0.0 <= results[f"{tag}/accuracy"] <= 1.0
        np.testing.assert_allclose(sum(results[f"{tag}/load"]), 1.0, atol=1e-5)
    assert "impute/collapse" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--preset", "setting_II", "--data-dir", str(tmp_path), "task.nope=1"])
