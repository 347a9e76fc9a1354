"""Every user error of the train CLI is one line `error: ...` with exit code 2, before any training (issue 33,
items 3 and 4): config checks that used to fail inside `train()` or after it, a full disk, an undecodable
metrics line, a warning, and a run whose parameters or eval loss become non-finite."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import warnings

import jax
import pytest

from icml26zoo.train import data as data_lib
from icml26zoo.train.__main__ import main
from icml26zoo.train.checkpoint import Checkpointer
from icml26zoo.train.config import DataConfig
from icml26zoo.train.logs import configure_logs
from icml26zoo.train.metrics import drop_records_after, read_metrics

pytestmark = pytest.mark.usefixtures("fast_compile")

MQAR = ["data.name=mqar", "data.mqar_num_keys=16", "data.mqar_num_values=16", "data.mqar_num_pairs=4",
        "data.mqar_train_examples=64", "data.mqar_eval_examples=16"]

# (case, arguments after --config llama_tiny (or a --config of their own), the exact line printed).
BAD_CONFIGS = [
    ("options_not_pairs", ["optim.options=1"],
     "error: config field 'optim.options' expects a Python tuple literal such as (('name', 1),), got '1'"),
    ("seed_too_large", ["seed=1e30"],
     "error: seed must be an integer in [0, 4294967295], got 1000000000000000019884624838656"),
    ("lora_rank_above_width", ["lora_rank=1000"],
     "error: lora_rank must be at most the adapted layers' width, got 1000 > 32 (layer layers.mixer.k_proj: 64 -> 32)"),
    ("spike_monitor_without_adam", ["spike_monitor_every=1", "optim.name=sgd"],
     "error: spike_monitor_every=1 needs an Adam-family optimizer (it reads Adam's moments); optim.name='sgd' has "
     "none: set spike_monitor_every=0 or optim.name='adamw'"),
    ("sample_top_k_above_vocab", ["sample_top_k=1000"],
     "error: sample_top_k must be at most model.vocab_size (256) or 0 (no top-k), got 1000"),
    ("classification_on_default_bytes", ["objective=classification"],
     "error: objective='classification' needs a labelled dataset (one label per row, e.g. data.name='topics'); "
     "data.name='pystdlib' has no labels"),
    ("classification_on_mqar", ["objective=classification", *MQAR, "model.vocab_size=64", "seq_len=32"],
     "error: objective='classification' needs a labelled dataset (one label per row, e.g. data.name='topics'); "
     "data.name='mqar' has no labels"),
    ("data_dir_is_a_file", ["data.data_dir={tmp}/a_file"], "error: data.data_dir '{tmp}/a_file' is not a directory"),
    ("muon_ns_steps_0", ["optim.name=muon", "optim.options=(('ns_steps', 0),)"],
     "error: optim.options: ns_steps must be an integer >= 1, got 0"),
    ("muon_ns_steps_negative", ["optim.name=muon", "optim.options=(('ns_steps', -1),)"],
     "error: optim.options: ns_steps must be an integer >= 1, got -1"),
    ("dp_sgd_momentum", ["optim.name=dp_sgd", "optim.grad_clip_norm=0", "optim.options=(('momentum', 1.5),)"],
     "error: optim.options: momentum must be a number in [0, 1), got 1.5"),
    ("dp_sgd_seed", ["optim.name=dp_sgd", "optim.grad_clip_norm=0", "optim.options=(('seed', -1),)"],
     "error: optim.options: seed must be an integer in [0, 4294967295], got -1"),
    ("preset_syntax_error", ["--config", "{tmp}/syntax.py"],
     "error: --config file {tmp}/syntax.py:1: failed to import: SyntaxError: invalid syntax (syntax.py, line 1)"),
    ("preset_get_config_raises", ["--config", "{tmp}/raises.py"],
     "error: --config file {tmp}/raises.py:2: get_config() raised: RuntimeError: boom"),
]


def cli(arguments: list[str], workdir: pathlib.Path) -> int:
    """`main` with --config llama_tiny unless the arguments name their own, and a tiny run's switches."""
    config = [] if "--config" in arguments else ["--config", "llama_tiny"]
    return main([*config, "--workdir", str(workdir), *arguments])


def one_line(capsys) -> str:
    """The one line the CLI printed on stderr (it fails unless there is exactly one)."""
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("arguments", "expected"), [case[1:] for case in BAD_CONFIGS],
                         ids=[case[0] for case in BAD_CONFIGS])
