"""The tile settings of the blocked attention Pallas kernels (FoX, FiX): one frozen config per call.

The kernels read their block from it, never from literals. The block is both the query and the key tile
(the kernels walk square tiles: the diagonal tile must be one tile). Each op's `tuning.for_platform(mode,
dtype)` gives its defaults; `with_block` applies the user's `block_size=`, which each lowering mode then
rounds to what its layout needs (`attention_tiles.geometry`).
"""

from __future__ import annotations

import dataclasses

from icml26zoo.kernels._common.checks import check_positive_int


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """block: query/key tile length C; num_warps / num_stages: the Triton launch (unused elsewhere)."""

    block: int
    num_warps: int = 4
    num_stages: int = 2

    def with_block(self, op: str, block: int | None) -> TileConfig:
        """These settings with the tile length `block` (None keeps the default); `op` names the caller."""
        check_block_size(op, block)
        return self if block is None else dataclasses.replace(self, block=block)


def check_block_size(op: str, block: int | None) -> None:
    """`block_size=` is None or an int ≥ 1 (bool and float rejected): ValueError naming `op` otherwise."""
    check_positive_int(op, "block_size", block, optional=True)
