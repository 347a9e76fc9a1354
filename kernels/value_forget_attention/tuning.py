"""Block sizes and launch settings of the value-forget attention (FiX) Pallas kernels, per lowering mode.

One frozen `BlockConfig` per call: the kernels read their block from it, never from literals. The block is
both the query and the key tile (square tiles: the diagonal tile must be one tile).

Defaults (not yet measured on a device; chosen to fit each compiler's rules):
  * Triton (and the generic interpreter, which runs the same GPU-shaped kernel): 16-step tiles, 4 warps,
    2 stages. The GPU kernels form the diagonal tile's per-channel decays as one [C, C, Dv] tensor, so its
    size (and the registers it takes) grows with C²; 16 keeps it at 16·16·Dv.
  * Mosaic TPU (and the TPU interpreter): 128-step tiles. The TPU kernels walk the diagonal tile one row
    at a time ([C, Dv] per step, no [C, C, Dv] tensor), so the block can be one MXU pass wide.
`with_block` overrides the block (the `block_size=` argument); each mode then rounds it to what its
layout needs (`attention_tiles.geometry`).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from icml26zoo.kernels._common import lowering


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """block: query/key tile length C; num_warps / num_stages: the Triton launch (unused elsewhere)."""

    block: int
    num_warps: int = 4
    num_stages: int = 2

    @classmethod
    def for_platform(cls, mode: lowering.Mode, dtype: jnp.dtype) -> BlockConfig:
        """The default settings for `mode` and the q/k/v dtype."""
        del dtype  # one default per mode for now; the argument keeps the FoX signature
        if lowering.is_tpu_layout(mode):
            return cls(block=128)
        return cls(block=16, num_warps=4, num_stages=2)

    def with_block(self, block: int | None) -> BlockConfig:
        """These settings with the tile length `block` (None keeps the default)."""
        check_block_size(block)
        return self if block is None else dataclasses.replace(self, block=block)


def check_block_size(block: int | None) -> None:
    """`block_size=` is None or an int ≥ 1 (bool and float rejected): ValueError naming the op otherwise."""
    if block is not None and (not isinstance(block, int) or isinstance(block, bool) or block < 1):
        raise ValueError(f"value_forget_attention: `block_size` is {block!r}; expected None or an int ≥ 1")
