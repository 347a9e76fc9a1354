"""ISA's decisions: block pooling, pooled attention, context pre-selection and sharpness routing.

Everything here is computed from block means, in float32, and returns integer index arrays whose shapes
depend only on static sizes, so one jit compilation serves each (N, n_src, H, D, block). The attention paths
that use the plan live in `icml26zoo.longctx.isa`.

Naming: the sequence is `[source part ; context part]`. The *source* part (first `n_src`
tokens) keeps all its keys; the *context* part is pruned by pre-selection. The paper's code calls these
the "target" ("t-part") and the "source" ("s-part") respectively; its `flat_indices` are the sharp blocks
that go to full attention. The zoo uses the paper's words only.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

OP = "isa_attention"


class IsaSizes(NamedTuple):
    """Static counts of one ISA call."""

    block: int
    n_blocks: int  # NB: blocks of the whole sequence
    n_src_blocks: int  # n_s
    n_ctx_blocks: int  # n_c
    n_kept: int  # K_c: context blocks kept by pre-selection
    n_sharp_cols: int  # k_s: top source-block columns summed into the sharpness
    n_full: int  # N_f: query blocks routed to full attention
    n_pruned_blocks: int  # NB' = n_s + K_c: blocks of the pruned keys K'
    n_exact: int  # k_e: exact K' blocks per sparse query block


class IsaPlan(NamedTuple):
    """Per (batch, head) decisions. Shapes: B batch, H heads, NB blocks, D head dim."""

    pooled_probs: jax.Array  # P [B, H, NB, NB], float32
    pooled_out: jax.Array  # O_pool [B, H, NB, D], float32
    saliency: jax.Array  # c [B, H, n_c]
    kept_ctx: jax.Array  # [B, H, K_c] context block ids (0-based within the context part), ascending
    sharpness: jax.Array  # sh [B, H, NB]
    order: jax.Array  # [B, H, NB] query blocks by descending sharpness; the first N_f take the full path


def _fraction(name: str, value: float, low_open: bool) -> float:
    ok = math.isfinite(value) and (0.0 < value if low_open else 0.0 <= value) and value <= 1.0
    if not ok:
        interval = "(0, 1]" if low_open else "[0, 1]"
        raise ValueError(f"{OP}: `{name}` = {value!r}, expected a number in {interval}")
    return float(value)


def isa_sizes(n: int, n_src: int, block: int, ctx_keep: float, full_frac: float, exact_frac: float) -> IsaSizes:
    """Checks the static arguments and derives every count from them."""
    if not isinstance(block, int) or block < 1:
        raise ValueError(f"{OP}: `block` = {block!r}, expected a positive int")
    if n % block:
        raise ValueError(f"{OP}: `block` = {block} does not divide the sequence length N = {n}")
    if not isinstance(n_src, int) or not block <= n_src <= n or n_src % block:
        raise ValueError(f"{OP}: `n_src` = {n_src!r}, expected a multiple of block = {block} in [{block}, {n}]"
                         " (the source/context boundary must fall on a block boundary)")
    ctx_keep = _fraction("ctx_keep", ctx_keep, low_open=False)
    full_frac = _fraction("full_frac", full_frac, low_open=False)
    exact_frac = _fraction("exact_frac", exact_frac, low_open=True)
    n_blocks, n_s = n // block, n_src // block
    n_c = n_blocks - n_s
    n_kept = math.floor(n_c * ctx_keep)
    n_pruned = n_s + n_kept
    return IsaSizes(block=block, n_blocks=n_blocks, n_src_blocks=n_s, n_ctx_blocks=n_c, n_kept=n_kept,
                    n_sharp_cols=max(1, math.floor(exact_frac * n_s)), n_full=math.floor(n_blocks * full_frac),
                    n_pruned_blocks=n_pruned, n_exact=min(n_pruned, max(1, math.floor(exact_frac * n_pruned))))


def to_blocks(x: jax.Array, block: int) -> jax.Array:
    """[B, N, H, D] -> [B, H, NB, b, D]."""
    b, n, h, d = x.shape
    return jnp.transpose(x, (0, 2, 1, 3)).reshape(b, h, n // block, block, d)


def from_blocks(x: jax.Array) -> jax.Array:
    """[B, H, NB, b, D] -> [B, N, H, D]."""
    b, h, nb, blk, d = x.shape
    return jnp.transpose(x.reshape(b, h, nb * blk, d), (0, 2, 1, 3))


def _top_k_ascending_ids(scores: jax.Array, k: int) -> jax.Array:
    """Ids of the k largest entries of the last axis (ties: lowest index), sorted ascending."""
    if k == 0:
        return jnp.zeros((*scores.shape[:-1], 0), jnp.int32)
    return jnp.sort(jax.lax.top_k(scores, k)[1], axis=-1)


def isa_plan(qb: jax.Array, kb: jax.Array, vb: jax.Array, sizes: IsaSizes) -> IsaPlan:
    """Pooled attention, context pre-selection and routing order from blocked q, k, v [B, H, NB, b, D].

    The decisions are integer arrays; they carry no gradient (the paper's backward holds them fixed).
    """
    q_mean, k_mean, v_mean = (x.astype(jnp.float32).mean(axis=3) for x in (qb, kb, vb))
    scale = 1.0 / math.sqrt(qb.shape[-1])
    probs = jax.nn.softmax(jnp.einsum("bhid,bhjd->bhij", q_mean, k_mean) * scale, axis=-1)
    pooled_out = jnp.einsum("bhij,bhjd->bhid", probs, v_mean)
    n_s = sizes.n_src_blocks
    decide = jax.lax.stop_gradient(probs)
    saliency = decide[..., :n_s, n_s:].sum(axis=2)
    kept = _top_k_ascending_ids(saliency, sizes.n_kept)
    sharpness = jax.lax.top_k(decide[..., :n_s], sizes.n_sharp_cols)[0].sum(axis=-1)
    order = jnp.argsort(-sharpness, axis=-1, stable=True)
    return IsaPlan(pooled_probs=probs, pooled_out=pooled_out, saliency=saliency, kept_ctx=kept,
                   sharpness=sharpness, order=order)


def gather_blocks(xb: jax.Array, ids: jax.Array) -> jax.Array:
    """xb [B, H, NB, b, D] at block ids [B, H, K] -> [B, H, K, b, D]."""
    return jnp.take_along_axis(xb, ids[..., None, None], axis=2)


def pruned_keys(kb: jax.Array, vb: jax.Array, plan: IsaPlan, sizes: IsaSizes) -> tuple[jax.Array, jax.Array]:
    """K', V' as blocks [B, H, NB', b, D]: every source block, then the kept context blocks."""
    n_s = sizes.n_src_blocks
    kept = plan.kept_ctx + n_s
    k_pruned = jnp.concatenate([kb[:, :, :n_s], gather_blocks(kb, kept)], axis=2)
    v_pruned = jnp.concatenate([vb[:, :, :n_s], gather_blocks(vb, kept)], axis=2)
    return k_pruned, v_pruned
