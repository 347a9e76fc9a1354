"""ConfSMoE's classifier trains through the shared trainer's command line (preset confsmoe_multimodal, dataset
zoo_multimodal, objective multimodal_moe): a short run at 50% missingness beats chance, and the objective's routing
diagnostics reach metrics.jsonl as their mean over each logging window (never in eval records) and the loss plot."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from icml26zoo.moe.multimodal_data import MultimodalTaskConfig, make_multimodal_data
from icml26zoo.train import loop
from icml26zoo.train.__main__ import main
from icml26zoo.train.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("fast_compile")

# The task and classifier of the short run (as tests/zoo/test_moe_multimodal.py's CONFIG, at 2 modalities, S = 4).
TASK = (("num_classes", 4), ("feature_dims", (4, 6)), ("tokens", 4), ("signal", (1.0, 1.0)), ("setting", "II"),
        ("missing_ratio", 0.5), ("train_examples", 512), ("eval_examples", 256), ("seed", 3))
OVERRIDES = [f"data.task_options={TASK!r}", "model.d_model=16", "model.num_kv_heads=2", "model.num_heads=2",
             "model.model_options=(('feature_dims', (4, 6)), ('tokens', 4), ('num_classes', 4))",
             "model.moe.num_experts=4", "model.moe.implementation=reference", "optim.learning_rate=3e-3",
             "num_steps=120", "batch_size=32", "seq_len=8", "log_every=60", "progress_bar=false"]


def test_short_training_beats_chance_with_half_missing_and_logs_window_means(tmp_path, monkeypatch, capfd, caplog):
    data = make_multimodal_data(MultimodalTaskConfig(num_classes=4, feature_dims=(4, 6), tokens=4, train_size=512,
                                                     test_size=256, setting="II", missing_ratio=0.5, seed=3))
    assert 0.45 < 1 - data.train.present.mean() < 0.55
    steps = []
    build_run = loop.build_run

    def recording_build_run(config, devices=None):
        run, state = build_run(config, devices)
        train_step = run.train_step

        def step(state, batch):
            state, metrics = train_step(state, batch)
            steps.append(jax.device_get(metrics))
            return state, metrics

        run.train_step = step
        return run, state

    monkeypatch.setattr(loop, "build_run", recording_build_run)
    workdir = tmp_path / "run"
    assert main(["--config", "confsmoe_multimodal", "--workdir", str(workdir),
                 f"data.data_dir={tmp_path / 'tfds'}", *OVERRIDES]) == 0
    # The command line builds the dataset quietly: no TFDS "Downloading and preparing" print, no absl/TFDS lines.
    assert "Downloading and preparing" not in capfd.readouterr().out
    noisy = [r for r in caplog.records if r.name.split(".")[0] in ("absl", "tensorflow_datasets", "grain", "orbax")]
    assert not noisy, [r.getMessage() for r in noisy]
    records = read_metrics(workdir / "metrics.jsonl")
    train = [r for r in records if "train/loss" in r]
    assert [r["step"] for r in train] == [60, 120] and train[-1]["train/loss"] < train[0]["train/loss"]
    final = [r for r in records if "eval/accuracy" in r][-1]
    assert final["eval/accuracy"] > 0.5, final
    assert not any(key.startswith("moe/") for key in final)
    # Each train record holds the mean of the diagnostics of the 60 steps before it.
    assert len(steps) == 120
    for record, window in ((train[0], steps[:60]), (train[1], steps[60:])):
        for name in ("moe/collapse", "moe/coselection", "moe/layer0/load/3", "moe/dropped"):
            np.testing.assert_allclose(record[name], np.mean([float(s[name]) for s in window]), rtol=1e-6)
        np.testing.assert_allclose(sum(record[f"moe/layer0/load/{e}"] for e in range(4)), 1.0, atol=1e-5)
        assert 0.0 <= record["moe/collapse"] <= 1.0 and record["moe/dropped"] == 0.0
    assert (workdir / "loss_curve.png").stat().st_size > 0
