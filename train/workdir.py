"""The run directory: validated before anything is built, and held by one run at a time.

`claim_workdir(path)` refuses an empty path or one that cannot be created or written (`WorkdirError`),
then takes an exclusive `fcntl.flock` on ``<workdir>/.lock`` and writes the holder (host, pid, start
time) into it. A second run on the same workdir fails at once with a one-line `WorkdirError` naming the
holder. The kernel drops a flock when its process dies, however it dies (SIGKILL included), so a lock
file whose flock is free but which still names a holder is stale: it is taken over with a log message.

Multi-process runs: every process locks its own file (``.lock`` for process 0, ``.lock.<i>`` for process
i), so a second multi-process run on the same shared workdir is refused on every process instead of
leaving processes 1..N waiting in a collective for a process 0 that gave up. flock on network file
systems depends on the mount (NFSv4 and Lustre honour it; some FUSE mounts do not).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import pathlib
import socket

from icml26zoo.train.errors import WorkdirError

__all__ = ["WorkdirLock", "check_workdir", "claim_workdir", "live_holder", "lock_file_name"]

log = logging.getLogger(__name__)


def check_workdir(workdir: str | os.PathLike) -> pathlib.Path:
    """Creates `workdir` if missing and returns it; `WorkdirError` when empty or not a writable directory."""
    if not isinstance(workdir, str | os.PathLike):
        raise WorkdirError(f"workdir must be a path, got {type(workdir).__name__} {workdir!r}")
    text = os.fspath(workdir)
    if not text.strip():
        # pathlib.Path("") is ".", so an unset --workdir would silently write into the current directory.
        raise WorkdirError(f"workdir must be a non-empty path, got {text!r}")
    path = pathlib.Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise WorkdirError(f"workdir {text!r} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WorkdirError(f"workdir {text!r} cannot be created: {error.strerror or error}") from None
    return path


def lock_file_name(process_index: int) -> str:
    """``.lock`` for a single-process run or process 0, ``.lock.<i>`` for process i > 0."""
    return ".lock" if process_index == 0 else f".lock.{process_index}"


class WorkdirLock:
    """An exclusive flock on one lock file of a workdir; `release` (or leaving the `with`) frees it.

    Args:
      workdir: an existing directory (see `check_workdir`).
      name: the lock file's name inside it.
    """

    def __init__(self, workdir: pathlib.Path, name: str = ".lock") -> None:
        self.path = pathlib.Path(workdir) / name
        self._fd: int | None = None

    def acquire(self) -> WorkdirLock:
        """Takes the lock or raises `WorkdirError` naming the live holder."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise WorkdirError(
                f"workdir {str(self.path.parent)!r} is not writable ({error.strerror or error}); "
                "choose another --workdir or fix its permissions"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _describe_holder(_read_holder(fd))
            os.close(fd)
            raise WorkdirError(
                f"workdir {str(self.path.parent)!r} is in use by another run ({holder}); wait for it to "
                "finish, stop it, or choose another --workdir"
            ) from None
        previous = _read_holder(fd)
        if previous:
            log.warning("taking over the stale lock %s left by a run that is gone (%s)", self.path,
                        _describe_holder(previous))
        _write_holder(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        """Empties the lock file (a clean exit leaves no holder behind) and drops the flock."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> WorkdirLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def claim_workdir(workdir: str | os.PathLike, process_index: int = 0) -> tuple[pathlib.Path, WorkdirLock]:
    """Validates `workdir` and locks it for this process; returns (path, held lock)."""
    path = check_workdir(workdir)
    lock = WorkdirLock(path, lock_file_name(process_index))
    return path, lock.acquire()


def live_holder(workdir: str | os.PathLike) -> str | None:
    """Who holds `workdir`'s lock now ('pid P on host H, started T'), None when no run does; changes nothing.

    For readers, which must not disturb the run: the lock file is read, never created, and its flock is
    never taken, not even shared for an instant (a run starting in that instant would be refused as if
    another run held the workdir). A record naming a pid that is gone on this host is a stale lock (its run
    was killed); a record from another host is taken as live, which a reader only reports.
    """
    try:
        fd = os.open(pathlib.Path(workdir) / lock_file_name(0), os.O_RDONLY)
    except OSError:
        return None
    try:
        record = _read_holder(fd)
    finally:
        os.close(fd)
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    if record.get("host") == socket.gethostname() and not _pid_alive(pid):
        return None
    return _describe_holder(record)


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def _read_holder(fd: int) -> dict:
    """The holder record in the lock file, {} when empty; a torn record reads as {"raw": text}."""
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", "replace").strip()
    if not text:
        return {}
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return {"raw": text[:200]}
    return record if isinstance(record, dict) else {"raw": text[:200]}


def _write_holder(fd: int) -> None:
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(record) + "\n").encode())
    os.fsync(fd)


def _describe_holder(record: dict) -> str:
    if "pid" in record:
        return f"pid {record['pid']} on host {record.get('host', '?')}, started {record.get('started', '?')}"
    if "raw" in record:
        return f"lock file holds {record['raw']!r}"
    return "holder unknown: the lock file is empty"
