"""Experiment presets: each module has `get_config() -> TrainConfig`.

Run one by name (`python -m icml26zoo.train --config llama_tiny --workdir DIR`) or by file
(`--config configs/llama_tiny.py`); `names()` lists the presets installed with the package.
"""

from __future__ import annotations

import pkgutil


def names() -> list[str]:
    """The preset names of this package (its modules), sorted: `["circulation_mqar", ..., "protot_tiny"]`."""
    return sorted(module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith("_"))
