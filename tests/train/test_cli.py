"""The command line reports bad configs with the field name and a non-zero exit code."""

import pathlib

from icml26zoo.train.__main__ import main

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_bad_override_exits_2_and_names_the_field(tmp_path, capsys):
    code = main(["--config", str(ROOT / "configs/llama_tiny.py"), "--workdir", str(tmp_path), "model.num_heads=3"])
    assert code == 2
    assert "num_heads must be a multiple of num_kv_heads" in capsys.readouterr().err


def test_missing_preset_exits_2(tmp_path, capsys):
    code = main(["--config", str(tmp_path / "missing.py"), "--workdir", str(tmp_path)])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err
