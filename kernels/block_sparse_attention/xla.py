"""Gather-based block-sparse attention in plain XLA: only the listed key blocks are read and computed.

For each query block i the S listed key/value blocks are gathered ([.., N, S, C, D]) and one exact softmax
runs over their S·C keys; unused slots (-1) and the causal / segment mask inside the blocks are where-masked.
Work and memory are O(T·S·C) per head instead of O(T²). A `jax.custom_vjp` stores o and the logsumexp; the
backward recomputes P from them and scatter-adds the gathered dk/dv back onto the key blocks. The optional
separable logit terms (a per-query bias a_t and a per-key-slot bias b_s, see `reference.py`) get their
gradients as the row and column sums of dS.

Internal layout: q [B, Hkv, G, N, C, D], k [B, Hkv, N, C, D], v [B, Hkv, N, C, Dv], lists [B, Hkv, G, N, S],
segment ids [B, N, C] (padded steps get an id of their own), biases [B, Hkv, G, N, C].
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.layout import pad_time
from icml26zoo.kernels._common.precision import einsum_f32
from icml26zoo.kernels.block_sparse_attention.lists import normalize

_F32 = jnp.float32


class _Gathered(NamedTuple):
    """The listed key/value blocks of every query block and the token mask of their logits."""

    k: jax.Array     # [B, Hkv, G, N, S, C, D]
    v: jax.Array     # [B, Hkv, G, N, S, C, Dv]
    mask: jax.Array  # [B, Hkv, G, N, C, S, C] bool
    bias: jax.Array | float  # [B, Hkv, G, N, C, S, C] float32 a_t + b_s, or 0.0


class _Bias(NamedTuple):
    """The separable logit terms, each [B, Hkv, G, N, C] float32 or None."""

    query: jax.Array | None
    key: jax.Array | None


def _gathered_bias(bias: _Bias, idx: jax.Array) -> jax.Array | float:
    """a_t + b_s over the gathered slots: [B, Hkv, G, N, C, S, C] float32, or 0.0 without biases."""
    out = 0.0
    if bias.query is not None:
        out = bias.query[..., None, None]
    if bias.key is not None:
        b, hkv, g = idx.shape[:3]
        bi, hi, gi = (jnp.arange(n).reshape((-1,) + (1,) * (4 - a)) for a, n in enumerate((b, hkv, g)))
        out = out + bias.key[bi, hi, gi, jnp.maximum(idx, 0)][..., None, :, :]
    return out


def _gather(k: jax.Array, v: jax.Array, idx: jax.Array, seg: jax.Array | None, pos: jax.Array | None,
            bias: _Bias) -> _Gathered:
    """Gather the listed blocks; the mask keeps used slots, causal pairs (by key position) and equal segments.

    pos: [B, Hkv, N, C] position of each key slot (permuted keys), or None (the slot index).
    """
    b, hkv, n, c, _ = k.shape
    safe = jnp.maximum(idx, 0)
    bi = jnp.arange(b)[:, None, None, None, None]
    hi = jnp.arange(hkv)[None, :, None, None, None]
    q_pos = (jnp.arange(n)[:, None] * c + jnp.arange(c))[:, :, None, None]        # [N, C, 1, 1]
    k_pos = safe[..., None] * c + jnp.arange(c) if pos is None else pos[bi, hi, safe]  # [B, Hkv, G, N, S, C]
    mask = (idx >= 0)[..., None, :, None] & (k_pos[..., None, :, :] <= q_pos)
    if seg is not None:
        seg_k = seg[bi, safe]                                                     # [B, Hkv, G, N, S, C]
        mask = mask & (seg_k[..., None, :, :] == seg[:, None, None, :, :, None, None])
    return _Gathered(k=k[bi, hi, safe], v=v[bi, hi, safe], mask=mask, bias=_gathered_bias(bias, idx))


def _logits(q: jax.Array, g: _Gathered, scale: float) -> jax.Array:
    """Masked logits [B, Hkv, G, N, C, S, C] float32 (−inf where masked)."""
    s = einsum_f32("bkgncd,bkgnsed->bkgncse", q, g.k) * scale + g.bias
    return jnp.where(g.mask, s, -jnp.inf)


def _forward(q: jax.Array, k: jax.Array, v: jax.Array, idx: jax.Array, seg: jax.Array | None,
             pos: jax.Array | None, bias: _Bias, scale: float) -> tuple[jax.Array, jax.Array]:
    """o [B, Hkv, G, N, C, Dv] (q.dtype) and lse [B, Hkv, G, N, C] float32."""
    g = _gather(k, v, idx, seg, pos, bias)
    s = _logits(q, g, scale)
    # Every list holds its diagonal block, so each row's max is finite.
    m = jnp.max(s, axis=(-2, -1))
    p = jnp.exp(s - m[..., None, None])
    l_sum = jnp.sum(p, axis=(-2, -1))
    o = einsum_f32("bkgncse,bkgnsed->bkgncd", p.astype(v.dtype), g.v) / l_sum[..., None]
    return o.astype(q.dtype), m + jnp.log(l_sum)


def _scatter_blocks(x: jax.Array, idx: jax.Array, num_blocks: int, per_group: bool = False) -> jax.Array:
    """Per-slot block gradients [B, Hkv, G, N, S, C, ...] -> summed onto key blocks [B, Hkv, Nk, C, ...]
    float32 (summed over the G query heads too), or [B, Hkv, G, Nk, C, ...] when `per_group`."""
    b, hkv, g = x.shape[:3]
    bi = jnp.arange(b)[:, None, None, None, None]
    hi = jnp.arange(hkv)[None, :, None, None, None]
    # Unused slots point past the end and are dropped.
    target = jnp.where(idx >= 0, idx, num_blocks)
    if per_group:
        gi = jnp.arange(g)[None, None, :, None, None]
        out = jnp.zeros((b, hkv, g, num_blocks, *x.shape[5:]), _F32)
        return out.at[bi, hi, gi, target].add(x, mode="drop")
    out = jnp.zeros((b, hkv, num_blocks, *x.shape[5:]), _F32)
    return out.at[bi, hi, target].add(x, mode="drop")


def _backward(q: jax.Array, k: jax.Array, v: jax.Array, idx: jax.Array, seg: jax.Array | None,
              pos: jax.Array | None, bias: _Bias, o: jax.Array, lse: jax.Array, do: jax.Array,
              scale: float) -> tuple[jax.Array, jax.Array, jax.Array, _Bias]:
    """dq, dk, dv and the bias gradients from one recompute of the listed blocks' logits."""
    g = _gather(k, v, idx, seg, pos, bias)
    p = jnp.exp(_logits(q, g, scale) - lse[..., None, None])  # masked logits are −inf: p = 0 there
    delta = jnp.sum(do.astype(_F32) * o.astype(_F32), axis=-1)  # δ_i = dO_i·O_i
    dp = einsum_f32("bkgncd,bkgnsed->bkgncse", do, g.v)
    ds = p * (dp - delta[..., None, None])
    dq = einsum_f32("bkgncse,bkgnsed->bkgncd", ds.astype(g.k.dtype), g.k) * scale
    dk_slots = einsum_f32("bkgncse,bkgncd->bkgnsed", ds.astype(q.dtype), q) * scale
    dv_slots = einsum_f32("bkgncse,bkgncd->bkgnsed", p.astype(do.dtype), do)
    n = k.shape[2]
    dk, dv = _scatter_blocks(dk_slots, idx, n), _scatter_blocks(dv_slots, idx, n)
    # The logit is scale·q·k + a_t + b_s, so dS is the gradient of both biases (row and column sums).
    dbias = _Bias(query=None if bias.query is None else jnp.sum(ds, axis=(-2, -1)),
                  key=None if bias.key is None else _scatter_blocks(jnp.sum(ds, axis=4), idx, n, per_group=True))
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dbias


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def _sparse(q: jax.Array, k: jax.Array, v: jax.Array, idx: jax.Array, seg: jax.Array | None,
            pos: jax.Array | None, bias: _Bias, scale: float) -> jax.Array:
    return _forward(q, k, v, idx, seg, pos, bias, scale)[0]


