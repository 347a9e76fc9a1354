"""Block lists of block-sparse attention: validation, normalization, transposition and common patterns.

Format (the op's contract): `block_indices` int32 [B, H, N, S] with N = Tp / C query blocks (Tp = T padded
to a multiple of the block C) and S ≥ 1 slots per query block. Entry [b, h, i, s] is a key block index
0 ≤ j ≤ i, or -1 for an unused slot. Every list holds its own diagonal block i (so every query sees at
least itself: no empty softmax row), and no key block twice. The order of the slots does not matter: the
paths use `normalize`, which sorts each list descending (the diagonal first, the -1 slots last) and counts
the used slots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.kernels._common import checks

OP = "block_sparse_attention"


def num_blocks(length: int, block_size: int) -> int:
    """N = ceil(T / C): the number of query (and key) blocks of a length-T sequence."""
    return -(-length // block_size)


def check_block_size(block_size: object, length: int) -> None:
    """block_size is a Python int ≥ 1 (ValueError naming `block_size` otherwise)."""
    if not checks.is_int(block_size) or block_size < 1:
        raise ValueError(f"{OP}: `block_size` is {block_size!r}; expected an int ≥ 1 (the query and key block)")


def check_lists(block_indices: jax.Array, batch: int, heads: int, length: int, block_size: int,
                permuted: bool = False) -> None:
    """Shape, dtype and (on concrete arrays) values of `block_indices`; ValueError naming it otherwise.

    permuted: the keys carry `key_positions` (permuted keys), so a listed block j > i is legal (the
    token-level mask on positions keeps causality); entries must still be -1 or a block 0 ≤ j < N.
    """
    n = num_blocks(length, block_size)
    if (not isinstance(block_indices, jax.Array | np.ndarray) or block_indices.ndim != 4
            or block_indices.shape[:3] != (batch, heads, n) or block_indices.shape[3] < 1):
        shape = getattr(block_indices, "shape", type(block_indices).__name__)
        raise ValueError(
            f"{OP}: `block_indices` has shape {shape}; expected [B, H, N, S] = [{batch}, {heads}, {n}, S ≥ 1] "
            f"with N = ceil(T / block_size) = ceil({length} / {block_size}) (block_size must tile the padded "
            f"length {n * block_size} the lists were built for)")
    if not jnp.issubdtype(block_indices.dtype, jnp.integer):
        raise ValueError(f"{OP}: `block_indices` has dtype {block_indices.dtype}; expected an integer dtype")
    if checks.is_concrete(block_indices):
        _check_values(np.asarray(block_indices), permuted)


def _check_values(idx: np.ndarray, permuted: bool) -> None:
    """Entries in [-1, i] (causal; [-1, N) when permuted), the diagonal present, no duplicates."""
    n = idx.shape[2]
    query_block = np.arange(n)[None, None, :, None]
    bad = (idx < -1) | (idx > (n - 1 if permuted else query_block))
    if bad.any():
        b, h, i, s = np.argwhere(bad)[0]
        raise ValueError(
            f"{OP}: `block_indices` is not causal: entry [{b}, {h}, {i}, {s}] = {idx[b, h, i, s]} lists a key "
            f"block after query block {i} (or below -1); expected -1 or a key block 0 ≤ j ≤ {i}")
    has_diag = (idx == query_block).any(axis=-1)
    if not has_diag.all():
        b, h, i = np.argwhere(~has_diag)[0]
        raise ValueError(f"{OP}: `block_indices` [{b}, {h}, {i}] = {idx[b, h, i].tolist()} lacks its diagonal block "
                         f"{i}; expected every list to hold its own query block (each query sees itself)")
    srt = np.sort(idx, axis=-1)
    dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
    if dup.any():
        b, h, i, _ = np.argwhere(dup)[0]
        raise ValueError(f"{OP}: `block_indices` [{b}, {h}, {i}] = {idx[b, h, i].tolist()} lists a key block "
                         "twice; expected distinct blocks (-1 pads unused slots)")


def normalize(block_indices: jax.Array) -> tuple[jax.Array, jax.Array]:
    """[B, H, N, S] lists -> (int32 lists sorted descending, -1 slots last; counts [B, H, N] int32)."""
    idx = -jnp.sort(-block_indices.astype(jnp.int32), axis=-1)
    return idx, jnp.sum(idx >= 0, axis=-1, dtype=jnp.int32)


def block_mask(block_indices: jax.Array, num_key_blocks: int) -> jax.Array:
    """[B, H, N, S] lists -> bool [B, H, N, Nk]: whether query block i lists key block j."""
    hot = block_indices[..., None] == jnp.arange(num_key_blocks, dtype=jnp.int32)
    return jnp.any(hot, axis=-2)


def transpose(block_indices: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The key-major lists of the backward: for each key block j, the query blocks that list it.

    [B, H, N, S] -> (int32 [B, H, N, N] sorted descending with -1 slots last, counts [B, H, N] int32).
    """
    n = block_indices.shape[2]
    listed = jnp.swapaxes(block_mask(block_indices, n), -1, -2)  # [B, H, Nk, Nq]
    return normalize(jnp.where(listed, jnp.arange(n, dtype=jnp.int32), -1))


def from_mask(mask: jax.Array) -> jax.Array:
    """bool [B, H, N, N] block mask (True = computed) -> lists [B, H, N, N] (-1 for unused slots).

    The mask is intersected with the causal blocks and the diagonal is always added.
    """
    n = mask.shape[-1]
    i = jnp.arange(n)
    keep = (mask & (i[None, :] <= i[:, None])) | (i[None, :] == i[:, None])
    return normalize(jnp.where(keep, i.astype(jnp.int32), -1))[0]


def causal_lists(batch: int, heads: int, length: int, block_size: int) -> jax.Array:
    """Every causal key block for every query block (density 1): [B, H, N, N] int32."""
    n = num_blocks(length, block_size)
    return from_mask(jnp.ones((batch, heads, n, n), bool))


def random_lists(key: jax.Array, batch: int, heads: int, length: int, block_size: int,
                 density: float) -> jax.Array:
    """Random causal lists: the diagonal plus each earlier block with probability `density`: [B, H, N, N]."""
    n = num_blocks(length, block_size)
    return from_mask(jax.random.bernoulli(key, density, (batch, heads, n, n)))


def density(block_indices: jax.Array) -> jax.Array:
    """The fraction of causal blocks listed (scalar float32): 1 for `causal_lists`."""
    n = block_indices.shape[2]
    listed = jnp.sum(block_indices >= 0, dtype=jnp.float32)
    return listed / jnp.float32(block_indices.shape[0] * block_indices.shape[1] * n * (n + 1) / 2)
