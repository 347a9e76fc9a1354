"""Per-leaf checksums of a checkpointed pytree, computed on the host at save time and checked at restore.

Why host-side CRC-32 rather than a storage codec: Orbax 0.12 writes arrays through TensorStore's zarr
driver inside OCDBT, and neither exposes a data-checksum codec that Orbax's type handlers can be asked
for, so a flipped byte in an array file decodes to a different, perfectly valid array. A digest of each
leaf's bytes, taken from the very arrays being saved and recomputed from the arrays restored, covers the
whole path (host copy, serialization, disk, read-back, resharding) with no dependence on Orbax internals.
CRC-32 (zlib) detects every burst error up to 32 bits and any single flipped byte; it guards against
damage, not against tampering.

What is covered: every leaf that is fully addressable by this process (all leaves of a single-process
run, and replicated leaves of a multi-process one). A leaf sharded across processes is not covered: each
process sees only its shards and the digest item is written by process 0 alone; such leaves are
recorded as null and skipped at restore.

Format (a JSON item of the step): ``{"algorithm": "crc32", "leaves": {<leaf name>: {"crc32": int,
"dtype": str, "shape": [int, ...]} or null}}``, paths named by `leaf_name`.
"""

from __future__ import annotations

import sys
import zlib
from typing import Any

import jax
import numpy as np

__all__ = ["ChecksumMismatchError", "leaf_checksums", "quiet_closed_event_loop", "verify_checksums"]

ALGORITHM = "crc32"


class ChecksumMismatchError(ValueError):
    """A restored leaf does not match the checksum recorded when its checkpoint was saved."""


def _host_bytes(leaf: Any) -> np.ndarray | None:
    """The leaf as a C-contiguous host array; None when this process cannot see all of it."""
    if isinstance(leaf, jax.Array):
        if not leaf.is_fully_addressable:
            return None
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        leaf = jax.device_get(leaf)
    return np.ascontiguousarray(np.asarray(leaf))


def _record(leaf: Any) -> dict | None:
    array = _host_bytes(leaf)
    if array is None:
        return None
    return {"crc32": zlib.crc32(array.tobytes()), "dtype": str(array.dtype), "shape": list(array.shape)}


def leaf_name(path: tuple) -> str:
    """``params.embed.w``-style name of a tree path, the same whatever the containers' types.

    A state saved from NamedTuples and dataclasses is restored as the same tree or, without the model
    at hand (`Checkpointer.saved_structure`), as dicts and lists; both must find the same checksums.
    """
    parts = []
    for entry in path:
        for attribute in ("key", "name", "idx"):
            if hasattr(entry, attribute):
                parts.append(str(getattr(entry, attribute)))
                break
        else:
            parts.append(str(entry))
    return ".".join(parts)


def leaf_checksums(state: Any) -> dict:
    """The checksum item of `state` (see the module docstring), one entry per leaf path."""
    leaves = {leaf_name(path): _record(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(state)}
    return {"algorithm": ALGORITHM, "leaves": leaves}


def verify_checksums(state: Any, item: Any) -> None:
    """Raises `ChecksumMismatchError` naming the first leaf of `state` that differs from `item`.

    A missing or malformed item, or a leaf the item does not list, is a mismatch too: the item is
    written in the same atomic step directory as the arrays, so its absence means damage.
    """
    if not isinstance(item, dict) or item.get("algorithm") != ALGORITHM or not isinstance(item.get("leaves"), dict):
        raise ChecksumMismatchError(f"checksum item is missing or malformed ({_short(item)})")
    recorded = item["leaves"]
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        key = leaf_name(path)
        if key not in recorded:
            raise ChecksumMismatchError(f"leaf {key} has no recorded checksum")
        expected = recorded[key]
        if expected is None:
            continue
        actual = _record(leaf)
        if actual is None:
            continue
        if actual != expected:
            raise ChecksumMismatchError(
                f"leaf {key} does not match its saved checksum (saved crc32 {_crc(expected)} "
                f"{expected.get('dtype')} {expected.get('shape')}, read crc32 {_crc(actual)} "
                f"{actual['dtype']} {actual['shape']})"
            )


def _crc(record: Any) -> str:
    value = record.get("crc32") if isinstance(record, dict) else None
    return f"{value:08x}" if isinstance(value, int) else repr(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


_CLOSED_LOOP_MESSAGE = "Event loop is closed"


def quiet_closed_event_loop() -> None:
    """Drops the "Event loop is closed" RuntimeErrors a failed Orbax restore leaves behind; idempotent.

    When a restore fails on damaged files, TensorStore completes the reads still in flight on its own
    threads after Orbax has closed the asyncio loop they report to; each one is printed by
    `sys.unraisablehook` as a traceback, dozens per failed step, long after the fallback already
    warned once. Only that exact error is dropped; every other unraisable exception reaches the
    previous hook. The hook stays installed (the stray callbacks arrive at unpredictable times after
    the restore returns); it is installed again if something (e.g. pytest) swapped it out since.
    """
    previous = sys.unraisablehook
    if getattr(previous, "_drops_closed_event_loop", False):
        return

    def hook(unraisable: Any) -> None:
        value = unraisable.exc_value
        if isinstance(value, RuntimeError) and str(value) == _CLOSED_LOOP_MESSAGE:
            return
        previous(unraisable)

    hook._drops_closed_event_loop = True
    sys.unraisablehook = hook
