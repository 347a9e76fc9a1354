"""`zoo_pystdlib`: the `.py` sources of the running interpreter's standard library, as a TFDS dataset.

The default training corpus needs nothing downloaded: every machine that runs the zoo has a Python
standard library, and it is real, varied text (code, docstrings, comments, test data).

Contents: every `*.py` file under `sysconfig.get_paths()["stdlib"]`, except anything inside
`site-packages`, `dist-packages` or `__pycache__`, in sorted relative-path (POSIX) order. One example
per file: {"path": relative path (bytes), "text": the file's raw bytes (not decoded, so the few
deliberately non-UTF-8 test files are kept exactly)}.

Splits are by file, so no file is in both: a file goes to "validation" when the first 8 bytes of
SHA-256(relative path), as an integer, mod 1000 are below 30 (~3% of files; stable across machines and
runs), else to "train".

Size, measured for CPython 3.11.7 (Linux): 1790 files, 31.5 MB in total (train 1725 files / 30.3 MB,
validation 65 files / 1.2 MB); the largest file is pydoc_data/topics.py (0.76 MB); 28 files are empty.
Building it takes ~1.5 s on one core; reading the whole train split back ~0.1 s.

Different Pythons have different standard libraries, so the builder config name carries the version
(e.g. "py3_11_7") and corpora from different interpreters never collide on disk. Files are written in
TFDS's array_record format; neither writing nor reading needs TensorFlow.
"""

from __future__ import annotations

import hashlib
import pathlib
import sys
import sysconfig

import tensorflow_datasets as tfds

from icml26zoo.train.data.generated import Examples, GeneratedBuilder

EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
VALIDATION_PER_MILLE = 30


def stdlib_root() -> pathlib.Path:
    """The standard library directory of the running interpreter."""
    return pathlib.Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: pathlib.Path | None = None) -> list[str]:
    """Relative POSIX paths of the corpus files under `root` (default: this interpreter's), sorted."""
    root = stdlib_root() if root is None else pathlib.Path(root)
    if not root.is_dir():
        raise ValueError(f"stdlib root {str(root)!r} is not a directory")
    paths = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if EXCLUDED_DIRS.isdisjoint(relative.parts) and path.is_file():
            paths.append(relative.as_posix())
    paths.sort()
    return paths


def is_validation(relative_path: str) -> bool:
    """Whether the file at `relative_path` belongs to the validation split (stable hash, ~3%)."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % 1000 < VALIDATION_PER_MILLE


def split_files(paths: list[str]) -> dict[str, list[str]]:
    """Splits sorted `paths` into {"train": [...], "validation": [...]}, each keeping the sorted order."""
    return {
        "train": [p for p in paths if not is_validation(p)],
        "validation": [p for p in paths if is_validation(p)],
    }


def config_name() -> str:
    """Builder config name for the running interpreter, e.g. "py3_11_7"."""
    major, minor, micro = sys.version_info[:3]
    return f"py{major}_{minor}_{micro}"


class ZooPystdlib(GeneratedBuilder):
    """Python standard library `.py` files, one example per file, split by a stable hash of the path."""

    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=config_name(), description="This interpreter's stdlib.")]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        return {"path": tfds.features.Text(), "text": tfds.features.Text()}

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Examples]:
        del dl_manager  # Nothing to download.
        root = stdlib_root()
        splits = split_files(stdlib_files(root))
        return {name: self._generate_examples(root, paths) for name, paths in splits.items()}

    def _generate_examples(self, root: pathlib.Path, paths: list[str]) -> Examples:
        for index, path in enumerate(paths):
            # Keys are zero-padded indices, so key order is the sorted path order.
            yield f"{index:06d}", {"path": path, "text": (root / path).read_bytes()}


def make_builder(data_dir: str) -> ZooPystdlib:
    """The builder for this interpreter's corpus under `data_dir` (prepared or not)."""
    return ZooPystdlib(data_dir=data_dir, config=config_name(), file_format="array_record")
