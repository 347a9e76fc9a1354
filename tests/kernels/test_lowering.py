"""Every op's "pallas" path lowers to a compiled kernel for CUDA (Triton) and TPU (Mosaic), forward and VJP,
in float32 and bfloat16, checked on CPU by cross-platform export (tests/kernels/lowering_support.py)."""

from __future__ import annotations

import jax.numpy as jnp
import lowering_attention
import lowering_recurrences
import lowering_scan
import pytest
from lowering_support import compiled_kernel_count, exported_text, forward, vjp

CASES = lowering_attention.CASES + lowering_recurrences.CASES + lowering_scan.CASES
DIRECTIONS = {"fwd": forward, "vjp": vjp}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_pallas_path_lowers_to_a_compiled_kernel(case, direction, platform, dtype):
    inputs = case.make_inputs(dtype)
    text = exported_text(DIRECTIONS[direction](case), inputs, platform)
    assert compiled_kernel_count(text, platform) >= 1, f"{case.name} {direction} on {platform}: no compiled kernel"
