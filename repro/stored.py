"""Finished measurements kept in a run directory, so a resumed run reuses them as it reuses finished cells.

`stored(path, key, compute)` returns the result a JSON file holds when it was computed for the same `key` (the
options it depends on), and otherwise computes it and writes it there. A result must be JSON (numbers, strings,
lists, dicts; numpy and JAX scalars and arrays become numbers and lists); it comes back as JSON reads it, the
first time too, so a fresh and a resumed run see the same values.

Example::

    rows = stored(experiment.cell_dir(cell) / "scores.json", {"alphas": list(alphas)}, lambda: score(model))
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["stored"]


def stored(path: str | pathlib.Path, key: Mapping[str, Any], compute: Callable[[], Any]) -> Any:
    """The result kept in the JSON file `path` for `key`, else `compute()` (then kept there)."""
    path = pathlib.Path(path)
    key = json.loads(json.dumps(key))
    if path.is_file():
        try:
            record = json.loads(path.read_text())
        except ValueError:
            record = {}
        if isinstance(record, dict) and record.get("key") == key and "result" in record:
            return record["result"]
    text = json.dumps({"key": key, "result": compute()}, indent=1, default=_plain)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return json.loads(text)["result"]


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"a stored result must be JSON (or numpy/JAX values), got {type(value).__name__}")
