"""With only the core dependencies (jax, flax, optax, numpy) the kernels, modules and optimizers import and run.

Each check runs in a fresh interpreter whose import system refuses the [train] extra's packages (and the
heavy packages they bring) and the other extras' field libraries, as a core-only install
(`pip install icml26-zoo`) would.
"""

import json
import os
import subprocess
import sys

import pytest

from icml26zoo.extras import REPOSITORY

TRAIN_ONLY = ("orbax", "grain", "tensorflow_datasets", "tensorflow", "array_record", "tensorboardX", "tqdm",
              "matplotlib", "pyarrow")
# The field libraries of the other extras ([rl], [flows], [privacy], [sklearn]): modules under zoo/ import them
# only when called, so a core install imports every module.
FIELD_EXTRAS = ("gymnax", "diffrax", "equinox", "dp_accounting", "sklearn", "ott", "rdkit")
REFUSED = TRAIN_ONLY + FIELD_EXTRAS

BLOCK_TRAIN_ONLY = f"""
import sys

class RefuseTrainOnlyPackages:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {REFUSED!r}:
            raise ImportError(f"No module named {{name!r}} (refused: not a core dependency)")
        return None

sys.meta_path.insert(0, RefuseTrainOnlyPackages())
"""

IMPORT_CORE_AND_RUN_A_MODEL = """
import importlib
import json
import pkgutil

import jax.numpy as jnp
from flax import nnx

# Walked root by root: in an editable install icml26zoo.kernels lives outside icml26zoo's folder. The train
# loop, the configs (which build TrainConfigs) and the reproductions (which train) are the [train] extra's part
# of the namespace.
modules = set()
for root in ("icml26zoo", "icml26zoo.kernels"):
    package = importlib.import_module(root)
    modules |= {root} | {info.name for info in pkgutil.walk_packages(package.__path__, root + ".")}
extra_only = ("icml26zoo.train", "icml26zoo.configs", "icml26zoo.repro")
modules = sorted(name for name in modules if not name.startswith(extra_only))
for name in modules:
    importlib.import_module(name)

from icml26zoo.models import ModelConfig, build_model

model = build_model(ModelConfig(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, max_seq_len=16),
                    rngs=nnx.Rngs(0))
logits = model(jnp.arange(8, dtype=jnp.int32)[None])
print(json.dumps({"modules": modules, "logits_shape": list(logits.shape),
                  "finite": bool(jnp.isfinite(logits).all())}))
"""


def run_without_train_packages(code: str, cwd) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter (from cwd, outside the repository) that cannot import the REFUSED packages."""
    program = BLOCK_TRAIN_ONLY + code
    return subprocess.run([sys.executable, "-c", program], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_core_modules_import_and_a_tiny_model_runs_without_the_train_extra(tmp_path):
    result = run_without_train_packages(IMPORT_CORE_AND_RUN_A_MODEL, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for name in ("icml26zoo.kernels", "icml26zoo.models", "icml26zoo.optim", "icml26zoo.functional",
                 "icml26zoo.mixers", "icml26zoo.mixers.attention", "icml26zoo.mixers.mamba2"):
        assert name in report["modules"]
    assert report["logits_shape"] == [1, 8, 256]
    assert report["finite"]


def test_importing_train_without_the_extra_names_the_extra(tmp_path):
    result = run_without_train_packages("import icml26zoo.train\n", tmp_path)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    # MissingExtraError is an ImportError: code that catches ImportError to fall back still does.
    assert last_line.startswith("icml26zoo.extras.MissingExtraError: icml26zoo.train needs the [train] extra"), (
        result.stderr)
    assert 'pip install "icml26-zoo[train] @ git+https://github.com/' in last_line


def run_command_refusing(refused: tuple[str, ...], argv: list[str], cwd) -> subprocess.CompletedProcess:
    """`python -m <argv>` as a user runs it, from cwd, in an interpreter that cannot import `refused` (a
    sitecustomize installs the refusal before anything else runs)."""
    site = cwd / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCK_TRAIN_ONLY.replace(repr(REFUSED), repr(refused)))
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize(("refused", "argv", "message"), [
    (TRAIN_ONLY, ["icml26zoo.train", "--config", "llama_tiny", "--workdir", "run"],
     'error: icml26zoo.train needs the [train] extra (missing: array_record, grain, matplotlib, orbax, '
     'tensorboardX, tensorflow_datasets, tqdm); install it with: pip install "icml26-zoo[train] @ git+'
     f'{REPOSITORY}"'),
    (TRAIN_ONLY, ["icml26zoo.repro", "--list"],
     "error: python -m icml26zoo.repro needs the [train] extra (missing: array_record, grain, matplotlib, "
     'orbax, tensorboardX, tensorflow_datasets, tqdm); install it with: pip install "icml26-zoo[train] @ git+'
     f'{REPOSITORY}"'),
    (("sklearn",), ["icml26zoo.train", "--config", "nc_digits", "--workdir", "run"],
     'error: --config nc_digits needs the [sklearn] extra (missing: sklearn); install it with: '
     'pip install "icml26-zoo[sklearn] @ git+' f'{REPOSITORY}"'),
], ids=["train-cli", "repro-cli", "preset-extra"])
def test_a_command_missing_an_extra_prints_one_line_and_builds_nothing(tmp_path, refused, argv, message):
    result = run_command_refusing(refused, argv, tmp_path)
    assert (result.returncode, result.stderr.strip()) == (2, message), result.stderr
    assert not (tmp_path / "run").exists()
