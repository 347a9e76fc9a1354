"""Public entry point of block-sparse attention: validation and `implementation=` dispatch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common import checks, segments
from icml26zoo.kernels._dispatch import ALL_BACKENDS, XLA_EVERYWHERE, select_implementation
from icml26zoo.kernels.block_sparse_attention import lists, pallas, reference, xla

# name -> (function, backends it can run on). Pallas picks its lowering per platform when lowered
# (kernels/_common/lowering.py): interpreted on CPU, Triton on GPU, Mosaic on TPU.
_IMPLEMENTATIONS: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "reference": (reference.block_sparse_attention, ALL_BACKENDS),
    "xla": (xla.block_sparse_attention, ALL_BACKENDS),
    "pallas": (pallas.block_sparse_attention, ALL_BACKENDS),
}
# XLA until a run on the hardware shows the Pallas kernels correct and faster.
_DEFAULT = XLA_EVERYWHERE
_NAME = lists.OP


def _bad(name: str, x: jax.Array, expected: str) -> ValueError:
    return ValueError(f"{_NAME}: `{name}` has shape {tuple(x.shape)} (dtype {x.dtype}); expected {expected}")


def _check_inputs(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None) -> None:
    """Raise ValueError naming the argument, its shape and the expected shape."""
    checks.require_arrays(_NAME, {"q": q, "k": k, "v": v, "segment_ids": segment_ids}, optional=("segment_ids",))
    if q.ndim != 4 or q.shape[1] < 1:
        raise _bad("q", q, "[B, T, H, D] with T ≥ 1")
    checks.check_gqa_keys(q, k, _bad)
    if v.ndim != 4 or v.shape[:3] != k.shape[:3]:
        raise _bad("v", v, f"[B, T, Hkv, Dv] with [B, T, Hkv] = {tuple(k.shape[:3])} (those of k)")
    if not jnp.issubdtype(q.dtype, jnp.floating) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"{_NAME}: q, k, v must share one floating dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    checks.check_segment_ids(_NAME, segment_ids, q.shape[0], q.shape[1])


def block_sparse_attention(q: jax.Array, k: jax.Array, v: jax.Array, block_indices: jax.Array, *,
                           block_size: int, scale: float | None = None, segment_ids: jax.Array | None = None,
                           key_positions: jax.Array | None = None, query_bias: jax.Array | None = None,
                           key_bias: jax.Array | None = None,
                           implementation: None | str | Sequence[str] = None) -> jax.Array:
    """Causal softmax attention over a per-query-block list of key blocks (exact softmax on the union).

    Query t attends to key s iff s ≤ t, key block s // C is listed for query block t // C, and (with
    `segment_ids`) both are in one segment. With every causal block listed (`lists.causal_lists`) this is
    dense causal attention.

    Args:
      q: [B, T, H, D]. k: [B, T, Hkv, D], v: [B, T, Hkv, Dv], same dtype; query head h reads kv head
        h // (H // Hkv). Dv ≠ D is not taken by "pallas".
      block_indices: int [B, H, N, S], N = ceil(T / block_size): for query block i of head h, the key
        blocks it reads, each 0 ≤ j ≤ i, the diagonal block i included, no block twice, -1 for unused
        slots; any order (see `lists.py`). Causality and the diagonal are checked on concrete arrays
        (skipped under jit). Blocks are square: one `block_size` for queries and keys.
      block_size: the block C (an int ≥ 1); T is zero-padded to N·C. The Pallas path needs a C its
        tiles accept (a power of two ≥ 16 on GPU layouts, a multiple of 16 on TPU).
      scale: logit scale, positive; None means D**-0.5.
      segment_ids: [B, T] int for packed sequences; no attention across segments.
      key_positions: [B, Hkv, T] int or None: the original position of the key in each slot when the
        keys (and values) were permuted (PBS-Attn, `icml26zoo.longctx.pbs`). The causal mask then compares
        key positions with query positions, so a listed block j > i is legal; every query must still see
        at least one key (PBS lists its whole own segment). Not with `segment_ids`, and not on "pallas".
      query_bias, key_bias: [B, T, H] floating or None: separable additive logit terms, the logit of query t
        and key slot s being scale·q_t·k_s + query_bias_t + key_bias_s (per query head; key_bias in key-slot
        order, i.e. permuted with the keys). They carry the rank-1 biases of the softmax-family mixers
        (FoX's Λ_t − Λ_s, GOAT's recency slope); the query term cancels in the softmax but is kept so that
        the logits are the mixer's. Differentiable; not on "pallas".
      implementation: None (XLA), "reference", "xla", "pallas", or a sequence tried in order.

    Returns:
      o: [B, T, H, D] in q.dtype.

    Segments are contiguous runs of equal ids, as in every op (ids 1, 2, 1 are three segments). A NaN or
    inf in one packed segment stays in it: positions holding one (in q, k, v or a bias) are zeroed before
    any path runs and that segment's outputs from there on are NaN (`segments.quarantine`, docs/numerics.md).
    """
    _check_inputs(q, k, v, segment_ids)
    lists.check_block_size(block_size, q.shape[1])
    lists.check_lists(block_indices, q.shape[0], q.shape[2], q.shape[1], int(block_size),
                      permuted=key_positions is not None)
    checks.check_scale(_NAME, scale)
    fn = select_implementation(_NAME, implementation, _IMPLEMENTATIONS, _DEFAULT)
    if fn is pallas.block_sparse_attention and v.shape != k.shape:
        raise _bad("v", v, f"the shape of k {tuple(k.shape)} on implementation='pallas' (Dv = D)")
    extra = _checked_biases(q, query_bias, key_bias, fn)
    if key_positions is not None:
        _check_key_positions(key_positions, k, segment_ids, fn)
    clean, _, tainted = segments.quarantine({"q": q, "k": k, "v": v, **extra}, segment_ids)
    if key_positions is not None:
        extra["key_positions"] = jnp.asarray(key_positions).astype(jnp.int32)
        tainted = tainted | _tainted_by_key_position(k, v, key_bias, extra["key_positions"])
    # Segments are contiguous runs (ids 1, 2, 1 are three segments): the paths compare the run counts.
    runs = None if segment_ids is None else segments.segment_counts(segment_ids, *segment_ids.shape)
    o = fn(clean.pop("q"), clean.pop("k"), clean.pop("v"), jnp.asarray(block_indices).astype(jnp.int32),
           block_size=int(block_size), scale=scale, segment_ids=runs, **{**extra, **clean})
    return segments.poison(o, tainted)


def _tainted_by_key_position(k: jax.Array, v: jax.Array, key_bias: jax.Array | None,
                             key_positions: jax.Array) -> jax.Array:
    """[B, T] bool: the positions at or after the position of a non-finite key slot (permuted keys).

    `segments.quarantine` reads the slots in slot order; a permuted key in slot s sits at position
    key_positions[s], which queries from there on see: those are tainted too. key_positions [B, Hkv, T].
    """
    bad_slots = segments.nonfinite_positions([k, v, key_bias])  # [B, T] in slot order
    batch, length = bad_slots.shape
    rows = jnp.arange(batch)[:, None, None]
    # A clean slot writes out of range and is dropped; every kv head's position of a bad slot is hit.
    where = jnp.where(bad_slots[:, None, :], key_positions, length)
    hit = jnp.zeros((batch, length), bool).at[rows, where].set(True, mode="drop")
    return segments.tainted_positions(hit, None)


def _checked_biases(q: jax.Array, query_bias: jax.Array | None, key_bias: jax.Array | None,
                    fn: Callable) -> dict[str, jax.Array]:
    """query_bias, key_bias [B, T, H] floating, on a path that takes them -> the keyword arguments to pass."""
    given = {name: x for name, x in (("query_bias", query_bias), ("key_bias", key_bias)) if x is not None}
    checks.require_arrays(_NAME, given)
    for name, x in given.items():
        if x.shape != q.shape[:3] or not jnp.issubdtype(x.dtype, jnp.floating):
            raise _bad(name, x, f"[B, T, H] = {list(q.shape[:3])}, floating")
        if fn is pallas.block_sparse_attention:
            raise ValueError(f"{_NAME}: `{name}` is not supported by implementation='pallas'; expected "
                             "implementation='xla' or 'reference'")
    return given


def _check_key_positions(key_positions: jax.Array, k: jax.Array, segment_ids: jax.Array | None,
                         fn: Callable) -> None:
    """key_positions [B, Hkv, T] int, without segment_ids, on a path that takes it."""
    b, t, hkv, _ = k.shape
    checks.require_arrays(_NAME, {"key_positions": key_positions})
    if key_positions.shape != (b, hkv, t) or not jnp.issubdtype(key_positions.dtype, jnp.integer):
        raise _bad("key_positions", key_positions, f"[B, Hkv, T] = [{b}, {hkv}, {t}], integer")
    if segment_ids is not None:
        raise ValueError(f"{_NAME}: `key_positions` with `segment_ids` is not supported (a permuted key's "
                         "segment is not its slot's); expected one of them to be None")
    if fn is pallas.block_sparse_attention:
        raise ValueError(f"{_NAME}: `key_positions` is not supported by implementation='pallas'; expected "
                         "implementation='xla' or 'reference'")
