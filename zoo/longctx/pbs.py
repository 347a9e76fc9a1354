"""PBS-Attn: permuted block-sparse attention for prefill (Wang et al., arXiv 2510.21270).

Three phases, all in JAX, on q [B, T, H, D] and k, v [B, T, Hkv, D]:

1. `permutation`: inside each complete segment of `segment_size` keys, sort the keys by the attention mass
   the last query block gives them (an unmasked softmax over the complete segments, averaged over the
   block's queries and over the query heads of each key/value head). The tail (T mod segment_size) keeps
   its order. Queries are never permuted.
2. `select_blocks`: mean-pooled query blocks score mean-pooled (permuted) key blocks of strictly earlier
   segments; each query block keeps the smallest set of highest-scoring blocks whose pooled softmax mass
   reaches τ, plus the block holding original token 0 (the sink) and every block of its own segment.
3. `pbs_prefill`: exact softmax attention over the listed blocks of the permuted keys, with the causal
   mask on ORIGINAL positions (`kernels.block_sparse_attention`, `key_positions=`), outputs in the original
   query order.

Softmax-family mixers whose logits carry a separable term a_i + b_j (FoX's Λ_i − Λ_j, GOAT's recency slope)
pass it as `query_bias` / `key_bias` [B, T, H]: the kernel adds it to every logit, the permutation score and
the pooled block score add the (mean-pooled) key term; the query term is constant along each softmax row, so
it changes neither the ranking nor the selection. `original_token_mask` gives a plan's mask in the original
key order for mixers that apply it to materialized logits (FiX, circulation with a blend).

Prefill only: the permutation and the selection read the LAST query block, i.e. future tokens, so the
sparsity pattern of early queries depends on later ones (outputs never read a future key). Do not use it in
training or decode. τ = 1 lists every causal block and equals dense causal attention for any permutation.

Deviations from the paper's code (read from the authors' code): GQA keeps the key/value heads and sorts each
by the mean score of its query heads (the spec's per-group variant; the repository repeats KV heads); the
block estimate is the spec's mean pooling (no antidiagonal scoring); `max_blocks` optionally caps the list
length (a static budget for the XLA path, whose cost follows the list length), keeping the diagonal, the
own segment, the sink and then the highest-scoring blocks; no packed `segment_ids`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.kernels.block_sparse_attention import lists as bsa_lists
from icml26zoo.kernels.block_sparse_attention.api import block_sparse_attention
from icml26zoo.kernels.block_sparse_attention.reference import token_mask
from icml26zoo.kernels.helpers import einsum_f32, pad_time
from icml26zoo.validation import check_int, check_interval

OP = "pbs_attn"


@dataclasses.dataclass(frozen=True)
class PBSOptions:
    """PBS-Attn settings. tau in (0, 1]; block_size C; segment_size a multiple of C; max_blocks None (no cap)
    or the list length S (≥ segment_size / C + 1); permute False gives plain mean-pooled block sparsity."""

    tau: float = 0.9
    block_size: int = 128
    segment_size: int = 256
    max_blocks: int | None = None
    permute: bool = True
    force_first_block: bool = True

    def __post_init__(self) -> None:
        check_options(self)


class PBSPlan(NamedTuple):
    """perm [B, Hkv, T] int32: the original position of the key in each slot; block_indices [B, H, N, S]
    int32 (-1 = unused); density: listed blocks / causal blocks (a scalar, computed blocks counted)."""

    perm: jax.Array
    block_indices: jax.Array
    density: jax.Array


def check_options(o: PBSOptions) -> None:
    """ValueError naming the bad field: tau in (0, 1], sizes positive ints, segment a multiple of block."""
    check_interval(f"{OP}: `tau` (cumulative attention mass)", o.tau, 0, 1, closed="right")
    check_int(f"{OP}: `block_size`", o.block_size)
    check_int(f"{OP}: `segment_size`", o.segment_size)
    if o.segment_size % o.block_size:
        raise ValueError(f"{OP}: `segment_size` must be a multiple of block_size = {o.block_size}, "
                         f"got {o.segment_size!r}")
    if o.max_blocks is not None:
        check_int(f"{OP}: `max_blocks` (a whole segment of blocks plus the sink)", o.max_blocks,
                  minimum=o.segment_size // o.block_size + 1)


def _check_qkv(q: jax.Array, k: jax.Array, v: jax.Array | None) -> None:
    if q.ndim != 4 or k.ndim != 4 or k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3] \
            or q.shape[2] % k.shape[2]:
        raise ValueError(f"{OP}: `q` {tuple(q.shape)} and `k` {tuple(k.shape)}: expected q [B, T, H, D] and "
                         "k [B, T, Hkv, D] with Hkv dividing H")
    if v is not None and v.shape != k.shape:
        raise ValueError(f"{OP}: `v` has shape {tuple(v.shape)}; expected the shape of k {tuple(k.shape)}")


def _scale(q: jax.Array, scale: float | None) -> float:
    return q.shape[3] ** -0.5 if scale is None else float(scale)


def permutation(q: jax.Array, k: jax.Array, *, block_size: int, segment_size: int,
                scale: float | None = None, key_bias: jax.Array | None = None) -> jax.Array:
    """Phase 1: perm [B, Hkv, T] int32, each complete segment's keys by descending last-block attention mass.

    key_bias: [B, T, H] or None, added to the last block's logits (the mixer's key-side logit term).
    """
    b, t, h, _ = q.shape
    hkv = k.shape[2]
    complete = (t // segment_size) * segment_size
    identity = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, hkv, t))
    if complete == 0:
        return identity
    q_last = q[:, max(0, t - block_size):].reshape(b, -1, hkv, h // hkv, q.shape[3])
    logits = einsum_f32("bqkgd,bskd->bkgqs", q_last, k[:, :complete]) * _scale(q, scale)
    if key_bias is not None:
        per_head = key_bias[:, :complete].astype(jnp.float32).reshape(b, complete, hkv, h // hkv)
        logits = logits + jnp.transpose(per_head, (0, 2, 3, 1))[:, :, :, None, :]
    score = jnp.mean(jax.nn.softmax(logits, axis=-1), axis=(2, 3))  # [B, Hkv, complete]
    per_segment = score.reshape(b, hkv, -1, segment_size)
    order = jnp.argsort(-per_segment, axis=-1, stable=True).astype(jnp.int32)
    starts = jnp.arange(0, complete, segment_size, dtype=jnp.int32)[:, None]
    sorted_part = (order + starts).reshape(b, hkv, complete)
    return jnp.concatenate([sorted_part, identity[..., complete:]], axis=-1)


def permute_keys(x: jax.Array, perm: jax.Array) -> jax.Array:
    """x [B, T, Hkv, D] in slot order: out[b, s, h] = x[b, perm[b, h, s], h]."""
    return jnp.take_along_axis(x, jnp.swapaxes(perm, 1, 2)[..., None], axis=1)


def permute_key_bias(key_bias: jax.Array, perm: jax.Array) -> jax.Array:
    """key_bias [B, T, H] in slot order: query head h takes the permutation of its kv head h // (H // Hkv)."""
    per_head = jnp.repeat(perm, key_bias.shape[2] // perm.shape[1], axis=1)  # [B, H, T]
    return jnp.take_along_axis(key_bias, jnp.swapaxes(per_head, 1, 2), axis=1)


def original_token_mask(plan: PBSPlan, length: int, block_size: int) -> jax.Array:
    """The plan's token mask in ORIGINAL key order: bool [B, H, T, T], [b, h, i, j] = query i reads key j.

    Causal on original positions (j ≤ i) and limited to the listed blocks of the permuted keys.
    """
    slots = token_mask(plan.block_indices, length, block_size, None, plan.perm)  # [B, H, Tq, slot]
    heads = slots.shape[1]
    inverse = jnp.argsort(jnp.repeat(plan.perm, heads // plan.perm.shape[1], axis=1), axis=-1)  # key -> slot
    return jnp.take_along_axis(slots, inverse[:, :, None, :], axis=-1)


def _pooled(x: jax.Array, block_size: int) -> jax.Array:
    """[B, T, H, D] -> block means [B, N, H, D] (padded steps count as zeros, as in the paper's code)."""
    b, t, h, d = x.shape
    n = bsa_lists.num_blocks(t, block_size)
    return jnp.mean(pad_time(x.astype(jnp.float32), n * block_size - t).reshape(b, n, block_size, h, d), axis=2)


def _mass_selection(scores: jax.Array, candidate: jax.Array, tau: float) -> jax.Array:
    """The smallest highest-scoring candidate set per row with softmax mass ≥ tau: bool like `scores`."""
    logits = jnp.where(candidate, scores, -jnp.inf)
    probs = jnp.where(candidate, jax.nn.softmax(logits, axis=-1), 0.0)  # rows without candidates: all 0
    order = jnp.argsort(-probs, axis=-1, stable=True)
    sorted_p = jnp.take_along_axis(probs, order, axis=-1)
    before = jnp.cumsum(sorted_p, axis=-1) - sorted_p
    # τ = 1 keeps every candidate, even those whose mass rounds to zero (the dense limit is exact).
    keep_sorted = (before < tau) | (tau >= 1.0)
    keep = jnp.take_along_axis(keep_sorted, jnp.argsort(order, axis=-1), axis=-1)
    return keep & candidate


def select_blocks(q: jax.Array, k: jax.Array, *, options: PBSOptions, scale: float | None = None,
                  key_bias: jax.Array | None = None) -> PBSPlan:
    """Phases 1-2: the permutation and the block lists of one prefill.

    q [B, T, H, D]; k [B, T, Hkv, D] (original order); key_bias [B, T, H] or None (original order), the
    mixer's key-side logit term, added to the permutation score and (block-mean) to the pooled scores.
    Returns a `PBSPlan` whose lists index the permuted keys (`permute_keys(k, plan.perm)`).
    """
    _check_qkv(q, k, None)
    c, seg_len = options.block_size, options.segment_size
    b, t, h, _ = q.shape
    hkv, n = k.shape[2], bsa_lists.num_blocks(t, c)
    perm = (permutation(q, k, block_size=c, segment_size=seg_len, scale=scale, key_bias=key_bias)
            if options.permute else jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, hkv, t)))
    q_bar = _pooled(q, c)
    k_bar = jnp.repeat(_pooled(permute_keys(k, perm), c), h // hkv, axis=2)
    scores = einsum_f32("bihd,bjhd->bhij", q_bar, k_bar) * _scale(q, scale)
    if key_bias is not None:
        pooled_bias = _pooled(permute_key_bias(key_bias, perm)[..., None], c)[..., 0]  # [B, N, H]
        scores = scores + jnp.transpose(pooled_bias, (0, 2, 1))[:, :, None, :]

    blk = jnp.arange(n)
    seg_of = (blk * c) // seg_len
    candidate = (seg_of[None, :] < seg_of[:, None])[None, None]                    # [1, 1, N, N]
    selected = _mass_selection(scores, candidate, float(options.tau))
    # Blocks of a permuted (complete) segment can hold keys before the query though they sit after it.
    permuted_block = (blk * c < (t // seg_len) * seg_len) & options.permute
    own = (seg_of[None, :] == seg_of[:, None]) & ((blk[None, :] <= blk[:, None]) | permuted_block[None, :])
    sink = jnp.zeros_like(selected)
    if options.force_first_block:
        sink_block = jnp.argmax(perm == 0, axis=-1) // c                            # [B, Hkv]
        sink_block = jnp.repeat(sink_block, h // hkv, axis=1)[:, :, None, None]
        sink = (blk[None, None, None, :] == sink_block) & candidate
    diag = blk[None, :] == blk[:, None]
    priority = jnp.where(selected, 1.0 + jax.nn.softmax(jnp.where(candidate, scores, -jnp.inf), -1), -1.0)
    priority = jnp.where(sink, 2.5, priority)
    priority = jnp.where(own[None, None], 3.0, priority)
    priority = jnp.where(diag[None, None], 4.0, priority)
    slots = n if options.max_blocks is None else min(options.max_blocks, n)
    value, index = jax.lax.top_k(jnp.nan_to_num(priority, nan=1.0), slots)
    block_indices = bsa_lists.normalize(jnp.where(value > 0, index, -1))[0]
    causal_blocks = jnp.float32(b * h * n * (n + 1) / 2)
    return PBSPlan(perm=perm, block_indices=block_indices,
                   density=jnp.sum(block_indices >= 0, dtype=jnp.float32) / causal_blocks)


def pbs_prefill(q: jax.Array, k: jax.Array, v: jax.Array, *, tau: float = 0.9, block_size: int = 128,
                segment_size: int = 256, max_blocks: int | None = None, permute: bool = True,
                force_first_block: bool = True, scale: float | None = None, implementation: str | None = None,
                return_plan: bool = False) -> jax.Array | tuple[jax.Array, PBSPlan]:
    """PBS-Attn causal prefill attention (see the module docstring).

    Args:
      q: [B, T, H, D]. k, v: [B, T, Hkv, D] (Hkv divides H), original order.
      tau: cumulative pooled attention mass each query block keeps, in (0, 1]; 1 is dense attention.
      block_size: C, the query and key block. segment_size: the permutation segment, a multiple of C.
      max_blocks: None, or a cap S on the key blocks per query block (static cost of the XLA path).
      permute: False skips phase 1 (plain mean-pooled block sparsity, MInference-style).
      force_first_block: also list the block holding original token 0 (attention sink).
      scale: logit scale; None means D**-0.5. implementation: the block-sparse op's ("xla" or "reference").
      return_plan: also return the `PBSPlan` (permutation, lists, density).

    Returns:
      o [B, T, H, D] in q.dtype (original query order), and the plan when `return_plan`.
    """
    options = PBSOptions(tau=tau, block_size=block_size, segment_size=segment_size, max_blocks=max_blocks,
                         permute=permute, force_first_block=force_first_block)
    return prefill(q, k, v, options=options, scale=scale, implementation=implementation,
                   return_plan=return_plan)


def prefill(q: jax.Array, k: jax.Array, v: jax.Array, *, options: PBSOptions, scale: float | None = None,
            implementation: str | None = None, return_plan: bool = False, query_bias: jax.Array | None = None,
            key_bias: jax.Array | None = None) -> jax.Array | tuple[jax.Array, PBSPlan]:
    """`pbs_prefill` with a `PBSOptions` (the form the softmax-family mixers call).

    q [B, T, H, D]; k [B, T, Hkv, D]; v [B, T, Hkv, Dv]; query_bias, key_bias [B, T, H] or None: the
    mixer's separable logit term a_i + b_j (original order). Returns o [B, T, H, Dv] (and the plan).
    """
    _check_qkv(q, k, None)
    if v.ndim != 4 or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"{OP}: `v` has shape {tuple(v.shape)}; expected [B, T, Hkv, Dv] with [B, T, Hkv] = "
                         f"{tuple(k.shape[:3])}")
    plan = select_blocks(q, k, options=options, scale=scale, key_bias=key_bias)
    slot_bias = None if key_bias is None else permute_key_bias(key_bias, plan.perm)
    o = block_sparse_attention(q, permute_keys(k, plan.perm), permute_keys(v, plan.perm), plan.block_indices,
                               block_size=options.block_size, scale=scale, key_positions=plan.perm,
                               query_bias=query_bias, key_bias=slot_bias, implementation=implementation)
    return (o, plan) if return_plan else o


def expected_dense_cost(length: int, block_size: int) -> int:
    """The number of causal blocks N(N + 1)/2 of one head (the density denominator)."""
    n = math.ceil(length / block_size)
    return n * (n + 1) // 2


PREFILL_MODES = ("dense", "pbs")


@dataclasses.dataclass(frozen=True)
class PBSPrefillOptions:
    """Mixer options of the PBS-Attn prefill, mixed into a softmax mixer's options dataclass.

    prefill: "dense" (default) or "pbs"; pbs_tau, pbs_block, pbs_segment, pbs_max_blocks: `PBSOptions`'
    tau, block_size, segment_size, max_blocks.
    """

    prefill: str = "dense"
    pbs_tau: float = 0.9
    pbs_block: int = 128
    pbs_segment: int = 256
    pbs_max_blocks: int | None = None


class PBSPrefill:
    """The prefill switch a softmax mixer holds: PBS-Attn for a multi-token chunk written into an empty cache.

    Only the cached path uses it (prefill then decode); the training / scoring forward stays dense, since
    PBS's sparsity pattern reads future tokens (module docstring). Chunked prefill into a non-empty cache
    and single-token decode steps run the mixer's dense attention.
    """

    def __init__(self, options: PBSOptions | None) -> None:
        self.options = options

    @classmethod
    def from_options(cls, owner: str, options: PBSPrefillOptions) -> PBSPrefill:
        """Validated settings (ValueError naming `owner` and the option) from a mixer's options."""
        if options.prefill not in PREFILL_MODES:
            raise ValueError(f"{owner} option 'prefill' is {options.prefill!r}; expected one of {PREFILL_MODES}")
        if options.prefill == "dense":
            return cls(None)
        try:
            pbs = PBSOptions(tau=options.pbs_tau, block_size=options.pbs_block, segment_size=options.pbs_segment,
                             max_blocks=options.pbs_max_blocks)
        except ValueError as err:
            raise ValueError(f"{owner} options pbs_*: {err}") from None
        return cls(pbs)

    @property
    def enabled(self) -> bool:
        return self.options is not None

    def cached(self, q: jax.Array, k: jax.Array, v: jax.Array, index: jax.Array, dense: Callable[[], jax.Array],
               *, scale: float | None = None, query_bias: jax.Array | None = None,
               key_bias: jax.Array | None = None) -> jax.Array:
        """q [B, T', H, D], the chunk's k [B, T', Hkv, D], v [B, T', Hkv, Dv] (cache dtype), the cache's write
        index, and the mixer's dense attention `dense()` -> [B, T', H, Dv]: PBS when enabled, T' > 1 and
        index == 0. scale, query_bias, key_bias [B, T', H]: the mixer's logit scale and separable terms."""
        if self.options is None or q.shape[1] == 1:
            return dense()
        sparse = lambda: prefill(q, k, v, options=self.options, scale=scale, query_bias=query_bias,
                                 key_bias=key_bias).astype(q.dtype)
        return jax.lax.cond(index == 0, sparse, lambda: dense().astype(q.dtype))

    def mask(self, q: jax.Array, k: jax.Array, index: jax.Array, num_slots: int, *, scale: float | None = None,
             key_bias: jax.Array | None = None) -> jax.Array | None:
        """For mixers that mask materialized logits: the PBS token mask of a chunk written into an empty cache,
        bool [B, H, T', num_slots] (slots past the chunk False), all True when index > 0; None when disabled
        or T' = 1. q [B, T', H, D], k [B, T', Hkv, D], key_bias [B, T', H] or None."""
        if self.options is None or q.shape[1] == 1:
            return None
        length = q.shape[1]
        plan = select_blocks(q, k, options=self.options, scale=scale, key_bias=key_bias)
        chunk = original_token_mask(plan, length, self.options.block_size)
        padded = jnp.pad(chunk, ((0, 0), (0, 0), (0, 0), (0, num_slots - length)))
        return padded | (index > 0)
