"""Launch settings of the momentum_delta_rule Pallas kernels, per lowering mode (kernels/_common/pallas.py: GridTuning).

One program per (batch, head) walks the chunks in order, so the only settings are the Triton launch (the
chunk loop is a serial dependency: software pipelining across it buys nothing, one stage) and the smallest
padded Triton dim (tl.dot needs 16 on each side). The chunk size itself is the op's `chunk_size` argument.
"""

from __future__ import annotations

from icml26zoo.kernels._common.lowering import Mode
from icml26zoo.kernels._common.pallas import GridTuning

TRITON = GridTuning(num_warps=4, num_stages=1, min_dim=16)
# Interpreters and Mosaic take no launch settings; the defaults are never read there.
OTHER = GridTuning()


def for_platform(mode: Mode) -> GridTuning:
    """The settings the kernels are built with for `mode`."""
    return TRITON if mode == "triton" else OTHER
