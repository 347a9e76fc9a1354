"""Block sizes and launch settings of the forgetting-attention (FoX) Pallas kernels, per lowering mode.

Defaults (not yet measured on a device; they are chosen to fit each compiler's rules):
  * Triton (and the generic interpreter, which runs the same GPU-shaped kernel): 64-step tiles, 4 warps,
    2 pipeline stages; 32-step tiles in float32, whose HIGHEST-precision tl.dot (IEEE fp32, no TF32)
    holds twice the registers of a bfloat16 one.
  * Mosaic TPU (and the TPU interpreter): 128-step tiles, one MXU pass wide, lane-dense rows.
"""

from __future__ import annotations

import jax.numpy as jnp

from icml26zoo.kernels._common import lowering
from icml26zoo.kernels._common.tile_config import TileConfig


def for_platform(mode: lowering.Mode, dtype: jnp.dtype) -> TileConfig:
    """The default settings for `mode` and the q/k/v dtype."""
    if lowering.is_tpu_layout(mode):
        return TileConfig(block=128)
    return TileConfig(block=32 if jnp.dtype(dtype) == jnp.float32 else 64, num_warps=4, num_stages=2)
