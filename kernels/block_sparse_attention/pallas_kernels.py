"""Pallas kernel bodies of block-sparse attention: forward, dq and dk/dv, one body for every lowering mode.

Grid (B, H, N): one program per batch row, query head and block. A program walks only its list: the
forward and dq programs of query block i visit the key blocks `entry(0), …, entry(count − 1)` (sorted
descending, so the diagonal block comes first and the running max is finite from the first step); the dk/dv
program of key block j visits the query blocks that list j (the transposed lists). Absent blocks are never
loaded or computed: the loop's trip count is the list's length, read from the index lists (scalar-prefetched
into SMEM on TPU, an int32 input row on GPU layouts; see `pallas.py`). Inside a visited block the mask is
token-level causality (positions) and equal segment ids, set with `jnp.where`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common import attention_tiles as tiles


class Lookup(NamedTuple):
    """A program's list: entry(t) is the t-th block index (int32 scalar), count the list length."""

    entry: Callable[[Any], jax.Array]
    count: jax.Array


def _mask(q_block: jax.Array, k_block: jax.Array, c: int, seg_q: jax.Array | None,
          seg_k: jax.Array | None) -> jax.Array:
    """Query-major [C, C] mask of query block q_block against key block k_block: causal, same segment."""
    r, col = tiles.iotas((c, c))
    mask = q_block * c + r >= k_block * c + col
    if seg_q is not None:
        mask = mask & (seg_q == seg_k)
    return mask


def _mask_t(k_block: jax.Array, q_block: jax.Array, c: int, seg_k: jax.Array | None,
            seg_q: jax.Array | None) -> jax.Array:
    """Key-major [C, C] mask (key down, query across) of key block k_block against query block q_block."""
    r, col = tiles.iotas((c, c))
    mask = k_block * c + r <= q_block * c + col
    if seg_k is not None:
        mask = mask & (seg_k == seg_q)
    return mask


def fwd_body(r: dict[str, Any], look: Lookup, i: jax.Array, *, c: int, scale: float) -> None:
    """refs: q [C,W], k/v [Tp,W], (seg rows [N,1,C], seg col [C,1]) -> o [C,W], lse row [1,C]."""
    q = r["q"][...]
    seg_q = None if r["seg_col"] is None else r["seg_col"][...]

    def logits(j: jax.Array) -> jax.Array:
        s = tiles.dot_nt(q, tiles.tile_at(r["k"], j, c)) * scale
        return jnp.where(_mask(i, j, c, seg_q, tiles.row_at(r["seg_rows"], j)), s, -jnp.inf)

    j0 = look.entry(0)
    m, p, l_sum = tiles.online_start(logits(j0))
    v0 = tiles.tile_at(r["v"], j0, c)

    def step(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        m, l_sum, acc = carry
        j = look.entry(t)
        m_new, alpha, p, l_sum = tiles.online_step(m, l_sum, logits(j))
        v_j = tiles.tile_at(r["v"], j, c)
        return m_new, l_sum, alpha * acc + tiles.dot_nn(p.astype(v_j.dtype), v_j)

    m, l_sum, acc = lax.fori_loop(1, look.count, step, (m, l_sum, tiles.dot_nn(p.astype(v0.dtype), v0)))
    r["o"][...] = (acc / l_sum).astype(r["o"].dtype)
    r["lse"][...] = tiles.to_row(m + jnp.log(l_sum))


def dq_body(r: dict[str, Any], look: Lookup, i: jax.Array, *, c: int, scale: float) -> None:
    """refs: q [C,W], k/v [Tp,W], (seg), do [C,W], lse / δ rows [1,C] -> dq [C,W]."""
    q, do = r["q"][...], r["do"][...]
    lse, delta = tiles.to_col(r["lse"][...]), tiles.to_col(r["delta"][...])
    seg_q = None if r["seg_col"] is None else r["seg_col"][...]

    def step(t: jax.Array, dq: jax.Array) -> jax.Array:
        j = look.entry(t)
        k_j = tiles.tile_at(r["k"], j, c)
        mask = _mask(i, j, c, seg_q, tiles.row_at(r["seg_rows"], j))
        p = jnp.where(mask, jnp.exp(tiles.dot_nt(q, k_j) * scale - lse), 0.0)
        ds = jnp.where(mask, p * (tiles.dot_nt(do, tiles.tile_at(r["v"], j, c)) - delta), 0.0)
        return dq + tiles.dot_nn(ds.astype(k_j.dtype), k_j)

    dq = lax.fori_loop(0, look.count, step, jnp.zeros(q.shape, jnp.float32))
    r["dq"][...] = (dq * scale).astype(r["dq"].dtype)


def dkv_body(r: dict[str, Any], look: Lookup, j: jax.Array, *, c: int, scale: float) -> None:
    """refs: q [Tp,W], k/v [C,W], (seg rows, seg col [C,1] of the keys), do [Tp,W], lse / δ rows [N,1,C]
    -> dk, dv [C,W] float32 (this query head's share; the caller sums the GQA group)."""
    k, v = r["k"][...], r["v"][...]
    seg_k = None if r["seg_col"] is None else r["seg_col"][...]

    def step(t: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        dk, dv = carry
        i = look.entry(t)
        q_i, do_i = tiles.tile_at(r["q"], i, c), tiles.tile_at(r["do"], i, c)
        mask = _mask_t(j, i, c, seg_k, tiles.row_at(r["seg_rows"], i))
        p = jnp.where(mask, jnp.exp(tiles.dot_nt(k, q_i) * scale - r["lse"][i]), 0.0)
        ds = jnp.where(mask, p * (tiles.dot_nt(v, do_i) - r["delta"][i]), 0.0)
        return dk + tiles.dot_nn(ds.astype(q_i.dtype), q_i), dv + tiles.dot_nn(p.astype(do_i.dtype), do_i)

    zeros = jnp.zeros(k.shape, jnp.float32)
    dk, dv = lax.fori_loop(0, look.count, step, (zeros, zeros))
    r["dk"][...] = (dk * scale).astype(r["dk"].dtype)
    r["dv"][...] = dv.astype(r["dv"].dtype)
