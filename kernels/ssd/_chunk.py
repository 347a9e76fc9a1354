"""Shared pieces of the chunked SSD: layout (cast, pad, chunk) and the maths of one chunk.

The per-chunk functions take any leading batch dims `...` (none inside a Pallas program, `[B, H]` in the
XLA scan). Decays are `[..., Q, Na]` with Na = 1 (scalar, Mamba2) or N (diagonal): Na = 1 broadcasts over
the N state channels. Segment ids enter as per-position segment *counts* k (number of resets so far), so
"same segment" is `k_t == k_s` and works for any packed ids, monotone or not.

Numerics (docs/numerics.md, binding): every exponent is masked to -inf *before* `exp`; every exponent is a sum of
same-signed steps over its own span, never a difference G_t - G_s of cumsums: pairwise decays inside a
16-step sub-block are a stable segsum (masked cumsum of the repeated step vector); across sub-blocks they
are a product of two factors <= 1 (end of block j -> t, and s -> end of its block), built from local
prefix / suffix sums and whole-block totals; the chunk-state decay is a suffix sum (reverse cumsum).
The sub-blocks keep the diagonal case at [Q/16, 16, 16, N] + [Q/16, Q/16, 16, N] per chunk instead of
[Q, Q, N], and turn its cross-block part into matmuls.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.precision import einsum_f32
from icml26zoo.kernels._common.segments import segment_counts


def to_heads_first(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, segment_ids: jax.Array | None,
                   chunk_size: int) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Casts to float32, pads T to a multiple of the chunk with identity steps, moves heads forward.

    Returns x [B,H,Tp,P], a [B,H,Tp,Na], b, c [B,H,Tp,N], k [B,Tp] int32 segment counts. Padding steps
    have a = 0 (decay 1), x = b = c = 0 and continue the last segment, so the state passes unchanged.
    """
    bsz, seqlen = x.shape[:2]
    pad = (-seqlen) % chunk_size
    f32 = lambda z: z.astype(jnp.float32)
    a = f32(a)[..., None] if a.ndim == 3 else f32(a)
    k = segment_counts(segment_ids, bsz, seqlen)
    k = jnp.pad(k, ((0, 0), (0, pad)), mode="edge")
    move = lambda z: jnp.moveaxis(jnp.pad(f32(z), ((0, 0), (0, pad), (0, 0), (0, 0))), 1, 2)
    return move(x), move(a), move(b), move(c), k


SUB = 16  # sub-block length inside a chunk: the only [.., SUB, SUB, Na] pairwise-decay tiles


class Decays(NamedTuple):
    """Masked decays of one chunk of Q = nb * SUB steps (Na = 1 or N channels), all entries in [0, 1].

    loc [..., nb, SUB, SUB, Na]: exp(sum_{s<r<=t} a_r) inside sub-block i (t, s in block i).
    fq [..., nb(i), nb(j), SUB, Na]: exp(decay from the end of block j to t in block i), 0 unless i > j.
    fk [..., nb(j), SUB, Na]: exp(decay from s to the end of its block j).
    keep [..., Q, Q]: s <= t in one segment. eg, er [..., Q, Na]; carry [..., Na] (see `decays`).
    For t in block i > j >= block of s: L[t, s] = fq[i, j, t] * fk[j, s], a product of two factors <= 1.
    """

    loc: jnp.ndarray
    fq: jnp.ndarray
    fk: jnp.ndarray
    keep: jnp.ndarray
    eg: jnp.ndarray
    er: jnp.ndarray
    carry: jnp.ndarray


def _segsum_mask(n: int) -> tuple[jax.Array, jax.Array]:
    t_idx = lax.broadcasted_iota(jnp.int32, (n, n), 0)
    s_idx = lax.broadcasted_iota(jnp.int32, (n, n), 1)
    return t_idx, s_idx


def _stable_segsum(a: jax.Array) -> jax.Array:
    """a [..., n, Na] -> [..., n, n, Na]: sum_{s<r<=t} a_r for t >= s (masked cumsum; no differences)."""
    t_idx, s_idx = _segsum_mask(a.shape[-2])
    return jnp.cumsum(jnp.where((t_idx > s_idx)[:, :, None], a[..., :, None, :], 0.0), axis=-3)


