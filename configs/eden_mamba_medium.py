"""EDEN comparison (ICML 2026): the medium mamba backbone on synthetic nucleotides (train/presets.py).

Sizes and widths are in train.presets.EDEN_SHAPES (parameter counts matched across architectures per size).
The same backbone on the byte corpus: `data.name=pystdlib eval_batches=16`.
The whole grid: `python -m icml26zoo.repro eden`.
"""

from icml26zoo.train.presets import eden_lm


def get_config():
    return eden_lm("mamba", "medium")
