"""Block sizes and launch settings of the forgetting-attention (FoX) Pallas kernels, per lowering mode.

One frozen `BlockConfig` per call: the kernels read their block from it, never from literals. The block is
both the query and the key tile (the kernels walk square tiles: the diagonal tile must be one tile).

Defaults (not yet measured on a device; they are chosen to fit each compiler's rules):
  * Triton (and the generic interpreter, which runs the same GPU-shaped kernel): 64-step tiles, 4 warps,
    2 pipeline stages; 32-step tiles in float32, whose HIGHEST-precision tl.dot (IEEE fp32, no TF32)
    holds twice the registers of a bfloat16 one.
  * Mosaic TPU (and the TPU interpreter): 128-step tiles, one MXU pass wide, lane-dense rows.
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
        if lowering.is_tpu_layout(mode):
            return cls(block=128)
        return cls(block=32 if jnp.dtype(dtype) == jnp.float32 else 64, num_warps=4, num_stages=2)

    def with_block(self, block: int | None) -> BlockConfig:
        """These settings with the tile length `block` (None keeps the default)."""
        check_block_size(block)
        return self if block is None else dataclasses.replace(self, block=block)


def check_block_size(block: int | None) -> None:
    """`block_size=` is None or an int ≥ 1 (bool and float rejected): ValueError naming the op otherwise."""
    if block is not None and (not isinstance(block, int) or isinstance(block, bool) or block < 1):
        raise ValueError(f"forgetting_attention: `block_size` is {block!r}; expected None or an int ≥ 1")
