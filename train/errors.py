"""The errors a user can cause, which the CLI reports as one line with exit code 2 (`--debug` for the traceback).

Raise `RunError` (or a subclass) for anything the user can fix: a bad config value or name, a workdir that
is locked, empty or unwritable, a dataset that is not prepared, a run that diverged. Bugs stay ordinary
exceptions with a traceback. `RunError` is a `ValueError`, so library callers that catch `ValueError`
for bad arguments keep working.
"""

from __future__ import annotations


class RunError(ValueError):
    """A user error of a training run: the message names the field or the cause and what would fix it."""


class WorkdirError(RunError):
    """The workdir cannot be used: empty path, unwritable, locked by another live run, or holding a run that this
    start would overwrite (see `train.resume`)."""


class ConfigChangeError(RunError):
    """A resume with a config that differs from the run's config.json in a field that changes what the run trains
    (see `train.resume`); the message names each field with its old and new value."""


class CheckpointError(RunError):
    """No restorable checkpoint where one was asked for (e.g. `load_run` on a workdir without one)."""
