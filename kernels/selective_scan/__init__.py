"""Mamba1's selective scan: `selective_scan` (reference and chunked associative-scan paths) and the
single-step `selective_scan_step` for decoding."""

from icml26zoo.kernels._common.chunks import CHUNK_SIZES
from icml26zoo.kernels.selective_scan.api import selective_scan
from icml26zoo.kernels.selective_scan.decode import selective_scan_step

__all__ = ["CHUNK_SIZES", "selective_scan", "selective_scan_step"]
