"""Materialized forgetting attention: the readable oracle (float32, O(T²) memory).

o_i = Σ_j softmax_j(s_ij) v_j with s_ij = scale·q_i·k_j + Σ_{l=j+1..i} log f_l for j ≤ i (same segment),
−∞ otherwise. The pairwise gate sums are taken as masked-cumsum segment sums over the full [T, T] grid
(`gate_sums.segment_sums`), not as Λ_i − Λ_j of a global float32 cumsum: the latter is off by about
|Λ_T|·6e-8 (1e-3 at T = 4096 with strong gates, docs/numerics.md), which would make the oracle less
accurate than the blocked paths it checks. Gradients come from JAX autodiff.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common import gate_sums
from icml26zoo.kernels._common.masks import attention_mask
from icml26zoo.kernels._common.precision import HIGHEST


def forgetting_attention(q: jax.Array, k: jax.Array, v: jax.Array, log_fgate: jax.Array | None, *,
                         scale: float | None = None, segment_ids: jax.Array | None = None) -> jax.Array:
    """Forgetting attention by materializing the logits.

    q [B, T, H, D]; k, v [B, T, Hkv, D]; log_fgate [B, T, H] (≤ 0) or None (plain causal attention);
    segment_ids [B, T] int or None. Returns o [B, T, H, D] in q.dtype.
    """
    _, t, h, d = q.shape
    groups = h // k.shape[2]
    scale = d**-0.5 if scale is None else scale
    # GQA: query head h reads key/value head h // groups.
    kf = jnp.repeat(k.astype(jnp.float32), groups, axis=2)
    vf = jnp.repeat(v.astype(jnp.float32), groups, axis=2)
    s = jnp.einsum("bthd,bshd->bhts", q.astype(jnp.float32), kf, precision=HIGHEST) * scale
    if log_fgate is not None:
        a = jnp.transpose(log_fgate.astype(jnp.float32), (0, 2, 1))  # [B, H, T]
        s = s + gate_sums.segment_sums(a)
    # Mask before the exponential: masked logits are −inf, the diagonal keeps every row non-empty.
    s = jnp.where(attention_mask(t, segment_ids), s, -jnp.inf)
    p = jnp.exp(s - lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True)))
    p = p / jnp.sum(p, axis=-1, keepdims=True)
    o = jnp.einsum("bhts,bshd->bthd", p, vf, precision=HIGHEST)
    return o.astype(q.dtype)
