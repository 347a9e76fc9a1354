"""State-space duality (Mamba2 SSD and diagonal SSD): `ssd` and single-step `ssd_step`."""

from icml26zoo.kernels._common.chunks import CHUNK_SIZES
from icml26zoo.kernels.ssd.api import ssd
from icml26zoo.kernels.ssd.attention_form import kernel_matrix
from icml26zoo.kernels.ssd.decode import ssd_step

__all__ = ["CHUNK_SIZES", "kernel_matrix", "ssd", "ssd_step"]
