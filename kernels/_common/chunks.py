"""Chunk layout and chunk-input preparation shared by the chunked recurrent ops (delta rule, momentum delta rule).

A sequence `[B, T, H, ...]` is padded with identity steps to `N * C` steps and cut into N chunks of C steps,
either batch-major `[B, H, N, C, ...]` or chunk-major `[N, B, H, C, ...]` (the chunk axis leads, so a
`lax.scan` over chunks needs no transposes).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.layout import pad_time, padded_length
from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels._common.segments import segment_counts

# Chunk lengths the chunked paths accept: powers of two (the UT solve's block doubling), small enough to keep
# the [C, C] products cheap.
CHUNK_SIZES = (16, 32, 64, 128)


def to_chunks(x: jax.Array, n: int, c: int) -> jax.Array:
    """[B, N*C, H, ...] -> [B, H, N, C, ...]."""
    b, _, h = x.shape[:3]
    x = x.reshape((b, n, c, h) + x.shape[3:])
    return jnp.moveaxis(x, 3, 1)


def to_chunk_major(x: jax.Array, n: int, c: int) -> jax.Array:
    """[B, N*C, H, ...] -> [N, B, H, C, ...]."""
    b, _, h = x.shape[:3]
    x = x.reshape((b, n, c, h) + x.shape[3:])
    return jnp.transpose(x, (1, 0, 3, 2) + tuple(range(4, x.ndim)))


def prefix_sum(x: jax.Array, axis: int, exclusive: bool = False) -> jax.Array:
    """(Exclusive) prefix sum along a chunk axis of x, as one matmul with a triangular 0/1 matrix.

    XLA:CPU lowers `jnp.cumsum` to a reduce_window that is slow on the [C, C, K] segment sums, and an
    associative scan bloats compile time; a [C, C] 0/1 matmul is one op. Callers sum log-gates <= 0, so
    there is no cancellation.
    """
    c = x.shape[axis]
    tri = jnp.tril(jnp.ones((c, c), x.dtype), -1 if exclusive else 0)
    return jnp.moveaxis(jnp.tensordot(tri, jnp.moveaxis(x, axis, 0), axes=1, precision=HIGHEST), 0, axis)


def gate_rows(g: jax.Array | None, shape: tuple[int, int, int, int]) -> jax.Array:
    """Log-decay g (None, [B, T, H] or [B, T, H, K]) as [B, T, H, Kg] float32, Kg = 1 or K; None is zeros.

    `shape` is the `[B, T, H, K]` shape of q.
    """
    if g is None:
        return jnp.zeros(shape[:3] + (1,), jnp.float32)
    g = g.astype(jnp.float32)
    return g[..., None] if g.ndim == 3 else g


class ChunkInputs(NamedTuple):
    """Padded, chunked float32 inputs before any decay is formed, layout [B, H, N, C, ...] as shown, or
    [N, B, H, C, ...] (run [N, B, 1, C], run_in [N, B, 1]) when chunked with chunk_major."""

    q: jax.Array  # [B,H,N,C,K], already times scale
    k: jax.Array  # [B,H,N,C,K]
    v: jax.Array  # [B,H,N,C,V]
    beta: jax.Array  # [B,H,N,C]
    gc: jax.Array  # [B,H,N,C,Kg] log-gates (0 on padded steps)
    run: jax.Array  # [B,1,N,C] segment-run index of every step
    run_in: jax.Array  # [B,1,N] run index of the step before each chunk


def chunk_inputs(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, g: jax.Array | None,
                 scale: float | None, segment_ids: jax.Array | None, chunk_size: int,
                 chunk_major: bool = False) -> ChunkInputs:
    """Casts to float32, pads T to a multiple of chunk_size (identity steps) and chunks.

    q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H]; g: None | [B, T, H] | [B, T, H, K];
    segment_ids: [B, T] | None; scale multiplies q (None means K**-0.5).
    Layout [B, H, N, C, ...] (run [B, 1, N, C], run_in [B, 1, N]), or with chunk_major [N, B, H, C, ...]
    (run [N, B, 1, C], run_in [N, B, 1]).
    """
    bsz, seqlen, _, dk = q.shape
    c = chunk_size
    n = padded_length(seqlen, c) // c
    pad = n * c - seqlen
    scale = dk**-0.5 if scale is None else scale
    f32 = lambda x: x.astype(jnp.float32)
    # Padded steps are identities: beta = 0, g = 0 (zeros), and they stay in the row's last segment.
    run = pad_time(segment_counts(segment_ids, bsz, seqlen), pad, mode="edge").reshape(bsz, 1, n, c)
    if chunk_major:
        run = jnp.transpose(run, (2, 0, 1, 3))
    n_axis = 0 if chunk_major else 2
    first = jnp.zeros_like(jax.lax.slice_in_dim(run[..., 0], 0, 1, axis=n_axis))
    run_in = jnp.concatenate([first, jax.lax.slice_in_dim(run[..., -1], 0, n - 1, axis=n_axis)], axis=n_axis)
    layout = to_chunk_major if chunk_major else to_chunks
    chunk = lambda x: layout(pad_time(x, pad), n, c)
    return ChunkInputs(q=chunk(f32(q) * jnp.float32(scale)), k=chunk(f32(k)), v=chunk(f32(v)),
                       beta=chunk(f32(beta)[..., None])[..., 0], gc=chunk(gate_rows(g, q.shape)), run=run,
                       run_in=run_in)


@jax.custom_vjp
def scale_rows(x: jax.Array, s: jax.Array) -> jax.Array:
    """x [..., R, D] times s [..., R, 1] or [..., R, D] (leading axes equal or 1 in s).

    For a per-row s its cotangent sum_d dout x is taken as a matmul with a ones vector: XLA:CPU reduces over
    the minor axis about 10x slower than it multiplies by ones (measured), and plain autodiff of a
    broadcasting multiply emits exactly that reduction.
    """
    return x * s


def _scale_rows_fwd(x: jax.Array, s: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return x * s, (x, s)


def _scale_rows_bwd(res: tuple[jax.Array, jax.Array], dout: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, s = res
    ds = dout * x
    if s.shape[-1] == 1 and x.shape[-1] != 1:
        ds = jnp.matmul(ds, jnp.ones((x.shape[-1], 1), ds.dtype), precision=HIGHEST)
    # s may also broadcast over leading axes (segment masks shared by all heads).
    lead = tuple(i for i in range(s.ndim - 1) if s.shape[i] == 1 and ds.shape[i] != 1)
    return dout * s, jnp.sum(ds, axis=lead, keepdims=True) if lead else ds


scale_rows.defvjp(_scale_rows_fwd, _scale_rows_bwd)
