"""The quadratic masked-attention ("dual", semiseparable) form of SSD, materialized [T, T] per head.

The dual form (Dao & Gu, arXiv 2405.21060): y = M x with M[t, s] = sum_n c_t[n] b_s[n] L[t, s, n],
L[t, s, n] = exp(sum_{s<r<=t} a_r[n])
for s <= t in one segment, else 0 (scalar decay: Na = 1, one 1-SS mask shared by all n). The incoming state
enters the first segment through exp(prefix sums); the final state is the last segment's suffix-weighted
sum. O(T^2 Na) memory: a test oracle and a diagnostic (`kernel_matrix`), never a training path.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.precision import einsum_f32
from icml26zoo.kernels._common.segments import segment_counts


def _heads_first(x: jax.Array, a: jax.Array, b: jax.Array,
                 c: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    f32 = lambda z: jnp.moveaxis(z.astype(jnp.float32), 1, 2)
    a = a[..., None] if a.ndim == 3 else a
    return f32(x), f32(a), f32(b), f32(c)


def _decay_matrix(a: jax.Array, counts: jax.Array) -> jax.Array:
    """L [B,H,T,T,Na]: stable segsum over the whole sequence (masked cumsum), masked before exp."""
    seqlen = a.shape[-2]
    t_idx = lax.broadcasted_iota(jnp.int32, (seqlen, seqlen), 0)
    s_idx = lax.broadcasted_iota(jnp.int32, (seqlen, seqlen), 1)
    seg = jnp.cumsum(jnp.where((t_idx > s_idx)[:, :, None], a[..., :, None, :], 0.0), axis=-3)
    same = counts[:, None, :, None] == counts[:, None, None, :]  # [B,1,T,T]
    keep = (t_idx >= s_idx) & same
    return jnp.exp(jnp.where(keep[..., None], seg, -jnp.inf))


def kernel_matrix(a: jax.Array, b: jax.Array, c: jax.Array, *, segment_ids: jax.Array | None = None) -> jax.Array:
    """The materialized SSD kernel M [B,H,T,T] (y = M x per head), for rank diagnostics."""
    bsz, seqlen = b.shape[:2]
    _, a_h, b_h, c_h = _heads_first(b[..., :1], a, b, c)
    lmat = _decay_matrix(a_h, segment_counts(segment_ids, bsz, seqlen))
    return einsum_f32("...tsn,...sn->...ts", lmat * c_h[..., :, None, :], b_h)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def ssd(x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array, *, initial_state: jax.Array | None = None,
        segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Attention-form SSD (chunk_size accepted for a uniform signature and ignored).

    x: [B,T,H,P]; a: [B,T,H] or [B,T,H,N]; b, c: [B,T,H,N]; initial_state [B,H,P,N] | None.
    Returns y [B,T,H,P] in x.dtype and the final state [B,H,P,N] float32.
    """
    del chunk_size
    bsz, seqlen = x.shape[:2]
    counts = segment_counts(segment_ids, bsz, seqlen)
    x_h, a_h, b_h, c_h = _heads_first(x, a, b, c)
    lmat = _decay_matrix(a_h, counts)
    y = einsum_f32("...ts,...sp->...tp", einsum_f32("...tsn,...sn->...ts", lmat * c_h[..., :, None, :], b_h), x_h)
    # Suffix sums after s (reverse cumsum, no differences) weight each input into the final state.
    suffix = lax.cumsum(a_h, axis=2, reverse=True)
    after = jnp.concatenate([suffix[:, :, 1:], jnp.zeros_like(a_h[:, :, :1])], axis=2)
    in_last = (counts == counts[:, -1:])[:, None, :, None]
    w_fin = jnp.exp(jnp.where(in_last, after, -jnp.inf))
    s_fin = einsum_f32("...sp,...sn->...pn", x_h, b_h * w_fin)
    if initial_state is not None:
        s0 = initial_state.astype(jnp.float32)
        in_first = (counts == 0)[:, None, :, None]
        eg = jnp.exp(jnp.where(in_first, jnp.cumsum(a_h, axis=2), -jnp.inf))  # [B,H,T,Na]
        y = y + einsum_f32("...tn,...pn->...tp", c_h * eg, s0)
        s_fin = s_fin + jnp.exp(jnp.where(in_first[:, :, -1], suffix[:, :, 0], -jnp.inf))[:, :, None, :] * s0
    return jnp.moveaxis(y, 2, 1).astype(x.dtype), s_fin
