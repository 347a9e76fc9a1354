"""Checkpoints for the train loop: a small, defensive wrapper around Orbax's `CheckpointManager`.

One step directory holds three items:

* ``state`` -- the training pytree (params, optimizer state, step counter, RNG key data), written with
  ``StandardSave`` so that sharded arrays are saved by every process for its own shards;
* ``data`` -- a JSON document ``{"data_state": <dict or null>}`` with the data iterator's state, so a
  resumed run continues the same batch sequence;
* ``checksums`` -- a CRC-32 of every leaf, computed on the host from the arrays being saved (see
  `checksums.py` for why, and for what a multi-process run covers).

Three project rules are enforced here rather than left to each caller:

* training never writes a checkpoint of a non-finite state (`NonFiniteStateError`, nothing written);
* a corrupt or half-written newest checkpoint must not end a run: `Checkpointer.restore_latest` falls
  back to the newest step that still reads *and* matches its checksums *and* whose data state passes the
  caller's check, warning once (one line) about every step it skips;
* exactly `keep` steps remain: the manager is never re-listed while its own saves or deletions are in
  flight (a re-list mid-save made Orbax lose count and keep one step too many, or fail on a step its
  background thread was deleting);
* readers never disturb the writer: ``Checkpointer(..., read_only=True)`` (what `load_run` opens) creates,
  cleans up and deletes nothing. It opens no `CheckpointManager` (whose start-up deletes every
  ``<step>.orbax-checkpoint-tmp*`` folder -- a live run's save in flight, which then died mid-commit) and
  reads committed step folders with a plain Orbax checkpointer; a step the live run prunes while it is
  being read sends the reader on to the run's newer steps instead of reporting it damaged.

All methods are collective in a multi-process run: call them from every process with the same arguments;
Orbax coordinates which process writes what.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from icml26zoo.train.checksums import leaf_checksums, quiet_closed_event_loop, verify_checksums
from icml26zoo.train.errors import CheckpointError
from icml26zoo.validation import check_bool, check_int

__all__ = ["Checkpointer", "CheckpointRestoreError", "NonFiniteStateError", "first_non_finite_leaf", "saved_steps",
           "steps_in_flight"]

_STATE_ITEM = "state"
_DATA_ITEM = "data"
_CHECKSUM_ITEM = "checksums"
_DATA_KEY = "data_state"
# Error texts from TensorStore can run to kilobytes; warnings and exceptions keep the first line, cut here.
_MAX_ERROR_CHARS = 300
# Orbax writes step N into `N.orbax-checkpoint-tmp*` and renames it to `N` on commit.
_IN_FLIGHT = re.compile(r"(\d+)\.orbax-checkpoint-tmp")
# How often a reader moves on to a live run's newer steps after the one it read was pruned under it; past
# this the run prunes faster than the reader reads (keep_checkpoints too small) and the failures are reported.
_MAX_CHASES = 8
# How often a listing is retried when a step vanishes between the directory read and its check.
_LISTING_TRIES = 5


class NonFiniteStateError(ValueError):
    """Raised by `Checkpointer.save` when a floating leaf of the state holds NaN or infinity."""


class CheckpointRestoreError(CheckpointError):
    """Raised by `Checkpointer.restore_latest` when checkpoints exist but none of them can be read.

    A `CheckpointError` (so a `RunError` and a `ValueError`): the CLI prints it in one line.
    """


class Checkpointer:
    """Saves and restores the training state and data-iterator state under one directory.

    Args:
      directory: where step directories (``<directory>/<step>/``) are written; created if missing.
      keep: how many of the newest checkpoints to keep; older ones are deleted after each save.
      async_save: write to disk in a background thread; `save` returns once arrays are copied off the
        devices. Call `wait` (or `close`) before reading the files or exiting.
      read_only: open for reading only (`keep` and `async_save` are ignored): nothing is created, cleaned
        up or deleted, so a live run may keep writing here; `save` and `prune` raise CheckpointError.
    """

    def __init__(self, directory: str | os.PathLike, *, keep: int = 3, async_save: bool = True,
                 read_only: bool = False):
        if not isinstance(directory, str | os.PathLike) or not os.fspath(directory):
            raise ValueError(f"directory must be a non-empty path, got {directory!r}")
        check_int("keep", keep)
        check_bool("async_save", async_save)
        self.read_only = check_bool("read_only", read_only)
        # Orbax wants an absolute path; resolving here also makes messages unambiguous.
        self.directory = os.path.abspath(os.fspath(directory))
        # Steps that failed to restore in `restore_latest`; a later save past them deletes them (see
        # `_drop_superseded`), because they would otherwise block saves at their step numbers.
        self._unreadable: set[int] = set()
        self._manager: ocp.CheckpointManager | None = None
        if read_only:
            # A plain checkpointer reads one committed step folder and touches nothing else.
            self._reader = ocp.Checkpointer(ocp.CompositeCheckpointHandler())
            return
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            enable_async_checkpointing=async_save,
            # Removes `<step>.orbax-checkpoint-tmp-*` leftovers of a save that a crash interrupted.
            cleanup_tmp_directories=True,
            create=True,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def save(self, step: int, state: Any, data_state: Mapping[str, Any] | None = None, *,
             force: bool = False) -> bool:
        """Saves `state` and `data_state` as checkpoint `step`; returns whether a save was started.

        Orbax skips (returns False) a step that is not newer than the newest one on disk. With
        ``force=True`` that skip is disabled, and saving an existing step raises Orbax's
        `StepAlreadyExistsError` (a ValueError).

        Raises:
          NonFiniteStateError: a floating leaf has NaN/inf; nothing is written.
          ValueError: bad `step`, an unsupported leaf in `state`, or `data_state` not JSON-serializable.
        """
        step = check_int("step", step, minimum=0)
        manager = self._writer("save")
        _check_state_leaves(state, "state")
        bad_path = first_non_finite_leaf(state)
        if bad_path is not None:
            raise NonFiniteStateError(
                f"refusing to checkpoint step {step}: state leaf {bad_path} is not finite (NaN or inf)"
            )
        payload = _data_payload(data_state)
        # Taken before the save is started: the caller may donate these buffers right after `save`.
        checksums = leaf_checksums(state)
        self._drop_superseded(step)
        args = ocp.args.Composite(**{
            _STATE_ITEM: ocp.args.StandardSave(state),
            _DATA_ITEM: ocp.args.JsonSave(payload),
            _CHECKSUM_ITEM: ocp.args.JsonSave(checksums),
        })
        return bool(manager.save(step, args=args, force=force))

    def _writer(self, action: str) -> ocp.CheckpointManager:
        """The manager that writes and deletes; CheckpointError for a read-only Checkpointer."""
        if self._manager is None:
            raise CheckpointError(f"cannot {action} in {self.directory}: it was opened read-only")
        return self._manager

    def _drop_superseded(self, step: int) -> None:
        """Deletes unreadable checkpoints at or after `step`: the run has moved past them.

        After a fallback from a corrupt step N to an older one, Orbax would still count N as the latest
        step and silently skip every save up to N. Deleting only steps that failed to restore in this
        session, and only when a new save replaces them, keeps the evidence until then.
        """
        stale = sorted(s for s in self._unreadable if s >= step)
        if not stale:
            return
        on_disk = set(self._reloaded_steps())
        for s in stale:
            if s in on_disk:
                self._manager.delete(s)
            self._unreadable.discard(s)

    def restore_latest(
        self, abstract_state: Any, *, check_data_state: Callable[[int, Any], None] | None = None
    ) -> tuple[int, Any, dict | None] | None:
        """Restores the newest readable checkpoint as ``(step, state, data_state)``; None if there is none.

        Args:
          abstract_state: a pytree with the structure of the saved state whose leaves are
            `jax.ShapeDtypeStruct` (with ``.sharding``) or arrays; restored arrays take these shapes,
            dtypes and shardings, so a checkpoint can be restored onto a different mesh.
          check_data_state: called as ``check_data_state(step, data_state)`` on each candidate; raising
            (e.g. ValueError for a state the data iterator's `set_state` would reject) marks that step
            corrupt like any other damage. None accepts any JSON value, null included.

        Unreadable steps (missing or truncated files, bad metadata, a different tree structure, a leaf
        whose checksum does not match, a data state `check_data_state` rejects) are skipped
        newest-first with a one-line `RuntimeWarning` naming the step and the error.

        Raises:
          CheckpointRestoreError: checkpoints exist but none could be restored; lists every error.
          ValueError: a leaf of `abstract_state` is neither a ShapeDtypeStruct nor an array.
        """
        abstract = _to_abstract(abstract_state)
        # A restore racing our own pending save could see a step that is still being written.
        self.wait()
        steps = sorted(self._reloaded_steps(), reverse=True)
        if not steps:
            return None
        # Installed before the first attempt: a failing restore's stray callbacks can fire while it unwinds.
        quiet_closed_event_loop()
        failures: list[tuple[int, str]] = []
        chases = 0
        while steps:
            step = steps.pop(0)
            try:
                state, data_state = self._restore_step(step, abstract)
                if check_data_state is not None:
                    check_data_state(step, data_state)
            except Exception as err:  # Any failure to read a step makes it unusable; report and go on.
                newer = self._moved_on(step, {s for s, _ in failures}) if chases < _MAX_CHASES else None
                if newer is not None:
                    chases += 1
                    steps = newer
                    continue
                failures.append((step, _describe(err)))
                warnings.warn(
                    f"checkpoint step {step} in {self.directory} is unreadable, skipping it: "
                    f"{_describe(err)}",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            self._unreadable.update(s for s, _ in failures)
            return step, state, data_state
        listing = "; ".join(f"step {s}: {e}" for s, e in failures)
        raise CheckpointRestoreError(f"no readable checkpoint in {self.directory} (tried {listing})")

    def _moved_on(self, step: int, failed: set[int]) -> list[int] | None:
        """For a reader: the steps to try instead of `step` (newest first) when a live run pruned `step` while
        it was read, or committed a newer one since; None when `step` is simply unreadable.

        A run deletes a step only after committing a newer one, so a failed read with a newer step on disk
        is no evidence of damage; warning about it would cry wolf on every pruned read.
        """
        if not self.read_only:
            return None
        fresh = self._reloaded_steps()
        if step in fresh and max(fresh) <= step:
            return None
        newer = sorted((s for s in fresh if s not in failed and s != step), reverse=True)
        return newer or None

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict | None]:
        """Restores checkpoint `step` exactly (no fallback) as ``(state, data_state)``, checksums verified.

        Raises CheckpointRestoreError naming the step when it is absent or cannot be read.
        """
        step = check_int("step", step, minimum=0)
        if step not in self._reloaded_steps():
            raise CheckpointRestoreError(f"no checkpoint at step {step} in {self.directory}")
        quiet_closed_event_loop()
        try:
            return self._restore_step(step, _to_abstract(abstract_state))
        except Exception as error:  # Orbax and TensorStore raise many types for damaged files.
            if step not in self._reloaded_steps():
                raise CheckpointRestoreError(f"checkpoint step {step} in {self.directory} was deleted while it was "
                                             "read (the run writing there keeps only its newest steps)") from None
            raise CheckpointRestoreError(f"checkpoint step {step} in {self.directory} cannot be read "
                                         f"({_describe(error)})") from None

    def _restore_step(self, step: int, abstract: Any) -> tuple[Any, dict | None]:
        """Reads one step; raises whatever Orbax/TensorStore raise when its files are damaged."""
        if not os.path.isdir(os.path.join(self.directory, str(step), _CHECKSUM_ITEM)):
            # Checked before Orbax is asked: it logs a full traceback for an item it cannot find.
            raise ValueError(f"the {_CHECKSUM_ITEM!r} item is missing (damaged, or saved by an older version)")
        args = ocp.args.Composite(**{
            _STATE_ITEM: ocp.args.StandardRestore(abstract),
            _DATA_ITEM: ocp.args.JsonRestore(),
            _CHECKSUM_ITEM: ocp.args.JsonRestore(),
        })
        if self._manager is None:
            restored = self._reader.restore(os.path.join(self.directory, str(step)), args=args)
        else:
            restored = self._manager.restore(step, args=args)
        payload = restored[_DATA_ITEM]
        if not isinstance(payload, dict) or _DATA_KEY not in payload:
            raise ValueError(f"data item is {payload!r}, expected a dict with key {_DATA_KEY!r}")
        verify_checksums(restored[_STATE_ITEM], restored[_CHECKSUM_ITEM])
        return restored[_STATE_ITEM], payload[_DATA_KEY]

    def saved_structure(self, step: int | None = None) -> Any:
        """The saved state's tree of `jax.ShapeDtypeStruct` (on the first local device), from step metadata.

        For inspecting or restoring a checkpoint without building the model that wrote it; the tree has
        the saved nesting (dicts and lists, not the original container classes). `step` defaults to the
        newest step. Raises CheckpointRestoreError when there is no such step or its metadata is unreadable.
        """
        self.wait()
        step = self.latest_step() if step is None else check_int("step", step, minimum=0)
        if step is None:
            raise CheckpointRestoreError(f"no checkpoint in {self.directory}")
        try:
            item_directory = ocp.path.step.build_step_path(self.directory, ocp.step.standard_name_format(), step)
            tree = ocp.StandardCheckpointHandler().metadata(item_directory / _STATE_ITEM).tree
        except Exception as err:  # Missing step or damaged metadata: either way there is nothing to describe.
            raise CheckpointRestoreError(f"step {step} in {self.directory} has no readable metadata: "
                                         f"{_describe(err)}") from None
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=device), tree)

    def prune(self, keep: int, *, protect: int | None = None) -> list[int]:
        """Deletes every step but the newest `keep` (and `protect`, the step a run restored); returns them.

        Orbax prunes only after a save, so a run killed between its final save and that pruning leaves one
        step too many that no later save would remove; a start calls this to keep `keep_checkpoints`.
        `protect` keeps a step that a fallback past corrupt newer steps restored.
        """
        check_int("keep", keep)
        manager = self._writer("prune")
        steps = sorted(self._reloaded_steps(), reverse=True)
        doomed = sorted(step for step in steps[keep:] if step != protect)
        for step in doomed:
            manager.delete(step)
        return doomed

    def latest_step(self) -> int | None:
        """Newest step on disk, or None. It may be unreadable; `restore_latest` falls back past it."""
        if self._manager is None:
            return max(saved_steps(self.directory), default=None)
        return self._manager.latest_step()

    def _reloaded_steps(self) -> list[int]:
        if self._manager is None:
            return saved_steps(self.directory)
        # Re-list the directory: another process or a crash may have changed it since the manager cached it.
        # Never while our own save or deletion is in flight: Orbax's background thread would race the re-list.
        self._manager.wait_until_finished()
        self._manager.reload()
        return list(self._manager.all_steps())

    def all_steps(self) -> list[int]:
        """All finalized steps on disk, ascending (in-progress temporary directories excluded)."""
        return sorted(self._reloaded_steps())

    def wait(self) -> None:
        """Blocks until every pending asynchronous save is on disk."""
        if self._manager is not None:
            self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases Orbax's threads."""
        if self._manager is None:
            self._reader.close()
            return
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def saved_steps(directory: str | os.PathLike) -> list[int]:
    """The finalized checkpoint steps under `directory`, ascending; [] when it does not exist.

    Read from the directory listing without opening a manager, so nothing is created or cleaned up: for
    deciding whether a workdir holds a run before anything is built, and for readers of a live run's
    checkpoints (a step folder appears only once its save is committed).
    """
    for _ in range(_LISTING_TRIES):
        if not os.path.isdir(directory):
            return []
        try:
            return sorted(ocp.utils.checkpoint_steps(directory))
        except FileNotFoundError:
            continue  # a live run deleted or committed a step between the listing and its check: list again
    return sorted(ocp.utils.checkpoint_steps(directory))


def steps_in_flight(directory: str | os.PathLike) -> list[int]:
    """Steps whose save has started and not been committed under `directory`, ascending ([] when none).

    Their temporary folders are a live run's saves in flight, or leftovers of a save that a crash cut
    short (the next start of the run removes those).
    """
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted({int(match.group(1)) for name in names if (match := _IN_FLIGHT.match(name))})


def _check_state_leaves(state: Any, name: str) -> None:
    """Raises ValueError for an empty tree or a leaf Orbax's StandardSave should not be given."""
    leaves = jax.tree_util.tree_leaves_with_path(state)
    if not leaves:
        raise ValueError(f"{name} has no array leaves")
    for path, leaf in leaves:
        if not isinstance(leaf, jax.Array | np.ndarray | np.generic | int | float):
            raise ValueError(
                f"{name} leaf {jax.tree_util.keystr(path)} has unsupported type {type(leaf).__name__}; "
                "expected jax/numpy arrays or Python numbers"
            )


def _is_inexact(leaf: Any) -> bool:
    """True for float/complex leaves; typed PRNG keys and integers are never 'non-finite'."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:
        return isinstance(leaf, float)
    return jax.dtypes.issubdtype(dtype, jnp.inexact)


def first_non_finite_leaf(state: Any) -> str | None:
    """Path (as `keystr`) of the first floating leaf holding NaN/inf, else None.

    Device arrays are reduced by one jitted program: one host sync for the whole tree, and, for global
    arrays spanning several processes, one collective program that every process runs in the same
    order (per-leaf eager reductions can interleave their collectives differently and deadlock).
    """
    paths, host_flags, device_paths, device_leaves = [], {}, [], []
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        if not _is_inexact(leaf):
            continue
        key = jax.tree_util.keystr(path)
        paths.append(key)
        if isinstance(leaf, float):
            host_flags[key] = math.isfinite(leaf)
        elif isinstance(leaf, jax.Array):
            device_paths.append(key)
            device_leaves.append(leaf)
        else:
            host_flags[key] = bool(np.isfinite(leaf).all())
    if device_leaves:
        flags = np.asarray(_finite_flags(device_leaves))
        host_flags.update(zip(device_paths, flags.tolist(), strict=True))
    for key in paths:
        if not host_flags[key]:
            return key
    return None


@jax.jit
def _finite_flags(leaves: list[jax.Array]) -> jax.Array:
    """[len(leaves)] bool: whether each array is entirely finite (a replicated result)."""
    return jnp.stack([jnp.isfinite(leaf).all() for leaf in leaves])


def _data_payload(data_state: Mapping[str, Any] | None) -> dict:
    """Wraps the iterator state so that None round-trips; validates it as strict JSON up front."""
    if data_state is not None and not isinstance(data_state, Mapping):
        raise ValueError(f"data_state must be a dict or None, got {type(data_state).__name__}")
    payload = {_DATA_KEY: None if data_state is None else dict(data_state)}
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"data_state must be JSON-serializable: {err}") from None
    return payload


def _to_abstract(abstract_state: Any) -> Any:
    """Maps array leaves to ShapeDtypeStructs carrying their sharding; validates the rest."""

    def convert(path: Any, leaf: Any) -> jax.ShapeDtypeStruct:
        if isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        if isinstance(leaf, jax.Array):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
        if isinstance(leaf, np.ndarray | np.generic):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)
        raise ValueError(
            f"abstract_state leaf {jax.tree_util.keystr(path)} has type {type(leaf).__name__}; "
            "expected jax.ShapeDtypeStruct or an array"
        )

    if not jax.tree_util.tree_leaves(abstract_state):
        raise ValueError("abstract_state has no leaves")
    return jax.tree_util.tree_map_with_path(convert, abstract_state)


def _describe(err: BaseException) -> str:
    """`Type: first line of the message`, shortened; enough to identify the damage."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > _MAX_ERROR_CHARS:
        text = text[:_MAX_ERROR_CHARS] + "..."
    return f"{type(err).__name__}: {text}"
