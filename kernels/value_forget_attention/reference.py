"""Materialized value-forget attention (FiX): the readable oracle (float32, O(T²·Dv) memory, short T only).

FiX is a RECONSTRUCTION from the paper's abstract (docs/papers.md); the authors' code is not
available. Per query head:

    P_ij = softmax_{j ≤ i, same segment}(scale·q_i·k_j + Σ_{l=j+1..i} log_fgate_l)
    u_i  = Σ_j P_ij · D_ij ⊙ v_j,    D_ij[c] = exp(Σ_{l=j+1..i} log_vgate_l[c])

Every exponent is a masked-cumsum segment sum over exactly the positions it spans (`gate_sums.segment_sums`),
never Λ_i − Λ_j of a global float32 cumsum and never exp(Λ_i)·exp(−Λ_j) (the VO-factorized form overflows
past |Λ| ≈ 88, docs/numerics.md). Masked pairs get −∞ before the exponential. Gradients come from JAX autodiff.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common import gate_sums
from icml26zoo.kernels._common.masks import attention_mask
from icml26zoo.kernels._common.precision import HIGHEST

_F32 = jnp.float32


def attention_weights(q: jax.Array, k: jax.Array, log_fgate: jax.Array | None, *, scale: float,
                      segment_ids: jax.Array | None) -> jax.Array:
    """Normalized softmax weights P [B, H, T, T] float32 (zero where masked).

    q [B, T, H, D]; k [B, T, Hkv, D]; log_fgate [B, T, H] or None; segment_ids [B, T] or None.
    """
    t, h = q.shape[1], q.shape[2]
    kf = jnp.repeat(k.astype(_F32), h // k.shape[2], axis=2)
    s = jnp.einsum("bthd,bshd->bhts", q.astype(_F32), kf, precision=HIGHEST) * scale
    if log_fgate is not None:
        s = s + gate_sums.segment_sums(jnp.transpose(log_fgate.astype(_F32), (0, 2, 1)))
    s = jnp.where(attention_mask(t, segment_ids), s, -jnp.inf)
    p = jnp.exp(s - lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True)))
    return p / jnp.sum(p, axis=-1, keepdims=True)


def value_decays(log_vgate: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
    """D [B, H, Dv, T, T] float32: D[..., c, i, j] = exp(Σ_{l=j+1..i} log_vgate_l[c]), 0 where masked.

    log_vgate [B, T, H, Dv]; segment_ids [B, T] or None.
    """
    t = log_vgate.shape[1]
    sums = gate_sums.segment_sums(jnp.transpose(log_vgate.astype(_F32), (0, 2, 3, 1)))
    mask = attention_mask(t, segment_ids)[:, :, None]
    return jnp.exp(jnp.where(mask, sums, -jnp.inf))


def value_forget_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array, *,
                           log_fgate: jax.Array | None = None, scale: float | None = None,
                           segment_ids: jax.Array | None = None, block_size: int | None = None) -> jax.Array:
    """FiX attention by materializing P [B, H, T, T] and the per-channel decays [B, H, Dv, T, T].

    q [B, T, H, D]; k [B, T, Hkv, D]; v [B, T, Hkv, Dv]; log_vgate [B, T, H, Dv] (≤ 0);
    log_fgate [B, T, H] (≤ 0) or None; segment_ids [B, T] int or None. `block_size` is unused (the
    direct form has no blocks); it is accepted so that every implementation shares one signature.
    Returns u [B, T, H, Dv] in v.dtype (softmax-normalized, no RMSNorm).
    """
    del block_size
    h, d = q.shape[2], q.shape[3]
    scale = d**-0.5 if scale is None else scale
    p = attention_weights(q, k, log_fgate, scale=scale, segment_ids=segment_ids)
    decay = value_decays(log_vgate, segment_ids)
    vf = jnp.repeat(v.astype(_F32), h // k.shape[2], axis=2)
    u = jnp.einsum("bhij,bhcij,bjhc->bihc", p, decay, vf, precision=HIGHEST)
    return u.astype(v.dtype)
