"""Which Pallas lowering a kernel gets is decided when it is lowered for a platform, not when it is traced.

`by_platform(op, build, *args)` calls `build(mode)(*args)` inside `jax.lax.platform_dependent`, one branch
per platform, so one jitted or exported function carries an interpreted kernel for CPU, a Triton kernel for
CUDA and a Mosaic kernel for TPU; the branch that matches the platform being lowered for is the one
compiled. `build(mode)` returns a function that makes its own `pallas_call`, passing
`interpret=interpret_arg(mode)` and `compiler_params=compiler_params(mode, ...)`.

Modes:
  "interpret"      the generic Pallas interpreter (the CPU default);
  "tpu_interpret"  the TPU-shaped kernel under Pallas's TPU interpreter, on CPU (`interpret_as("tpu")`),
                   so the Mosaic branch's block shapes and index maps are checked without a TPU;
  "triton"         compiled through Triton, with explicit `num_warps` / `num_stages`, so nothing depends
                   on the global Mosaic GPU flag;
  "mosaic_tpu"     compiled through Mosaic for TPU.

A platform with no branch (ROCm, say) raises at lowering with the op's name, the platform and the
implementations that can run there: never a silent interpreted fallback on an accelerator.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, Literal

import jax
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pl_triton
from jax.extend import core as jex_core
from jax.interpreters import mlir

Mode = Literal["interpret", "tpu_interpret", "triton", "mosaic_tpu"]
MODES: tuple[Mode, ...] = ("interpret", "tpu_interpret", "triton", "mosaic_tpu")
# The custom-call targets a compiled kernel leaves in an exported module (tests/kernels/test_lowering.py).
COMPILED_MARKERS = {"cuda": ("__gpu$xla.gpu.triton", "mosaic_gpu"), "tpu": ("tpu_custom_call",)}
# Implementations of an op that run on a platform with no Pallas branch, for the error message.
FALLBACK_IMPLEMENTATIONS = ("xla", "reference")

_cpu_mode: contextvars.ContextVar[Mode] = contextvars.ContextVar("pallas_cpu_mode", default="interpret")


@contextlib.contextmanager
def interpret_as(target: Literal["generic", "tpu"]) -> Iterator[None]:
    """On CPU, run the kernels traced inside this block with the generic or the TPU interpreter.

    `interpret_as("tpu")` traces the CPU branch from the TPU build (its blocks, its index maps) and runs it
    under `pltpu.InterpretParams()`: the interpret-mode parity check of the Mosaic branch. Entering and
    leaving the block clears JAX's caches (the mode is not part of a jit cache key); it is a testing tool.
    """
    if target not in ("generic", "tpu"):
        raise ValueError(f"interpret_as: target must be 'generic' or 'tpu', got {target!r}")
    token = _cpu_mode.set("tpu_interpret" if target == "tpu" else "interpret")
    # The mode is read at trace time and is not part of jit's cache key: without clearing, a function
    # traced before (same shapes) would silently rerun with the other interpreter.
    jax.clear_caches()
    try:
        yield
    finally:
        _cpu_mode.reset(token)
        jax.clear_caches()


def cpu_mode() -> Mode:
    """The mode the CPU branch is built with now ("interpret" unless inside `interpret_as("tpu")`)."""
    return _cpu_mode.get()


def is_tpu_layout(mode: Mode) -> bool:
    """Whether `mode` builds the TPU-shaped kernel (Mosaic, or its interpreter on CPU)."""
    return mode in ("mosaic_tpu", "tpu_interpret")


def interpret_arg(mode: Mode) -> Any:
    """The `interpret=` argument of `pl.pallas_call` for `mode`."""
    if mode == "interpret":
        return True
    if mode == "tpu_interpret":
        return pltpu.InterpretParams()
    return False


def compiler_params(mode: Mode, *, num_warps: int = 4, num_stages: int = 2,
                    dimension_semantics: tuple[str, ...] | None = None) -> Any:
    """The `compiler_params=` argument of `pl.pallas_call` for `mode` (None in interpret modes)."""
    if mode == "triton":
        return pl_triton.CompilerParams(num_warps=num_warps, num_stages=num_stages)
    if mode == "mosaic_tpu":
        if dimension_semantics is None:
            return pltpu.CompilerParams()
        return pltpu.CompilerParams(dimension_semantics=dimension_semantics)
    return None


def _no_branch_abstract_eval(*args: Any, op: str, out_avals: tuple) -> tuple:
    return out_avals


def _make_no_branch_rule(platform: str) -> Callable[..., Any]:
    def rule(ctx: Any, *args: Any, op: str, out_avals: tuple) -> Any:
        raise ValueError(
            f"{op}: implementation='pallas' has no kernel for platform {platform!r}; it has branches for "
            f"cpu (interpreted), cuda (Triton) and tpu (Mosaic). On {platform!r} use implementation="
            f"{' or '.join(repr(name) for name in FALLBACK_IMPLEMENTATIONS)}."
        )
    return rule


_no_branch_p = jex_core.Primitive("pallas_no_branch")
_no_branch_p.multiple_results = True
_no_branch_p.def_abstract_eval(_no_branch_abstract_eval)
for _platform in ("rocm",):
    mlir.register_lowering(_no_branch_p, _make_no_branch_rule(_platform), platform=_platform)


def by_platform(op: str, build: Callable[[Mode], Callable[..., Any]], *args: Any) -> Any:
    """`build(mode)(*args)`, with the mode chosen by the platform the enclosing function is lowered for.

    CPU gets `cpu_mode()` ("interpret", or "tpu_interpret" inside `interpret_as("tpu")`), CUDA "triton",
    TPU "mosaic_tpu"; any other platform raises at lowering (ValueError naming `op` and the platform).
    """
    cpu = build(cpu_mode())
    out_shape = jax.eval_shape(cpu, *args)
    leaves, treedef = jax.tree_util.tree_flatten(out_shape)
    out_avals = tuple(jax.core.ShapedArray(x.shape, x.dtype) for x in leaves)

    def unsupported(*operands: Any) -> Any:
        flat = _no_branch_p.bind(*jax.tree_util.tree_leaves(operands), op=op, out_avals=out_avals)
        return jax.tree_util.tree_unflatten(treedef, flat)

    return jax.lax.platform_dependent(*args, cpu=cpu, cuda=build("triton"), tpu=build("mosaic_tpu"),
                                      default=unsupported)
