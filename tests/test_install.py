"""The built wheel installs next to PyPI's `kernels` (Hugging Face) and `train` packages and imports whole.

A fresh venv gets three wheels, with no dependencies: the zoo's, and those of the two PyPI projects whose
names the zoo's folders share. The suite's own site-packages are appended after the venv's, so the
dependencies are importable without a second install. The user's working folder holds a `train.py` and a
`kernels.py` that abort if imported.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import venv

import pytest

# `make test` runs pytest-xdist with `--dist loadscope`: one worker runs this whole module, so the wheel, the venv
# and the pytest-cache downloads are built once.

REPO = pathlib.Path(__file__).resolve().parents[1]
SOURCES = ("zoo", "kernels", "train", "configs", "repro", "setup.py", "pyproject.toml", "README.md")
NAMESAKES = ("kernels", "train")
# Markers of pip failing to reach the index, as opposed to the index refusing the request.
NO_NETWORK_MARKERS = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name",
                      "Network is unreachable", "ConnectTimeoutError", "Max retries exceeded", "ProxyError")

IMPORT_EVERYTHING = """
import importlib
import importlib.metadata
import json
import pkgutil

import icml26zoo

modules = [info.name for info in pkgutil.walk_packages(icml26zoo.__path__, "icml26zoo.")]
for name in modules:
    importlib.import_module(name)
files = importlib.metadata.distribution("icml26-zoo").files
print(json.dumps({"file": icml26zoo.__file__, "modules": modules,
                  "top_level": sorted({f.parts[0] for f in files if not f.parts[0].endswith(".dist-info")})}))
"""

LOCATE_NAMESAKES = """
import importlib.util
import json

