"""Lowering cases of the scan ops (tests/kernels/lowering_support.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from lowering_support import LoweringCase

from icml26zoo.kernels.selective_scan import selective_scan


def _selective_scan_inputs(dtype: jnp.dtype) -> tuple[jax.Array, ...]:
    """u, delta [1, 19, 8], A [8, 4], B, C [1, 19, 4], D [8], initial state [1, 8, 4]: T = 19 is not a
    multiple of the kernels' sub-chunk of 16, and N = 4, D_in = 8 keep the export quick."""
    rng = np.random.default_rng(0)
    bsz, seqlen, d_in, n = 1, 19, 8, 4
    act = lambda *shape: jnp.asarray(rng.standard_normal(shape), dtype)
    f32 = lambda z: jnp.asarray(z, jnp.float32)
    return (act(bsz, seqlen, d_in), f32(rng.uniform(0.1, 1.0, (bsz, seqlen, d_in))),
            f32(-np.exp(rng.uniform(-1.0, 1.0, (d_in, n)))), act(bsz, seqlen, n), act(bsz, seqlen, n),
            f32(rng.standard_normal(d_in)), f32(rng.standard_normal((bsz, d_in, n))))


def _selective_scan(u: jax.Array, delta: jax.Array, A: jax.Array, B: jax.Array, C: jax.Array, D: jax.Array,
                    initial_state: jax.Array) -> tuple[jax.Array, jax.Array]:
    segment_ids = (jnp.arange(u.shape[1]) >= 7).astype(jnp.int32)[None]
    return selective_scan(u, delta, A, B, C, D=D, initial_state=initial_state, segment_ids=segment_ids,
                          implementation="pallas")


CASES: list[LoweringCase] = [
    LoweringCase("selective_scan", _selective_scan, _selective_scan_inputs),
]
