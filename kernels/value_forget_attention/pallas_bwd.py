"""Pallas backward kernels of value-forget attention (FiX): one for dq (and dS row sums), one for dk/dv
(and dS column sums). Both recompute P = exp(S − lse) block by block from the stored logsumexp.

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md), not read from code.

With D_ij = exp(Λ^v_i − Λ^v_j) (per channel) and u_i = Σ_j P_ij D_ij ⊙ v_j:

    dP_ij = du_i · (D_ij ⊙ v_j),   dS = P ⊙ (dP − δ_i),   δ_i = du_i · u_i   (flash style, from the output)
    dv_j  = Σ_i P_ij D_ij ⊙ du_i   (per query head; the caller sums it over the GQA group)

Off the diagonal the decay splits as exp(λ_i)·exp(gap)·exp(ρ_j) (see pallas_fwd), so dP is one matmul of
du ⊙ exp(λ + gap) against V' = exp(ρ) ⊙ V. In the diagonal block it is the [C, C, Dv] masked reduction on
GPU layouts, and a walk over the block's rows on TPU layouts (pallas_fwd): the dq kernel walks query rows
(dP row i = du_i · (exp(L_i) ⊙ V)ᵀ), the dk/dv kernel walks key rows downwards with
L'_j[i] = Σ_{j<l≤i} a_l over the queries i (dPᵀ row j and dv_j from exp(L'_j) ⊙ dU), rows kept in VMEM
scratch. dq kernel, grid (B, H, N), query-major: query block i walks key blocks i, i−1, …, 0. dkv kernel,
grid (B, H, N), key-major (sᵀ[j, i]): key block j walks query blocks j, j+1, …, N−1. The gate gradients
(row − column sums of dS for log_fgate, du ⊙ u − v ⊙ dv for log_vgate, then segmented reverse cumsums)
are formed outside the kernels. P and dS are zeroed with `jnp.where` on masked pairs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import attention_tiles as tiles
from icml26zoo.kernels.value_forget_attention.pallas_fwd import decay_exponents, diag_rows_tpu, gate_refs, row_mask

_F32 = jnp.float32
_QKV = [("q", True), ("k", True), ("v", True)]


def _p_ds(s: jax.Array, mask: jax.Array | None, dp: jax.Array, lse: jax.Array,
          delta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """p = exp(s − lse) and dS = p ⊙ (dP − δ), both 0 on masked pairs."""
    p = tiles.masked(mask, jnp.exp(s - lse))
    return p, tiles.masked(mask, p * (dp - delta))


def dq_kernel(*refs: Any, c: int, scale: float, has_fgate: bool, has_seg: bool, tpu: bool) -> None:
    """refs: q [C,D], k [Tp,D], v [Tp,Dv], av [Tp,Dv], λv [C,Dv], ρv [Tp,Dv], (a, λ, ρ FoX rows), (seg rows,
    seg col [C,1]), du [C,Dv] f32, lse / δ rows [1,C] -> dq [C,D], (dS row sums [1,C]); TPU scratch dP [C,C]."""
    r = tiles.unpack_refs(refs, _QKV + gate_refs(has_fgate, has_seg) + [
        ("du", True), ("lse", True), ("delta", True), ("dq", True), ("rows", has_fgate), ("dp_scr", tpu)])
    i = pl.program_id(2)
    q, du = r["q"][...], r["du"][...]
    lse, delta = tiles.to_col(r["lse"][...]), tiles.to_col(r["delta"][...])
    seg_q = r["seg_col"][...] if has_seg else None
    k_i, v_i = tiles.tile_at(r["k"], i, c), tiles.tile_at(r["v"], i, c)
    s, mask = tiles.diag_logits(q, k_i, tiles.row_at(r["af"], i), seg_q, tiles.row_at(r["seg_rows"], i), scale, tpu)
    if tpu:
        def dp_row(row: jax.Array, x: jax.Array) -> None:
            r["dp_scr"][pl.ds(row, 1), :] = tiles.dot_nt(r["du"][pl.ds(row, 1), :], x)

        diag_rows_tpu(dp_row, v_i.astype(_F32), r["av"], i * c, seg_q, r["seg_col"])
        dp = r["dp_scr"][...]
    else:
        terms = du[:, None, :] * jnp.exp(decay_exponents(tiles.tile_at(r["av"], i, c), False))
        dp = jnp.sum(jnp.where(mask[:, :, None], terms * v_i.astype(_F32)[None, :, :], 0.0), axis=2)
    _, ds = _p_ds(s, mask, dp, lse, delta)
    lam_f = tiles.to_col(r["lamf"][i]) if has_fgate else None
    lam_v = r["lamv"][...]
    carry = (tiles.dot_nn(ds.astype(k_i.dtype), k_i), tiles.row_sum(ds), jnp.zeros((1, lam_v.shape[1]), _F32),
             jnp.zeros((1, 1), _F32))

    def key_block(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        dq, rows, gap_v, gap_f = carry
        j = i - 1 - t
        bias = None
        if has_fgate:
            bias = (lam_f + gap_f) + r["rhof"][j]
            gap_f = gap_f + tiles.row_sum(r["af"][j])
        k_j, v_j = tiles.tile_at(r["k"], j, c), tiles.tile_at(r["v"], j, c)
        s, mask = tiles.off_logits(q, k_j, bias, seg_q, tiles.row_at(r["seg_rows"], j), scale)
        du_dec = (du * jnp.exp(lam_v + gap_v)).astype(v_j.dtype)
        v_dec = (jnp.exp(tiles.tile_at(r["rhov"], j, c)) * v_j.astype(_F32)).astype(v_j.dtype)
        _, ds = _p_ds(s, mask, tiles.dot_nt(du_dec, v_dec), lse, delta)
        gap_v = gap_v + jnp.sum(tiles.tile_at(r["av"], j, c), axis=0, keepdims=True)
        return dq + tiles.dot_nn(ds.astype(k_j.dtype), k_j), rows + tiles.row_sum(ds), gap_v, gap_f

    dq, rows, _, _ = lax.fori_loop(0, i, key_block, carry)
    r["dq"][...] = (dq * scale).astype(r["dq"].dtype)
    if has_fgate:
        r["rows"][...] = tiles.to_row(rows)


def _diag_dkv_gpu(p: jax.Array, mask: jax.Array, v: jax.Array, du: jax.Array,
                  av: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Key-major diagonal block: (dPᵀ [C, C], dv [C, Dv]) from pᵀ, mask [Ck, Cq], v [C, Dv], du, av [C, Dv]."""
    terms = jnp.exp(decay_exponents(av, True)) * du[None, :, :]  # Dᵀ[j, i, c]·du[i, c]
    mask3 = mask[:, :, None]
    dp = jnp.sum(jnp.where(mask3, terms * v.astype(_F32)[:, None, :], 0.0), axis=2)
    return dp, jnp.sum(jnp.where(mask3, p[:, :, None] * terms, 0.0), axis=1)


