"""The command line reports every user error as one line `error: ...` naming the field or the cause, with
exit code 2 and no traceback (`--debug` shows it); a preset is given by name or by file."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from icml26zoo.configs import names as preset_names
from icml26zoo.registry import MODELS, OBJECTIVES
from icml26zoo.train import data as data_lib
from icml26zoo.train.__main__ import main
from icml26zoo.train.config import DataConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
# XLA's cheap pipeline: the one case that trains (divergence) only checks where the loss became non-finite.
pytestmark = pytest.mark.usefixtures("fast_compile")
MQAR = ["data.name=mqar", "data.mqar_num_keys=16", "data.mqar_num_values=16", "data.mqar_num_pairs=4",
        "data.mqar_train_examples=64", "data.mqar_eval_examples=16"]
# A tiny run on MQAR: the cases that fail inside train() get this far.
TINY_RUN = [*MQAR, "data.data_dir={data}", "model.vocab_size=64", "model.num_layers=1", "seq_len=32", "batch_size=8",
            "num_steps=3", "log_every=1", "checkpoint_every=0", "tensorboard=false", "progress_bar=false",
            "sample_length=0"]

# (case, arguments after --workdir, text the one line must contain). "{data}" is a prepared data_dir,
# "{tmp}" the test's own temporary directory; the workdir is {tmp}/run unless the case passes its own.
BAD_INPUTS = [
    ("unknown_preset", ["--config", "lama_tiny"],
     "--config 'lama_tiny' is not a preset name or a file (did you mean 'llama_tiny'?); presets: "
     + ", ".join(preset_names()[:3]) + ","),
    ("missing_file", ["--config", "{tmp}/missing.py"], "--config file '{tmp}/missing.py' does not exist"),
    ("bad_value", ["model.num_heads=3"], "num_heads must be a multiple of num_kv_heads"),
    ("bad_type", ["model.num_layers=two"], "config field 'model.num_layers' expects int, got 'two'"),
    ("unknown_field", ["model.depth=2"], "unknown config field 'model.depth'"),
    ("not_key_value", ["depth"], "override must look like key=value, got 'depth'"),
    ("unknown_model", ["model.name=gpt"],
     f"model.name must be one of {MODELS.names()}, got 'gpt'"),
    ("unknown_mixer", ["model.mixer=foxx"], "model.mixer must be one of ['attention', 'circulation',"),
    ("unknown_mixer_option", ["model.mixer_options=(('gate', 'full'),)"],
     "model.mixer_options: unknown attention mixer option 'gate'; valid options: ['fp8_headroom', 'fp8_logits', "
     "'fp8_scale', 'output_gate', 'pbs_block', 'pbs_max_blocks', 'pbs_segment', 'pbs_tau', 'position', 'prefill', "
     "'qk_norm', 'sink']"),
    ("unknown_optimizer", ["optim.name=adamx"], "optim.name must be one of ['adam', 'adamw',"),
    ("unknown_optimizer_option", ["optim.options=(('rho', 0.1),)"],
     "optim.options: unknown adamw optimizer option 'rho'; valid options: []"),
    ("unknown_objective", ["objective=ranking"], "objective must be one of " + str(OBJECTIVES.names()[:2])[:-1] + ", "),
    # Prefixes only where the list grows with every registered part (a new dataset must not edit this test).
    ("unknown_dataset", ["data.name=imagenet"], "data.name must be one of ['bfvp', 'digits', 'dyck',"),
    ("infinite_learning_rate", ["optim.learning_rate=inf"], "'optim.learning_rate' expects a finite float, got 'inf'"),
    ("nan_learning_rate", ["optim.learning_rate=nan"], "'optim.learning_rate' expects a finite float, got 'nan'"),
    ("vocab_too_small", [*MQAR, "model.vocab_size=16"],
     "model.vocab_size must be at least the dataset's vocabulary (33) for data.name='mqar', got 16"),
    ("mesh_does_not_fit", ["mesh_fsdp=3"], "mesh_fsdp must be a positive divisor of the device count 8, got 3"),
    ("batch_does_not_fit", ["batch_size=12"], "batch_size must be a multiple of the device count 8, got 12"),
    ("coordinator_without_processes", ["--coordinator", "localhost:1"],
     "coordinator='localhost:1' needs num_processes and process_id"),
    ("tfds_not_prepared", [*TINY_RUN, "data.name=tfds:no_such_text", "model.vocab_size=256"],
     "data.name 'tfds:no_such_text': TFDS dataset 'no_such_text' is not prepared under data_dir '{data}'; "
     "prepare it there first (e.g. `tfds build no_such_text --data_dir {data}`)"),
    ("tfds_foreign_feature_class", [*TINY_RUN, "data.name=tfds:doctored_text", "model.vocab_size=256"],
     "names feature class 'os.path.Feature'; only classes of tensorflow_datasets.core.features are accepted"),
    ("unwritable_workdir", ["--workdir", "{tmp}/a_file/run", *TINY_RUN], "workdir '{tmp}/a_file/run'"),
    ("divergence", [*TINY_RUN, "optim.learning_rate=1e30", "optim.grad_clip_norm=0", "optim.warmup_steps=0",
                    "num_steps=6"], "became non-finite at step"),
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> str:
    """A data_dir with the tiny MQAR prepared and a TFDS folder whose features.json names a foreign class."""
    root = tmp_path_factory.mktemp("cli_data")
    data_lib.prepare(DataConfig(name="mqar", data_dir=str(root), mqar_num_keys=16, mqar_num_values=16,
                                mqar_num_pairs=4, mqar_train_examples=64, mqar_eval_examples=16))
    write_doctored_dataset(root / "doctored_text" / "1.0.0")
    return str(root)


def write_doctored_dataset(folder: pathlib.Path) -> None:
    """The metadata files TFDS writes for a one-feature text dataset, its feature class replaced."""
    folder.mkdir(parents=True)
    features = {"pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
                "featuresDict": {"features": {"text": {"pythonClassName": "os.path.Feature", "text": {}}}}}
    (folder / "features.json").write_text(json.dumps(features))
    (folder / "dataset_info.json").write_text(json.dumps({"name": "doctored_text", "version": "1.0.0"}))


def fill(value: str, tmp_path: pathlib.Path, data_dir: str) -> str:
    return value.replace("{tmp}", str(tmp_path)).replace("{data}", data_dir)


@pytest.mark.parametrize("case, args, expected", BAD_INPUTS, ids=[case for case, _, _ in BAD_INPUTS])
def test_user_errors_print_one_line_and_exit_2(case, args, expected, tmp_path, data_dir, capsys):
    (tmp_path / "a_file").write_text("not a directory")
    args = [fill(arg, tmp_path, data_dir) for arg in args]
    config = [] if "--config" in args else ["--config", "llama_tiny"]
    workdir = [] if "--workdir" in args else ["--workdir", str(tmp_path / "run")]
    code = main(config + workdir + args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.splitlines() == [err.strip()], err
    assert err.startswith("error: ") and "Traceback" not in err
    assert fill(expected, tmp_path, data_dir) in err


def test_a_preset_by_name_equals_its_file(capsys):
    from icml26zoo.configs import load_preset, names

    assert {"default", "llama_tiny", "classify_tiny"} <= set(names())
    assert load_preset("llama_tiny") == load_preset(ROOT / "configs" / "llama_tiny.py")


def run_cli(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "icml26zoo.train", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_installed_command_prints_one_line_and_debug_the_traceback(tmp_path):
    plain = run_cli("--config", "nonexistent", "--workdir", "x", cwd=tmp_path)
    assert plain.returncode == 2
    assert plain.stderr.strip().splitlines()[-1].startswith("error: --config 'nonexistent' is not a preset name")
    assert [line for line in plain.stderr.splitlines() if line.startswith("error:")] == [plain.stderr.strip()]
    debug = run_cli("--config", "nonexistent", "--workdir", "x", "--debug", cwd=tmp_path)
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr and "RunError: --config 'nonexistent'" in debug.stderr
    assert not (tmp_path / "x").exists()


def test_distributed_without_a_coordinator_is_one_line(tmp_path):
    # A fresh process: jax.distributed must be initialized before the backend starts, which pytest's has.
    result = run_cli("--config", "llama_tiny", "--workdir", str(tmp_path / "run"), "distributed=true", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().startswith("error: distributed=true but no coordinator was given"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
