"""The shared training loop: config, data, step, checkpoints, metrics, eval, CLI.

`load_run(workdir, step=None) -> (config, model, state)` reopens a finished run (see `train.runs`).
"""

import importlib.util as _importlib_util

# Checked up front so that a core-only install (`pip install icml26-zoo`) fails here with the fix, not deep
# inside a run. find_spec locates a top-level package without importing it, so the check costs no import time.
_TRAIN_PACKAGES = ("orbax", "grain", "tensorflow_datasets", "array_record", "tensorboardX", "tqdm", "matplotlib")


def _missing_train_packages() -> list[str]:
    missing = []
    for package in _TRAIN_PACKAGES:
        try:
            found = _importlib_util.find_spec(package) is not None
        except ImportError:
            found = False
        if not found:
            missing.append(package)
    return missing


if _missing := _missing_train_packages():
    raise ImportError(
        f"icml26zoo.train needs the [train] extra; missing: {', '.join(_missing)}. "
        'Install it with: pip install "icml26-zoo[train]"'
    )


def __getattr__(name: str) -> object:
    # load_run pulls in Orbax and the loop; importing it lazily keeps `import icml26zoo.train` light.
    if name == "load_run":
        from icml26zoo.train.runs import load_run

        return load_run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["load_run"]
