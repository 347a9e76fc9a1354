"""Block sizes of the selective-scan Pallas kernels, per platform and input dtype.

The kernels see float32 operands whatever the input dtype (the wrapper casts them), so the dtype only
changes how much of a block fits in fast memory; the defaults below are the same for both dtypes until a
run on the hardware says otherwise.

- `d_block`: channels per program. GPU (Triton): a power of two (every array in a Triton kernel has a
  power-of-two size); the `[N, d_block]` state and one recomputed sub-chunk of states stay in registers, so
  it is small. TPU (Mosaic): the lane dimension of every block, a multiple of 128, or all of D_in when
  D_in is smaller.
- `t_block`: steps per grid step on TPU, a multiple of SUBCHUNK (all of the padded T when shorter; when it
  does not divide the padded T, the largest number of sub-chunks that does). The GPU kernel loops over
  the whole sequence inside one program and ignores it.
- `num_warps`, `num_stages`: Triton launch parameters.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

# Steps between two stored states: the forward writes the state entering every sub-chunk of this many
# steps, and the backward recomputes one sub-chunk's states from it (held as values, never in HBM). The
# same on every platform, so that the residuals of the forward have one shape whichever branch runs.
SUBCHUNK = 16
# T is padded to a multiple of SUBCHUNK up to this length, then to a multiple of it, so that the default
# TPU time block divides the padded T.
LONG_PAD = 128


@dataclasses.dataclass(frozen=True)
class ScanBlocks:
    """Block sizes of one platform's kernel (see the module docstring)."""

    d_block: int
    t_block: int
    num_warps: int = 4
    num_stages: int = 1


_DEFAULTS: dict[tuple[str, str], ScanBlocks] = {
    ("gpu", "float32"): ScanBlocks(d_block=32, t_block=LONG_PAD, num_warps=4),
    ("gpu", "bfloat16"): ScanBlocks(d_block=32, t_block=LONG_PAD, num_warps=4),
    ("tpu", "float32"): ScanBlocks(d_block=128, t_block=LONG_PAD),
    ("tpu", "bfloat16"): ScanBlocks(d_block=128, t_block=LONG_PAD),
}


def block_sizes(platform: str, dtype: jnp.dtype) -> ScanBlocks:
    """The defaults for `platform` ("gpu" or "tpu") and the input dtype (float16 counts as bfloat16)."""
    if platform not in ("gpu", "tpu"):
        raise ValueError(f"selective_scan tuning: `platform` is {platform!r}, expected 'gpu' or 'tpu'")
    key = "float32" if jnp.dtype(dtype) == jnp.float32 else "bfloat16"
    return _DEFAULTS[(platform, key)]


def padded_length(seqlen: int) -> int:
    """T padded with identity steps: to a multiple of SUBCHUNK up to LONG_PAD, else to a multiple of LONG_PAD."""
    multiple = SUBCHUNK if seqlen <= LONG_PAD else LONG_PAD
    return -(-seqlen // multiple) * multiple
