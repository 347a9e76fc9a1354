"""Pallas forward kernel of value-forget attention (FiX), one body for every lowering mode.

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md), not read from code.

Grid (B, H, N): one program per batch row, query head and query block I of C rows starting at b_I. The
program sees K, V, the value gates and their local sums and the FoX gate rows of the whole (padded)
sequence. It does the diagonal block first and then walks key blocks J = I−1, …, 0 with an online softmax.
Each per-channel decay exp(Λ_i − Λ_j) is a product of local sums (all ≤ 0, see `kernels._common.gate_sums`
for the scalar version):

    Λ_i − Λ_j = λ_i + gap(J, I) + ρ_j      (J < I)
    λ_i = Σ_{l=b_I..i} a_l   prefix inside the query block, applied once to the off-diagonal sum at the end
    gap = Σ_{J<K<I} tot_K    one Dv vector per (I, J), a running sum
    ρ_j = Σ_{l=j+1..e_J} a_l  suffix inside the key block; V'' = exp(ρ + gap) ⊙ V is the matmul operand

λ and ρ are computed in XLA before the kernels (`attention_tiles.channel_local_sums`). Inside the diagonal
block the decay is the masked segment sum Σ_{j<l≤i} a_l per channel, in one of two forms:

* GPU layouts (`diag_values_gpu`): the whole [C, C, Dv] tensor (a cumsum of a where-masked tensor), fine
  for the small Triton tiles;
* TPU layouts (`diag_values_tpu`): one query row i at a time: L_i[j] = Σ_{j<l≤i} a_l grows by a_i from
  L_{i−1} (a plain sum of its own terms), so each step is [C, Dv] and the row of P·(D ⊙ V) a [1, C]·[C, Dv]
  matmul; P rows are read back from a VMEM scratch. No [C, C, Dv] tensor at C = 128.

The FoX scalar gate enters the logits exactly as in the FoX kernel. Masked pairs are zeroed with `jnp.where`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import attention_tiles as tiles

_F32 = jnp.float32


def gate_refs(has_fgate: bool, has_seg: bool) -> list[tuple[str, bool]]:
    """The ref names after q, k, v of every FiX kernel: value gates, their sums, FoX gate rows, segment ids."""
    return [("av", True), ("lamv", True), ("rhov", True), ("af", has_fgate), ("lamf", has_fgate),
            ("rhof", has_fgate), ("seg_rows", has_seg), ("seg_col", has_seg)]


def decay_exponents(av: jax.Array, key_major: bool) -> jax.Array:
    """Per-channel Σ_{j<l≤i} a_l of one block, a [C, C, Dv] tensor (0 outside j < i) from av [C, Dv].

    Query-major E[i, j, c] (a cumsum down axis 0 of a_l·[l > j]); key-major Eᵀ[j, i, c] (across axis 1).
    """
    c = av.shape[0]
    r, k = tiles.iotas((c, c))
    if key_major:
        return jnp.cumsum(jnp.where((k > r)[:, :, None], av[None, :, :], 0.0), axis=1)
    return jnp.cumsum(jnp.where((r > k)[:, :, None], av[:, None, :], 0.0), axis=0)


def diag_values_gpu(p: jax.Array, mask: jax.Array, v: jax.Array, av: jax.Array) -> jax.Array:
    """Σ_j P_ij D_ij ⊙ v_j over the diagonal block: p, mask [C, C] query-major, v, av [C, Dv] -> [C, Dv]."""
    terms = p[:, :, None] * jnp.exp(decay_exponents(av, False)) * v.astype(_F32)[None, :, :]
    return jnp.sum(jnp.where(mask[:, :, None], terms, 0.0), axis=1)


def row_mask(n: int, step: jax.Array, seg_col: jax.Array | None, seg_ref: Any | None,
             later: bool) -> jax.Array:
    """[C, 1] mask of the partners of row `step` of the diagonal block: rows ≤ step (later=False: the keys
    of query `step`) or ≥ step (later=True: the queries of key `step`), in its segment."""
    idx = lax.broadcasted_iota(jnp.int32, (n, 1), 0)
    mask = idx >= step if later else idx <= step
    if seg_col is not None:
        mask = mask & (seg_col == seg_ref[pl.ds(step, 1), :])
    return mask


def diag_rows_tpu(body: Any, operand: jax.Array, av_ref: Any, base: jax.Array, seg_col: jax.Array | None,
                  seg_ref: Any | None) -> None:
    """Walk the query rows i of the diagonal block with L_i[j] = Σ_{j<l≤i} a_l [C, Dv] (keys down) and call
    `body(i, x)` with x = exp(L_i) ⊙ operand on i's keys, 0 elsewhere (`jnp.where`, after the product).

    operand [C, Dv] f32 is indexed by key (the values); av_ref holds the whole sequence's value gates, this
    block starting at row `base`; seg_col [C, 1] / seg_ref the block's segment ids (or None).
    """
    c, dv = operand.shape
    jj = lax.broadcasted_iota(jnp.int32, (c, 1), 0)

    def row(i: jax.Array, lam: jax.Array) -> jax.Array:
        lam = lam + jnp.where(jj < i, av_ref[pl.ds(base + i, 1), :], 0.0)
        mask = row_mask(c, i, seg_col, seg_ref, later=False)
        body(i, jnp.where(mask, jnp.exp(lam) * operand, 0.0))
        return lam

    lax.fori_loop(0, c, row, jnp.zeros((c, dv), _F32))


def fwd_kernel(*refs: Any, c: int, scale: float, has_fgate: bool, has_seg: bool, tpu: bool) -> None:
    """refs: q [C,D], k [Tp,D], v [Tp,Dv], av [Tp,Dv], λv [C,Dv], ρv [Tp,Dv], (a, λ, ρ FoX rows [N,1,C]),
    (seg rows [N,1,C], seg col [C,1]) -> u [C,Dv] f32, lse row [1,C]; TPU scratch p [C,C]."""
    r = tiles.unpack_refs(refs, [("q", True), ("k", True), ("v", True)] + gate_refs(has_fgate, has_seg)
                          + [("u", True), ("lse", True), ("p_scr", tpu)])
    i = pl.program_id(2)
    q = r["q"][...]
    seg_q = r["seg_col"][...] if has_seg else None
    s, mask = tiles.diag_logits(q, tiles.tile_at(r["k"], i, c), tiles.row_at(r["af"], i), seg_q,
                                tiles.row_at(r["seg_rows"], i), scale, tpu)
    m_diag, p, l_sum = tiles.online_start(s)
    v_i = tiles.tile_at(r["v"], i, c)
    dv = v_i.shape[1]
    if tpu:
        r["p_scr"][...] = p

        def value_row(row: jax.Array, x: jax.Array) -> None:
            r["u"][pl.ds(row, 1), :] = tiles.dot_nn(r["p_scr"][pl.ds(row, 1), :], x)

        diag_rows_tpu(value_row, v_i.astype(_F32), r["av"], i * c, seg_q, r["seg_col"])
        diag = r["u"][...]
    else:
        diag = diag_values_gpu(p, mask, v_i, tiles.tile_at(r["av"], i, c))
    lam_f = tiles.to_col(r["lamf"][i]) if has_fgate else None
    zeros = jnp.zeros((1, 1), _F32)
    carry = (m_diag, l_sum, jnp.zeros(diag.shape, _F32), jnp.zeros((1, dv), _F32), zeros)

    def key_block(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        m, l_sum, acc, gap_v, gap_f = carry
        j = i - 1 - t
        bias = None
        if has_fgate:
            bias = (lam_f + gap_f) + r["rhof"][j]
            gap_f = gap_f + tiles.row_sum(r["af"][j])
        s, _ = tiles.off_logits(q, tiles.tile_at(r["k"], j, c), bias, seg_q, tiles.row_at(r["seg_rows"], j), scale)
        m_new, alpha, p, l_sum = tiles.online_step(m, l_sum, s)
        v_j = tiles.tile_at(r["v"], j, c)
        # V'' = exp(ρ_j + gap) ⊙ v_j: the key-side and in-between parts of the decay (both ≤ 0, one sum).
        v_dec = (jnp.exp(tiles.tile_at(r["rhov"], j, c) + gap_v) * v_j.astype(_F32)).astype(v_j.dtype)
        acc = alpha * acc + tiles.dot_nn(p.astype(v_j.dtype), v_dec)
        return m_new, l_sum, acc, gap_v + jnp.sum(tiles.tile_at(r["av"], j, c), axis=0, keepdims=True), gap_f

    m, l_sum, acc, _, _ = lax.fori_loop(0, i, key_block, carry)
    u = jnp.exp(m_diag - m) * diag + jnp.exp(r["lamv"][...]) * acc
    r["u"][...] = u / l_sum
    r["lse"][...] = tiles.to_row(m + jnp.log(l_sum))
