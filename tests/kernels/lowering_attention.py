"""Lowering cases of the attention ops (tests/kernels/lowering_support.py)."""

from lowering_support import LoweringCase

CASES: list[LoweringCase] = []