def decays(a: jax.Array, k: jax.Array, kprev: jax.Array) -> Decays:
    """Decays of one chunk. a: [..., Q, Na] log-decays; k: [..., Q] segment counts; kprev: [...] the count
    of the position before the chunk. Every exponent is a sum of same-signed steps over its own span
    (local prefix / suffix sums inside a sub-block plus whole-block totals), masked to -inf before exp.

    eg: exp(inclusive prefix sum), 0 where t is not in the incoming state's segment; er: exp(sum after s
    to the chunk end), 0 where s is not in the chunk's last segment; carry: exp(chunk total), 0 when a
    segment starts inside the chunk.
    """
    q, na = a.shape[-2:]
    sub = min(SUB, q)
    nb = q // sub
    blk = a.reshape(a.shape[:-2] + (nb, sub, na))
    kb = k.reshape(k.shape[:-1] + (nb, sub))
    t_loc, s_loc = _segsum_mask(sub)
    same_loc = (t_loc >= s_loc) & (kb[..., :, None] == kb[..., None, :])
    loc = jnp.exp(jnp.where(same_loc[..., None], _stable_segsum(blk), -jnp.inf))
    prefix = jnp.cumsum(blk, axis=-2)  # inside each sub-block, inclusive
    suffix_loc = lax.cumsum(blk, axis=blk.ndim - 2, reverse=True)
    after_loc = jnp.concatenate([suffix_loc[..., 1:, :], jnp.zeros_like(blk[..., :1, :])], axis=-2)
    between = _stable_segsum(prefix[..., -1, :])  # [..., nb(i), nb(j), Na]: sum of blocks j < m <= i
    i_idx, j_idx = _segsum_mask(nb)
    # Decay from the end of block j to t in block i: whole blocks j < m < i (= between[i - 1, j], a shift,
    # not a subtraction), then block i up to t.
    mid = jnp.concatenate([jnp.zeros_like(between[..., :1, :, :]), between[..., :-1, :, :]], axis=-3)
    fq_exp = mid[..., :, :, None, :] + prefix[..., :, None, :, :]
    fq = jnp.exp(jnp.where((i_idx > j_idx)[:, :, None, None], fq_exp, -jnp.inf))
    fk = jnp.exp(after_loc)
    t_idx, s_idx = _segsum_mask(q)
    keep = (t_idx >= s_idx) & (k[..., :, None] == k[..., None, :])
    g = jnp.cumsum(a, axis=-2)
    suffix = lax.cumsum(a, axis=a.ndim - 2, reverse=True)  # sum_{r >= s}
    after = jnp.concatenate([suffix[..., 1:, :], jnp.zeros_like(a[..., :1, :])], axis=-2)
    klast = k[..., -1]
    eg = jnp.exp(jnp.where((k == kprev[..., None])[..., None], g, -jnp.inf))
    er = jnp.exp(jnp.where((k == klast[..., None])[..., None], after, -jnp.inf))
    carry = jnp.exp(jnp.where((klast == kprev)[..., None], suffix[..., 0, :], -jnp.inf))
    return Decays(loc, fq, fk, keep, eg, er, carry)


