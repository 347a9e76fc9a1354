"""The zoo installs one import namespace, `icml26zoo`, and a user's own `train.py` / `kernels.py` cannot shadow it."""

import importlib
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
GENERIC = ("zoo", "kernels", "train", "configs", "repro")


@pytest.mark.parametrize("name", GENERIC)
def test_no_generic_top_level_name_is_installed(name, tmp_path, monkeypatch):
    # Run from an empty folder so the repository's own top-level folders are not on the path.
    monkeypatch.chdir(tmp_path)
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is not None)"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, f"a top-level package {name!r} is installed: {result.stderr}"


def test_namespace_maps_the_repository_folders():
    for module, folder in (("icml26zoo", "zoo"), ("icml26zoo.kernels", "kernels"), ("icml26zoo.train", "train"),
                           ("icml26zoo.configs", "configs"), ("icml26zoo.repro", "repro")):
        path = pathlib.Path(importlib.import_module(module).__file__).resolve()
        assert path == REPO / folder / "__init__.py"


def test_local_train_and_kernels_files_do_not_shadow_the_zoo(tmp_path):
    (tmp_path / "train.py").write_text("raise SystemExit('the user script ran')\n")
    (tmp_path / "kernels.py").write_text("raise SystemExit('the user module was imported')\n")
    result = subprocess.run([sys.executable, "-m", "icml26zoo.train", "--help"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0 and "python -m icml26zoo.train" in result.stdout, result.stderr
    code = "from icml26zoo.kernels import gated_delta_rule; import icml26zoo.train.loop"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
