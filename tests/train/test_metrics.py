"""Metric writers (JSONL, TensorBoard, process-0 only) and the loss-curve plot."""

import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.train.metrics import (
    JsonlWriter,
    MultiWriter,
    NullWriter,
    TensorBoardWriter,
    create_writer,
    read_metrics,
)
from icml26zoo.train.plotting import loss_figure, plot_loss_curves


def test_jsonl_lines_parse_and_scalars_convert(tmp_path):
    path = tmp_path / "metrics.jsonl"
    writer = JsonlWriter(path)
    writer.write(1, {"train/loss": jnp.float32(2.5), "train/tokens": np.int64(4096), "lr": 1e-3})
    writer.write(2, {"train/loss": jnp.asarray(jnp.nan), "grad_norm": np.float32(np.inf), "ok": True})
    writer.close()

    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "train/loss": 2.5, "train/tokens": 4096, "lr": 1e-3},
        {"step": 2, "train/loss": "NaN", "grad_norm": "Infinity", "ok": 1},
    ]
    records = read_metrics(path)
    assert math.isnan(records[1]["train/loss"]) and records[1]["grad_norm"] == math.inf
    assert isinstance(records[0]["train/tokens"], int)


def test_jsonl_appends_on_resume_after_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    first = JsonlWriter(path)
    first.write(1, {"train/loss": 3.0})
    first.close()
    with open(path, "a") as f:
        f.write('{"step": 2, "train/lo')  # the run was killed mid-write
    resumed = JsonlWriter(path)
    resumed.write(2, {"train/loss": 2.0})
    resumed.close()
    with pytest.warns(UserWarning, match="unparsable"):
        records = read_metrics(path)
    assert records == [{"step": 1, "train/loss": 3.0}, {"step": 2, "train/loss": 2.0}]


def test_write_rejects_bad_input(tmp_path):
    writer = JsonlWriter(tmp_path / "m.jsonl")
    with pytest.raises(ValueError, match="step"):
        writer.write(-1, {"a": 1.0})
    with pytest.raises(ValueError, match="metrics\\['v'\\]"):
        writer.write(0, {"v": np.ones(3)})
    with pytest.raises(ValueError, match="keys"):
        writer.write(0, {"step": 1.0})
    writer.close()
    assert (tmp_path / "m.jsonl").read_text() == ""
    with pytest.raises(ValueError, match="writers\\[0\\]"):
        MultiWriter([object()])


def test_tensorboard_event_file_is_created(tmp_path):
    writer = TensorBoardWriter(tmp_path / "tb")
    writer.write(3, {"train/loss": np.float32(1.25)})
    writer.close()
    events = [f for f in os.listdir(tmp_path / "tb") if f.startswith("events.out.tfevents")]
    assert len(events) == 1 and os.path.getsize(tmp_path / "tb" / events[0]) > 0


def test_create_writer_on_process_zero_writes_both(tmp_path):
    writer = create_writer(tmp_path, tensorboard=True, process_index=0)
    writer.write(10, {"train/loss": 1.0})
    writer.close()
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 10, "train/loss": 1.0}]
    assert os.listdir(tmp_path / "tensorboard")


def test_create_writer_elsewhere_writes_nothing(tmp_path):
    writer = create_writer(tmp_path / "run", tensorboard=True, process_index=1)
    assert isinstance(writer, NullWriter)
    writer.write(10, {"train/loss": 1.0})
    writer.flush()
    writer.close()
    assert not (tmp_path / "run").exists()


def test_create_writer_defaults_to_this_process(tmp_path):
    writer = create_writer(tmp_path, tensorboard=False)  # single-process test run: process 0
    writer.write(0, {"eval/loss": 2.0})
    writer.close()
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 0, "eval/loss": 2.0}]
    assert not (tmp_path / "tensorboard").exists()


def _write_run(path, *, with_eval: bool):
    writer = JsonlWriter(path)
    for step in range(1, 41):
        loss = 3.0 / math.sqrt(step)
        writer.write(step, {"train/loss": loss})
        if with_eval and step % 10 == 0:
            writer.write(step, {"eval/loss": loss * 1.1, "eval/bits_per_byte": loss * 1.1 / math.log(2)})
    writer.write(41, {"train/loss": math.nan})  # a diverged step must not break the plot
    writer.close()


@pytest.mark.parametrize("with_eval", [True, False])
def test_plot_writes_png(tmp_path, with_eval):
    metrics = tmp_path / "metrics.jsonl"
    _write_run(metrics, with_eval=with_eval)
    out = plot_loss_curves(metrics, tmp_path / "plots" / "loss.png", title="test", markers=[20, 30])
    assert out == str(tmp_path / "plots" / "loss.png")
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(out) > 5000


def test_the_bits_per_byte_panel_draws_the_baselines(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    _write_run(metrics, with_eval=True)
    figure = loss_figure(metrics, baselines={"unigram": 4.5})
    bpb_lines = {line.get_label(): line for line in figure.axes[1].get_lines()}
    assert set(bpb_lines) == {"eval/bits_per_byte", "unigram"}
    assert list(bpb_lines["unigram"].get_ydata()) == [4.5, 4.5]
    assert "unigram" not in {line.get_label() for line in figure.axes[0].get_lines()}
    with pytest.raises(ValueError, match="baselines must map names to numbers"):
        loss_figure(metrics, baselines={"unigram": "4.5"})


def test_plot_train_loss_only(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    writer = JsonlWriter(metrics)
    for step in range(5):
        writer.write(step, {"train/loss": 1.0 / (step + 1)})
    writer.close()
    out = plot_loss_curves(metrics, tmp_path / "loss.png")
    assert os.path.getsize(out) > 0


def test_plot_without_loss_raises(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    writer = JsonlWriter(metrics)
    writer.write(1, {"lr": 1e-3})
    writer.close()
    with pytest.raises(ValueError, match="metrics_path"):
        plot_loss_curves(metrics, tmp_path / "loss.png")
    assert not (tmp_path / "loss.png").exists()
