"""Block sizes and launch settings of the value-forget attention (FiX) Pallas kernels, per lowering mode.

Defaults (not yet measured on a device; chosen to fit each compiler's rules):
  * Triton (and the generic interpreter, which runs the same GPU-shaped kernel): 16-step tiles, 4 warps,
    2 stages. The GPU kernels form the diagonal tile's per-channel decays as one [C, C, Dv] tensor, so its
    size (and the registers it takes) grows with C²; 16 keeps it at 16·16·Dv.
  * Mosaic TPU (and the TPU interpreter): 128-step tiles. The TPU kernels walk the diagonal tile one row
    at a time ([C, Dv] per step, no [C, C, Dv] tensor), so the block can be one MXU pass wide.
One default per mode for now, whatever the dtype.
"""

from __future__ import annotations

import jax.numpy as jnp

from icml26zoo.kernels._common import lowering
from icml26zoo.kernels._common.tile_config import TileConfig


def for_platform(mode: lowering.Mode, dtype: jnp.dtype) -> TileConfig:
    """The default settings for `mode` (`dtype` is accepted for the FoX signature; it changes nothing yet)."""
    if lowering.is_tpu_layout(mode):
        return TileConfig(block=128)
    return TileConfig(block=16, num_warps=4, num_stages=2)
