"""Pallas forward kernel of forgetting attention (GPU style; runs with interpret=True on CPU).

Grid (B, H, N): one program per batch row, query head and query block of C rows. K, V, the log-gate row
and the segment ids of the whole (padded) sequence are visible to the program; it walks the diagonal key
block first and then key blocks i−1, …, 0, so the gap between blocks is a running sum of block totals and
the running max is finite from the first step (masked logits are −inf before any exp).
"""

from __future__ import annotations

from typing import Any

import jax
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common import gate_sums
from icml26zoo.kernels._common.precision import ACCUM_DTYPE


def fwd_kernel(*refs: Any, c: int, scale: float, has_gate: bool, has_seg: bool) -> None:
    """refs: q [C,D], k/v [Tp,D], (a [Tp]), (seg [Tp]) -> o [C,D], lse [C]."""
    r = tiles.unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("a", has_gate), ("seg", has_seg),
                                 ("o", True), ("lse", True)])
    i = pl.program_id(2)
    q = r["q"][...]
    a_q = tiles.optional_slice(r["a"], i, c)
    seg_q = tiles.optional_slice(r["seg"], i, c)
    m, p, l_sum = tiles.softmax_start(tiles.diag_logits(q, tiles.block_slice(r["k"], i, c), a_q, seg_q, scale))
    v_i = tiles.block_slice(r["v"], i, c)
    lam = gate_sums.prefix_sums(a_q) if has_gate else jnp.zeros((c,), ACCUM_DTYPE)
    carry = (m, l_sum, tiles.dot_nn(p.astype(v_i.dtype), v_i), jnp.zeros((), ACCUM_DTYPE))

    def key_block(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        m, l_sum, acc, gap = carry
        j = i - 1 - t
        k_j = tiles.block_slice(r["k"], j, c)
        s, gap = tiles.key_logits(q, k_j, r["a"], r["seg"], j, c, lam, gap, seg_q, scale)
        m_new, alpha, p, l_sum = tiles.softmax_step(m, l_sum, s)
        v_j = tiles.block_slice(r["v"], j, c)
        return m_new, l_sum, alpha[:, None] * acc + tiles.dot_nn(p.astype(v_j.dtype), v_j), gap

    m, l_sum, acc, _ = lax.fori_loop(0, i, key_block, carry)
    r["o"][...] = (acc / l_sum[:, None]).astype(r["o"].dtype)
    r["lse"][...] = m + jnp.log(l_sum)