def _diag_dkv_tpu(r: dict[str, Any], p: jax.Array, du: jax.Array, base: jax.Array, c: int,
                  seg_k: jax.Array | None) -> jax.Array:
    """Key-major diagonal block on TPU: walks key rows j = C−1, …, 0 with L'_j[i] = Σ_{j<l≤i} a_l over the
    queries i (it grows by a_{j+1} on rows i > j), writes dPᵀ rows to scratch and dv rows to the dv output.
    Returns dPᵀ [C, C]."""
    r["p_scr"][...] = p
    # v rows are read one at a time: from a float32 copy (a single-row load of packed bfloat16 at a dynamic
    # sublane offset is not something to rely on).
    r["v_scr"][...] = r["v"][...].astype(_F32)
    dv_width = du.shape[1]
    ii = lax.broadcasted_iota(jnp.int32, (c, 1), 0)

    def key_row(t: jax.Array, lam: jax.Array) -> jax.Array:
        j = c - 1 - t
        after = jnp.minimum(j + 1, c - 1)  # a_{j+1}; at j = C−1 no query row takes it
        lam = lam + jnp.where(ii > j, r["av"][pl.ds(base + after, 1), :], 0.0)
        y = jnp.where(row_mask(c, j, seg_k, r["seg_col"], later=True), jnp.exp(lam) * du, 0.0)
        r["dp_scr"][pl.ds(j, 1), :] = tiles.dot_nt(r["v_scr"][pl.ds(j, 1), :], y)
        r["dv"][pl.ds(j, 1), :] = tiles.dot_nn(r["p_scr"][pl.ds(j, 1), :], y)
        return lam

    lax.fori_loop(0, c, key_row, jnp.zeros((c, dv_width), _F32))
    return r["dp_scr"][...]


