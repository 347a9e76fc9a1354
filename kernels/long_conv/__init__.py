"""Causal long convolution (Hyena, arXiv 2302.10866): `causal_long_conv`, FFT path and direct reference."""

from icml26zoo.kernels.long_conv.api import causal_long_conv
from icml26zoo.kernels.long_conv.decode import LongConvState, causal_long_conv_init, causal_long_conv_step

__all__ = ["LongConvState", "causal_long_conv", "causal_long_conv_init", "causal_long_conv_step"]