def test_bad_config_is_one_line_before_training(arguments, expected, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    (tmp_path / "syntax.py").write_text("def get_config(:\n")
    (tmp_path / "raises.py").write_text("def get_config():\n    raise RuntimeError('boom')\n")
    arguments = [argument.replace("{tmp}", str(tmp_path)) for argument in arguments]
    assert cli(arguments, tmp_path / "run") == 2
    assert one_line(capsys) == expected.replace("{tmp}", str(tmp_path))
    assert not (tmp_path / "run").exists()  # refused before train() claimed the workdir


def test_model_too_large_for_memory(tmp_path, capsys):
    # The available memory is this machine's; the estimate is float32 parameters plus AdamW's two moments
    # (12 bytes a parameter), once per local CPU device (they share the host's memory).
    assert cli(["model.vocab_size=99999999999"], tmp_path / "run") == 2
    line = one_line(capsys)
    estimate = 6_400_000_098_560 * 12 * jax.local_device_count() / 2**30
    assert line.startswith("error: the model does not fit: its 6,400,000,098,560 parameters and their optimizer "
                           f"state need about {estimate:,.1f} GiB, more than the ")
    assert line.endswith("; lower model.vocab_size, model.d_model or model.num_layers, or shard it with mesh_fsdp")
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> list[str]:
    """A 1-layer llama_tiny on a prepared tiny MQAR: overrides for a 4-step run."""
    root = tmp_path_factory.mktemp("one_line_data")
    data_lib.prepare(DataConfig(name="mqar", data_dir=str(root), mqar_num_keys=16, mqar_num_values=16,
                                mqar_num_pairs=4, mqar_train_examples=64, mqar_eval_examples=16))
    return [*MQAR, f"data.data_dir={root}", "model.vocab_size=64", "model.num_layers=1", "seq_len=32",
            "batch_size=8", "num_steps=4", "log_every=1", "eval_batches=1", "tensorboard=false",
            "progress_bar=false", "sample_length=0"]


@pytest.mark.parametrize(("checkpoint_every", "saved"), [(0, "checkpoints are off (checkpoint_every=0)"),
                                                        (2, "no checkpoint of this run was saved")])
def test_non_finite_parameters_exit_2(checkpoint_every, saved, tiny_run, tmp_path, capsys):
    workdir = tmp_path / "run"
    assert cli([*tiny_run, "optim.learning_rate=1e30", "optim.grad_clip_norm=0", "optim.warmup_steps=0",
                f"checkpoint_every={checkpoint_every}"], workdir) == 2
    assert one_line(capsys) == (f"error: the parameters became non-finite at step 2; stopping without checkpointing "
                                f"this state ({saved}); lower optim.learning_rate, enable optim.grad_clip_norm, or "
                                "check the data for bad values")
    assert not (workdir / "summary.json").exists()
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=pytest.fail)  # strict JSON: no bare NaN


def test_full_disk_is_one_line(tiny_run, tmp_path, capsys, monkeypatch):
    workdir = tmp_path / "run"
    save = Checkpointer.save

    def save_until_full(self, step, *args, **kwargs):
        if step > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.directory))
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(Checkpointer, "save", save_until_full)
    assert cli([*tiny_run, "checkpoint_every=2"], workdir) == 2
    assert one_line(capsys) == (f"error: cannot write checkpoint step 4 to {workdir / 'checkpoints'}: No space left "
                                "on device; stopping (last good checkpoint: step 2); free space there and run again "
                                "to resume from it")
    assert sorted(path.name for path in (workdir / "checkpoints").iterdir() if path.name.isdigit()) == ["2"]


def test_undecodable_metrics_line_is_skipped_with_one_line_warning(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "train/loss": 2.0}\n\xff\xfe not utf-8\n{"step": 2, "train/loss": "NaN"}\n')
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    configure_logs()  # what the CLI does: warnings print as one line
    with pytest.warns(UserWarning) as caught:
        records = read_metrics(path)
    assert [record["step"] for record in records] == [1, 2]
    [warning] = caught
    shown = warnings.formatwarning(warning.message, warning.category, warning.filename, warning.lineno, None)
    assert shown == f"warning: {path}:2: skipping a line that is not UTF-8\n"
    # A resume first drops the rows after the restored step: the undecodable line goes, the others stay.
    assert drop_records_after(path, 2) == 1
    assert path.read_bytes() == b'{"step": 1, "train/loss": 2.0}\n{"step": 2, "train/loss": "NaN"}\n'