def _sparse_fwd(q: jax.Array, k: jax.Array, v: jax.Array, idx: jax.Array, seg: jax.Array | None,
                pos: jax.Array | None, bias: _Bias, scale: float) -> tuple[jax.Array, tuple]:
    o, lse = _forward(q, k, v, idx, seg, pos, bias, scale)
    return o, (q, k, v, idx, seg, pos, bias, o, lse)


def _sparse_bwd(scale: float, res: tuple, do: jax.Array) -> tuple:
    q, k, v, idx, seg, pos, bias, o, lse = res
    dq, dk, dv, dbias = _backward(q, k, v, idx, seg, pos, bias, o, lse, do, scale)
    return dq, dk, dv, None, None, None, dbias


_sparse.defvjp(_sparse_fwd, _sparse_bwd)


def padded_segments(segment_ids: jax.Array | None, padded: int) -> jax.Array | None:
    """segment_ids [B, T] -> int32 [B, Tp], padded steps with an id of their own (max + 1), or None."""
    if segment_ids is None:
        return None
    seg = segment_ids.astype(jnp.int32)
    pad = padded - seg.shape[1]
    if not pad:
        return seg
    return jnp.concatenate([seg, jnp.broadcast_to(jnp.max(seg) + 1, (seg.shape[0], pad))], axis=1)


