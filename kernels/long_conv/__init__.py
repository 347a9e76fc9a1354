"""Causal long convolution (Hyena, specs/mixers-06 §C): `causal_long_conv`, FFT path and direct reference."""

from kernels.long_conv.api import causal_long_conv

__all__ = ["causal_long_conv"]
