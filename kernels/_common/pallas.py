"""The Pallas (B, H)-grid wrapper shared by the chunked state passes: one program per (batch, head).

Every array handed to `call` is `[B, H, ...]` (or `[B, ...]` when all heads read it); a program sees its
`[...]` block, the whole of the trailing dims. The lowering is chosen per platform when the function is
lowered (`lowering.by_platform`): interpreted on CPU, Triton on CUDA, Mosaic on TPU.

- TPU: the blocks are head-major with squeezed (B, H) dims and the trailing dims whole, so the last two
  dims of every block span the array, which Mosaic accepts for any size.
- Triton: every array a kernel touches must have power-of-two dims, so each trailing dim of each operand is
  zero-padded to `GridTuning.triton_dim` (1 stays 1: it broadcasts) and the outputs are sliced back. The
  kernels are written so zero padding is inert (zero features contribute nothing; padded chunks are never
  visited: the kernels loop over the true chunk count they are given).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import lowering
from icml26zoo.kernels._common.precision import HIGHEST


@dataclass(frozen=True)
class GridTuning:
    """Launch settings of a (B, H)-grid kernel on one platform (each op's `tuning.for_platform`).

    num_warps, num_stages: Triton compiler parameters. min_dim: the smallest size a padded (non-unit)
    Triton dim gets (tl.dot needs at least 16 on each side).
    """

    num_warps: int = 4
    num_stages: int = 2
    min_dim: int = 16

    def triton_dim(self, size: int) -> int:
        """The power-of-two size a Triton block dim of `size` is padded to (1 stays 1)."""
        if size == 1:
            return 1
        return max(self.min_dim, 1 << (size - 1).bit_length())


# The settings of the chunked state passes (delta rule, MDN, SSD): one program per (batch, head) walks
# the chunks in order, so only the Triton launch matters. The chunk loop is a serial dependency, so software
# pipelining across it buys nothing (one stage); tl.dot needs 16 on each side (min_dim). The chunk size
# itself is each op's `chunk_size` argument. Interpreters and Mosaic take no launch settings.
STATE_PASS_TRITON = GridTuning(num_warps=4, num_stages=1, min_dim=16)
STATE_PASS_OTHER = GridTuning()


def state_pass_tuning(mode: lowering.Mode) -> GridTuning:
    """The launch settings the chunked state-pass kernels are built with for `mode`."""
    return STATE_PASS_TRITON if mode == "triton" else STATE_PASS_OTHER


def dot(a: jax.Array, b: jax.Array) -> jax.Array:
    """a [M, K] @ b [K, N] at full precision with a float32 result, inside a kernel."""
    return jnp.dot(a, b, precision=HIGHEST, preferred_element_type=jnp.float32)


def shape_dtype(x: jax.Array, shape: tuple[int, ...] | None = None) -> jax.ShapeDtypeStruct:
    """A float32 output spec of x's shape (or of `shape`)."""
    return jax.ShapeDtypeStruct(x.shape if shape is None else shape, jnp.float32)


def _spec(shape: tuple[int, ...], per_row: bool) -> pl.BlockSpec:
    """The block of one (batch, head) program: (B, H) squeezed (only B for a per-row input), the rest whole."""
    lead = 1 if per_row else 2
    rest = tuple(shape[lead:])
    squeeze = (pl.squeezed,) * lead
    if per_row:
        return pl.BlockSpec(squeeze + rest, lambda b, h: (b,) + (0,) * len(rest))
    return pl.BlockSpec(squeeze + rest, lambda b, h: (b, h) + (0,) * len(rest))


def _padded_shape(shape: tuple[int, ...], lead: int, tuning: GridTuning) -> tuple[int, ...]:
    return shape[:lead] + tuple(tuning.triton_dim(d) for d in shape[lead:])


def _pad_to(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.pad(x, [(0, want - have) for have, want in zip(x.shape, shape, strict=True)])


def call(op: str, kernel: Callable[..., None], inputs: Sequence[jax.Array],
         out_shapes: Sequence[jax.ShapeDtypeStruct], tuning: Callable[[lowering.Mode], GridTuning],
         shared_by_heads: Sequence[int] = ()) -> list[jax.Array]:
    """`pl.pallas_call` of kernel with grid (B, H), lowered per platform; inputs and outputs are [B, H, ...].

    The inputs at positions `shared_by_heads` are [B, ...] instead (one array read by every head).
    `tuning(mode)` gives the launch settings; `op` names the op in lowering errors.
    """
    bsz, heads = inputs[0].shape[:2]
    leads = [1 if i in shared_by_heads else 2 for i in range(len(inputs))]

    def build(mode: lowering.Mode) -> Callable[..., list[jax.Array]]:
        settings = tuning(mode)

        def run(*operands: jax.Array) -> list[jax.Array]:
            outs = list(out_shapes)
            if mode == "triton":
                operands = tuple(_pad_to(x, _padded_shape(x.shape, lead, settings))
                                 for x, lead in zip(operands, leads, strict=True))
                outs = [jax.ShapeDtypeStruct(_padded_shape(s.shape, 2, settings), s.dtype) for s in out_shapes]
            results = pl.pallas_call(
                kernel, grid=(bsz, heads),
                in_specs=[_spec(x.shape, lead == 1) for x, lead in zip(operands, leads, strict=True)],
                out_specs=[_spec(s.shape, False) for s in outs], out_shape=outs,
                interpret=lowering.interpret_arg(mode),
                compiler_params=lowering.compiler_params(
                    mode, num_warps=settings.num_warps, num_stages=settings.num_stages,
                    dimension_semantics=("parallel", "parallel")),
            )(*operands)
            return [r[tuple(slice(0, d) for d in s.shape)] for r, s in zip(results, out_shapes, strict=True)]

        return run

    return list(lowering.by_platform(op, build, *inputs))
