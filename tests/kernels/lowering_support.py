"""Cross-platform export of an op's "pallas" path, for tests/kernels/test_lowering.py.

`jax.export` with `platforms=["cuda"]` or `["tpu"]` runs the real Triton / Mosaic lowering on a CPU; the
exported module then holds the compiled kernel's custom call, which an interpreted loop never produces.
Each op family lists its cases in its own module (lowering_attention.py, lowering_recurrences.py,
lowering_scan.py) as `CASES: list[LoweringCase]`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.lowering import COMPILED_MARKERS

DISABLED_CHECKS = [jax.export.DisabledSafetyCheck.custom_call(t) for ts in COMPILED_MARKERS.values() for t in ts]


@dataclass(frozen=True)
class LoweringCase:
    """One op's pallas path: `fn(*differentiable, **static)`, with inputs built by `make_inputs(dtype)`.

    `make_inputs(dtype)` returns the positional arrays (shapes with a length that is not a multiple of
    the kernel's block). `fn` must call the op with implementation="pallas".
    """

    name: str
    fn: Callable[..., jax.Array]
    make_inputs: Callable[[jnp.dtype], Sequence[jax.Array]]


def forward(case: LoweringCase) -> Callable[..., jax.Array]:
    return jax.jit(case.fn)


def vjp(case: LoweringCase) -> Callable[..., tuple]:
    """The op's VJP with a cotangent of ones: forward residuals plus every backward kernel."""

    def pullback(*inputs: jax.Array) -> tuple:
        out, back = jax.vjp(case.fn, *inputs)
        return back(jax.tree_util.tree_map(jnp.ones_like, out))

    return jax.jit(pullback)


def exported_text(fn: Callable[..., object], inputs: Sequence[jax.Array], platform: str) -> str:
    """The StableHLO text of `fn(*inputs)` exported for `platform` ("cuda" or "tpu")."""
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
    return jax.export.export(fn, platforms=[platform], disabled_checks=DISABLED_CHECKS)(*specs).mlir_module()


def compiled_kernel_count(text: str, platform: str) -> int:
    """How many compiled-kernel custom calls for `platform` the module text holds."""
    return sum(text.count(f"@{marker}") for marker in COMPILED_MARKERS[platform])
