"""Pallas forward kernel of forgetting attention, one body for every lowering mode (attention_tiles layout).

Grid (B, H, N): one program per batch row, query head and query block i of C rows. K, V, the gate rows
(a, λ, ρ) and the segment-id rows of the whole (padded) sequence are visible to the program; it walks the
diagonal key block first and then key blocks i−1, …, 0, so the gap between blocks is a running sum of block
totals and the running max is finite from the first step (masked logits are −inf before any exp).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels._common.precision import ACCUM_DTYPE


def fwd_kernel(*refs: Any, c: int, scale: float, has_gate: bool, has_seg: bool, tpu: bool) -> None:
    """refs: q [C,D], k/v [Tp,D], (a, λ, ρ rows [N,1,C]), (seg rows [N,1,C], seg col [C,1])
    -> o [C,D], lse row [1,C]."""
    r = tiles.unpack_refs(refs, [("q", True), ("k", True), ("v", True), ("a", has_gate), ("lam", has_gate),
                                 ("rho", has_gate), ("seg_rows", has_seg), ("seg_col", has_seg), ("o", True),
                                 ("lse", True)])
    i = pl.program_id(2)
    q = r["q"][...]
    seg_q = r["seg_col"][...] if has_seg else None
    s, _ = tiles.diag_logits(q, tiles.tile_at(r["k"], i, c), tiles.row_at(r["a"], i), seg_q,
                             tiles.row_at(r["seg_rows"], i), scale, tpu)
    m, p, l_sum = tiles.online_start(s)
    v_i = tiles.tile_at(r["v"], i, c)
    lam = tiles.to_col(r["lam"][i]) if has_gate else None
    carry = (m, l_sum, tiles.dot_nn(p.astype(v_i.dtype), v_i), jnp.zeros((1, 1), ACCUM_DTYPE))

    def key_block(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        m, l_sum, acc, gap = carry
        j = i - 1 - t
        bias = None
        if has_gate:
            a_j = r["a"][j]
            bias = (lam + gap) + r["rho"][j]
            gap = gap + tiles.row_sum(a_j)
        s, _ = tiles.off_logits(q, tiles.tile_at(r["k"], j, c), bias, seg_q, tiles.row_at(r["seg_rows"], j), scale)
        m_new, alpha, p, l_sum = tiles.online_step(m, l_sum, s)
        v_j = tiles.tile_at(r["v"], j, c)
        return m_new, l_sum, alpha * acc + tiles.dot_nn(p.astype(v_j.dtype), v_j), gap

    m, l_sum, acc, _ = lax.fori_loop(0, i, key_block, carry)
    r["o"][...] = (acc / l_sum).astype(r["o"].dtype)
    r["lse"][...] = tiles.to_row(m + jnp.log(l_sum))