def _blocks(z: jax.Array, nb: int) -> jax.Array:
    """[..., Q, D] -> [..., nb, SUB, D]."""
    return z.reshape(z.shape[:-2] + (nb, z.shape[-2] // nb, z.shape[-1]))


def _assemble(off: jax.Array, diag: jax.Array, keep: jax.Array) -> jax.Array:
    """off [..., nb, nb, S, S] (used where i > j), diag [..., nb, S, S] -> [..., Q, Q] masked by keep."""
    nb, sub = off.shape[-3], off.shape[-1]
    i_idx, j_idx = _segsum_mask(nb)
    eye = (i_idx == j_idx)[:, :, None, None]
    full = jnp.where(eye, diag[..., :, None, :, :], jnp.where((i_idx > j_idx)[:, :, None, None], off, 0.0))
    full = jnp.swapaxes(full, -3, -2).reshape(full.shape[:-4] + (nb * sub, nb * sub))
    return jnp.where(keep, full, 0.0)


def _split(dw: jax.Array, nb: int) -> jax.Array:
    """Inverse layout of `_assemble`: [..., Q, Q] -> [..., nb, nb, S, S]."""
    sub = dw.shape[-1] // nb
    return jnp.swapaxes(dw.reshape(dw.shape[:-2] + (nb, sub, nb, sub)), -3, -2)


def decay_matrix(d: Decays) -> jax.Array:
    """Scalar decay (Na = 1): the chunk's full mask L [..., Q, Q] from the factors."""
    off = d.fq[..., 0][..., :, :, :, None] * d.fk[..., 0][..., None, :, None, :]
    return _assemble(off, d.loc[..., 0], d.keep)


def pair(c: jax.Array, b: jax.Array, d: Decays) -> jax.Array:
    """[..., Q, Q]: W[t, s] = sum_n c_t[n] b_s[n] L[t, s, n]. Scalar: (c b^T) * L. Diagonal: sub-block
    pairs i > j as one matmul of (c * fq) and (b * fk), sub-blocks i = i as [S, S, N] tiles."""
    if d.loc.shape[-1] == 1:
        return einsum_f32("...tn,...sn->...ts", c, b) * decay_matrix(d)
    nb = d.loc.shape[-4]
    cb, bb = _blocks(c, nb), _blocks(b, nb)
    off = einsum_f32("...ijtn,...jsn->...ijts", cb[..., :, None, :, :] * d.fq, bb * d.fk)
    diag = jnp.sum(d.loc * cb[..., :, :, None, :] * bb[..., :, None, :, :], axis=-1)
    return _assemble(off, diag, d.keep)


def pair_bwd(c: jax.Array, b: jax.Array, d: Decays, dw: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Cotangents (dc, db) of `pair` for dw [..., Q, Q]."""
    if d.loc.shape[-1] == 1:
        m = dw * decay_matrix(d)
        return einsum_f32("...ts,...sn->...tn", m, b), einsum_f32("...ts,...tn->...sn", m, c)
    nb = d.loc.shape[-4]
    cb, bb = _blocks(c, nb), _blocks(b, nb)
    i_idx, j_idx = _segsum_mask(nb)
    dw4 = _split(jnp.where(d.keep, dw, 0.0), nb)
    d_off = jnp.where((i_idx > j_idx)[:, :, None, None], dw4, 0.0)
    cq, bk = cb[..., :, None, :, :] * d.fq, bb * d.fk
    # Contractions as einsums (dot_general) and a static loop over j: XLA:CPU runs broadcast-multiply-
    # reduce over a middle axis of these 5-6 dim tensors ~10x slower than the same dot_general.
    dc = sum(einsum_f32("...its,...sn->...itn", d_off[..., :, j, :, :], bk[..., j, :, :]) * d.fq[..., :, j, :, :]
             for j in range(nb))
    db = einsum_f32("...ijts,...ijtn->...jsn", d_off, cq) * d.fk
    m = jnp.einsum("...iits->...its", dw4)[..., None] * d.loc
    dc = dc + einsum_f32("...itsn,...isn->...itn", m, bb)
    db = db + einsum_f32("...itsn,...itn->...isn", m, cb)
    return dc.reshape(c.shape), db.reshape(b.shape)


def chunk_forward(h: jax.Array, x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, k: jax.Array,
                  kprev: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One chunk. h: [..., P, N] incoming state; x [..., Q, P]; a [..., Q, Na]; b, c [..., Q, N].

    Returns y [..., Q, P] and the outgoing state [..., P, N].
    """
    d = decays(a, k, kprev)
    y = einsum_f32("...ts,...sp->...tp", pair(c, b, d), x) + einsum_f32("...tn,...pn->...tp", c * d.eg, h)
    h_new = d.carry[..., None, :] * h + einsum_f32("...sp,...sn->...pn", x, b * d.er)
    return y, h_new


def chunk_backward(h: jax.Array, x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, k: jax.Array, kprev: jax.Array,
                   dy: jax.Array, dh_new: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Hand-written VJP of `chunk_forward` w.r.t. (x, b, c, h), decays recomputed from a.

    The decay gradient is not formed here: `decay_grad` recovers it from db, dc and the final state.
    Returns dx [..., Q, P], db, dc [..., Q, N], dh [..., P, N].
    """
    d = decays(a, k, kprev)
    dx = einsum_f32("...ts,...tp->...sp", pair(c, b, d), dy) + einsum_f32("...sn,...pn->...sp", b * d.er, dh_new)
    dc, db = pair_bwd(c, b, d, einsum_f32("...tp,...sp->...ts", dy, x))
    dc = dc + einsum_f32("...tp,...pn->...tn", dy, h) * d.eg
    db = db + einsum_f32("...sp,...pn->...sn", x, dh_new) * d.er
    dh = d.carry[..., None, :] * dh_new + einsum_f32("...tp,...tn->...pn", dy, c * d.eg)
    return dx, db, dc, dh


def decay_grad(b: jax.Array, c: jax.Array, db: jax.Array, dc: jax.Array, k: jax.Array, s_fin: jax.Array,
               ds_fin: jax.Array, na: int) -> jax.Array:
    """Gradient of the log-decays from the other gradients, without a kernel.

    From the recurrence, dL/da_t[n] = sum_{r >= t in t's segment} (c_r dc_r - b_r db_r)[n], plus
    sum_p dS_fin[p, n] S_fin[p, n] when t is in the last segment; exactly 0 at a segment start (the decay
    there multiplies a zeroed state). The segmented suffix sum is an associative scan of
    out_t = v_t + m_t out_{t+1} (m_t = 1 inside a segment): sums only, no differences of cumsums.
    b, c, db, dc: [B,H,Tp,N]; k: [B,Tp]; s_fin, ds_fin: [B,H,P,N]. Returns [B,H,Tp,na].
    """
    v = c * dc - b * db
    v = v.at[:, :, -1].add(jnp.sum(ds_fin * s_fin, axis=2))
    if na == 1:
        v = jnp.sum(v, axis=-1, keepdims=True)
    same_next = jnp.concatenate([k[:, 1:] == k[:, :-1], jnp.zeros_like(k[:, :1], bool)], axis=1)
    m = jnp.broadcast_to(same_next[:, None, :, None].astype(jnp.float32), v.shape)

    # e1 comes earlier than e2 in the (reversed) scan order.
    def combine(e1: tuple[jax.Array, jax.Array], e2: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return e2[0] * e1[0], e2[0] * e1[1] + e2[1]

    flip = lambda z: jnp.flip(z, axis=2)
    _, out = lax.associative_scan(combine, (flip(m), flip(v)), axis=2)
    starts = jnp.concatenate([jnp.zeros_like(k[:, :1], bool), k[:, 1:] != k[:, :-1]], axis=1)
    return jnp.where(starts[:, None, :, None], 0.0, flip(out))