def dkv_kernel(*refs: Any, c: int, n: int, scale: float, has_fgate: bool, has_seg: bool, tpu: bool) -> None:
    """refs: q [Tp,D], k [C,D], v [C,Dv], av [Tp,Dv], λv [Tp,Dv], ρv [C,Dv], (a, λ, ρ FoX rows), (seg rows,
    seg col [C,1] of the keys), du [Tp,Dv] f32, lse / δ rows [N,1,C] -> dk [C,D], dv [C,Dv] (this query
    head's share, f32), (dS column sums [1,C]); TPU scratch pᵀ, dPᵀ [C,C] and v [C,Dv] f32."""
    r = tiles.unpack_refs(refs, _QKV + gate_refs(has_fgate, has_seg) + [
        ("du", True), ("lse", True), ("delta", True), ("dk", True), ("dv", True), ("cols", has_fgate),
        ("p_scr", tpu), ("dp_scr", tpu), ("v_scr", tpu)])
    j = pl.program_id(2)
    k, v = r["k"][...], r["v"][...]
    seg_k = r["seg_col"][...] if has_seg else None
    rho_f = tiles.to_col(r["rhof"][j]) if has_fgate else None
    rho_v = jnp.exp(r["rhov"][...])
    v_dec = (rho_v * v.astype(_F32)).astype(v.dtype)

    q_j, du_j = tiles.tile_at(r["q"], j, c), tiles.tile_at(r["du"], j, c)
    s, mask = tiles.diag_logits_t(k, q_j, tiles.row_at(r["af"], j), seg_k, tiles.row_at(r["seg_rows"], j), scale,
                                  tpu)
    lse_j, delta_j = r["lse"][j], r["delta"][j]
    p = tiles.masked(mask, jnp.exp(s - lse_j))
    if tpu:
        dp = _diag_dkv_tpu(r, p, du_j, j * c, c, seg_k)
        dv_diag = None
    else:
        dp, dv_diag = _diag_dkv_gpu(p, mask, v, du_j, tiles.tile_at(r["av"], j, c))
    _, ds = _p_ds(s, mask, dp, lse_j, delta_j)
    carry = (tiles.dot_nn(ds.astype(q_j.dtype), q_j), jnp.zeros(rho_v.shape, _F32), tiles.row_sum(ds),
             jnp.zeros((1, rho_v.shape[1]), _F32), jnp.zeros((1, 1), _F32))

    def query_block(i: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        dk, dv, cols, gap_v, gap_f = carry
        bias = None
        if has_fgate:
            bias = rho_f + (r["lamf"][i] + gap_f)
            gap_f = gap_f + tiles.row_sum(r["af"][i])
        q_i = tiles.tile_at(r["q"], i, c)
        s, mask = tiles.off_logits(k, q_i, bias, seg_k, tiles.row_at(r["seg_rows"], i), scale)
        du_dec = (tiles.tile_at(r["du"], i, c) * jnp.exp(tiles.tile_at(r["lamv"], i, c) + gap_v)).astype(v.dtype)
        p, ds = _p_ds(s, mask, tiles.dot_nt(v_dec, du_dec), r["lse"][i], r["delta"][i])
        dk = dk + tiles.dot_nn(ds.astype(q_i.dtype), q_i)
        dv = dv + tiles.dot_nn(p.astype(v.dtype), du_dec)
        gap_v = gap_v + jnp.sum(tiles.tile_at(r["av"], i, c), axis=0, keepdims=True)
        return dk, dv, cols + tiles.row_sum(ds), gap_v, gap_f

    dk, dv, cols, _, _ = lax.fori_loop(j + 1, n, query_block, carry)
    r["dk"][...] = (dk * scale).astype(r["dk"].dtype)
    r["dv"][...] = (r["dv"][...] if tpu else dv_diag) + rho_v * dv
    if has_fgate:
        r["cols"][...] = tiles.to_row(cols)
