"""The shared training loop: config, data, step, checkpoints, metrics, eval, CLI.

`load_run(workdir, step=None) -> (config, model, state)` reopens a run, finished or still training (see `train.runs`).
"""

import sys as _sys

from icml26zoo.extras import MissingExtraError as _MissingExtraError
from icml26zoo.extras import require_extras as _require_extras

# Checked up front so that a core-only install (`pip install icml26-zoo`) fails here with the fix, not deep
# inside a run (find_spec locates the packages without importing them).
try:
    _require_extras("train", what="icml26zoo.train")
except _MissingExtraError as _error:
    # argv[0] is "-m" only while `python -m icml26zoo.train` locates its module: the command line's user gets
    # its one-line error and exit 2; an import from Python code keeps the ImportError.
    if _sys.argv[:1] == ["-m"]:
        print(f"error: {_error}", file=_sys.stderr)
        raise SystemExit(2) from None
    raise


def __getattr__(name: str) -> object:
    # load_run pulls in Orbax and the loop; importing it lazily keeps `import icml26zoo.train` light.
    if name == "load_run":
        from icml26zoo.train.runs import load_run

        return load_run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["load_run"]