print(json.dumps({name: importlib.util.find_spec(name).origin for name in ("kernels", "train")}))
"""


def pip(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def site_packages_of(python: pathlib.Path) -> pathlib.Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return pathlib.Path(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                       check=True).stdout.strip())


@pytest.fixture(scope="session")
def zoo_wheel(tmp_path_factory) -> pathlib.Path:
    """The zoo's wheel, built once per session from a copy of the sources (no build/ left in the repository)."""
    source = tmp_path_factory.mktemp("zoo_source")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("zoo_wheel")
    result = pip("wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out), str(source))
    assert result.returncode == 0, result.stderr
    return next(out.glob("icml26_zoo-*.whl"))


@pytest.fixture(scope="session")
def namesake_wheels(request) -> list[pathlib.Path]:
    """Wheels of PyPI's `kernels` and `train`, downloaded once into the pytest cache (reruns need no network)."""
    cache = pathlib.Path(request.config.cache.mkdir("pypi_namesakes"))
    wheels = [next(cache.glob(f"{name}-*.whl"), None) for name in NAMESAKES]
    if all(wheels):
        return wheels
    downloads = cache / "downloads"
    result = pip("download", "--no-deps", "--retries", "1", "--timeout", "20", "-d", str(downloads), *NAMESAKES)
    if result.returncode != 0:
        if any(marker in result.stderr for marker in NO_NETWORK_MARKERS):
            pytest.skip(f"cannot download PyPI's {' and '.join(NAMESAKES)} (no network): "
                        f"{result.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"pip download {' '.join(NAMESAKES)} failed: {result.stderr}")
    # `train` ships only a source archive: build its wheel once, here, without network.
    for archive in downloads.iterdir():
        built = pip("wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(cache), str(archive))
        assert built.returncode == 0, built.stderr
    return [next(cache.glob(f"{name}-*.whl")) for name in NAMESAKES]


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory, zoo_wheel, namesake_wheels) -> pathlib.Path:
    """A venv holding only the three wheels; the suite's site-packages come after its own on sys.path."""
    root = tmp_path_factory.mktemp("fresh_venv")
    venv.create(root, with_pip=False)
    python = root / "bin" / "python"
    wheels = [str(zoo_wheel), *map(str, namesake_wheels)]
    result = pip("--python", str(python), "install", "--no-deps", "--no-index", "--quiet", *wheels)
    assert result.returncode == 0, result.stderr
    # A .pth file's lines are appended to sys.path after the folder holding it, so the venv's own packages win.
    suite_site_packages = [path for path in sys.path if path.endswith(("site-packages", "dist-packages"))]
    (site_packages_of(python) / "zz_suite_dependencies.pth").write_text("\n".join(suite_site_packages) + "\n")
    return root


@pytest.fixture
def user_folder(tmp_path) -> pathlib.Path:
    """A working folder whose own train.py and kernels.py abort if anything imports them."""
    (tmp_path / "train.py").write_text("raise SystemExit('the user train.py was imported')\n")
    (tmp_path / "kernels.py").write_text("raise SystemExit('the user kernels.py was imported')\n")
    return tmp_path


def run_in(venv_root: pathlib.Path, args: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    # No PYTHONPATH: the repository must not be importable, only the installed wheel.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([str(venv_root / "bin" / "python"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_every_zoo_module_imports_from_the_wheel_beside_user_files(fresh_venv, user_folder):
    result = run_in(fresh_venv, ["-c", IMPORT_EVERYTHING], user_folder)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert pathlib.Path(report["file"]).resolve().is_relative_to(fresh_venv.resolve())
    assert report["top_level"] == ["icml26zoo"]
    for name in ("icml26zoo.kernels", "icml26zoo.train", "icml26zoo.configs", "icml26zoo.mixers",
                 "icml26zoo.train.__main__", "icml26zoo.repro", "icml26zoo.repro.__main__"):
        assert name in report["modules"]


def test_pypi_kernels_and_train_stay_pypi_s(fresh_venv, tmp_path):
    result = run_in(fresh_venv, ["-c", LOCATE_NAMESAKES], tmp_path)
    assert result.returncode == 0, result.stderr
    site_packages = site_packages_of(fresh_venv / "bin" / "python").resolve()
    for name, origin in json.loads(result.stdout).items():
        assert pathlib.Path(origin).resolve() == site_packages / name / "__init__.py", origin


def test_the_cli_runs_from_the_wheel_beside_user_files(fresh_venv, user_folder):
    result = run_in(fresh_venv, ["-m", "icml26zoo.train", "--help"], user_folder)
    assert result.returncode == 0, result.stderr
    assert "python -m icml26zoo.train" in result.stdout


def test_the_experiments_run_from_the_wheel_beside_user_files(fresh_venv, user_folder):
    listing = run_in(fresh_venv, ["-m", "icml26zoo.repro", "--list"], user_folder)
    assert listing.returncode == 0, listing.stderr
    assert {"fox_fix", "leaderboard", "talda"} <= {line.split()[0] for line in listing.stdout.splitlines()}
    out = user_folder / "runs" / "talda"
    result = run_in(fresh_venv, ["-m", "icml26zoo.repro", "talda", "--smoke", "--out", str(out)], user_folder)
    assert result.returncode == 0, result.stderr
    assert {"results.md", "results.json"} <= {p.name for p in out.iterdir()}
    assert any(p.suffix == ".png" for p in out.iterdir())
    unknown = run_in(fresh_venv, ["-m", "icml26zoo.repro", "tlada"], user_folder)
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: unknown experiment 'tlada' (did you mean")


def test_the_extras_map_and_repository_follow_pyproject():
    """zoo.extras (what the one-line missing-extra errors name) agrees with pyproject.toml: every field extra and
    [train] is there, and the pip command names the Repository URL (the zoo is on no package index)."""
    import tomllib

    from icml26zoo.extras import EXTRAS, REPOSITORY, install_command

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert set(EXTRAS) == set(project["optional-dependencies"]) - {"test"}
    assert REPOSITORY == project["urls"]["Repository"]
    assert install_command(["rl"]) == f'pip install "icml26-zoo[rl] @ git+{REPOSITORY}"'