def block_sparse_attention(q: jax.Array, k: jax.Array, v: jax.Array, block_indices: jax.Array, *,
                           block_size: int, scale: float | None = None, segment_ids: jax.Array | None = None,
                           key_positions: jax.Array | None = None, query_bias: jax.Array | None = None,
                           key_bias: jax.Array | None = None) -> jax.Array:
    """Gather-based block-sparse attention (inputs assumed validated by `api`).

    q [B, T, H, D]; k [B, T, Hkv, D]; v [B, T, Hkv, Dv]; block_indices [B, H, N, S] (lists.py); segment_ids
    [B, T] or None; key_positions [B, Hkv, T] int or None; query_bias, key_bias [B, T, H] or None (key_bias in
    key-slot order). T is zero-padded to N·C (padded key slots get positions ≥ T, after every real query, so
    the causal mask hides them). Returns o [B, T, H, Dv] in q.dtype.
    """
    b, t, h, d = q.shape
    hkv, n, c = k.shape[2], block_indices.shape[2], block_size
    tp, groups = n * c, h // k.shape[2]
    scale = d**-0.5 if scale is None else float(scale)
    qb = pad_time(q, tp - t).reshape(b, n, c, hkv, groups, d).transpose(0, 3, 4, 1, 2, 5)
    kb, vb = (pad_time(x, tp - t).reshape(b, n, c, hkv, x.shape[3]).transpose(0, 3, 1, 2, 4) for x in (k, v))
    idx = normalize(block_indices)[0].reshape(b, hkv, groups, n, -1)
    seg = padded_segments(segment_ids, tp)
    seg = None if seg is None else seg.reshape(b, n, c)
    pos = None
    if key_positions is not None:
        pad = jnp.broadcast_to(jnp.arange(t, tp, dtype=jnp.int32), (b, hkv, tp - t))
        pos = jnp.concatenate([key_positions.astype(jnp.int32), pad], axis=2).reshape(b, hkv, n, c)
    bias = _Bias(*(None if x is None else _blocked_bias(x, n, c, hkv) for x in (query_bias, key_bias)))
    o = _sparse(qb, kb, vb, idx, seg, pos, bias, scale)
    return o.transpose(0, 3, 4, 1, 2, 5).reshape(b, tp, h, v.shape[3])[:, :t]


def _blocked_bias(bias: jax.Array, n: int, c: int, hkv: int) -> jax.Array:
    """[B, T, H] -> float32 [B, Hkv, G, N, C], zero-padded to N·C steps (padded slots are masked anyway)."""
    b, t, h = bias.shape
    padded = jnp.pad(bias.astype(_F32), ((0, 0), (0, n * c - t), (0, 0)))
    return padded.reshape(b, n, c, hkv, h // hkv).transpose(0, 3, 4, 1, 2)
