"""Argument checks shared by the ops' api.py files; each raises ValueError naming the op and the argument."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.chunks import CHUNK_SIZES


def fail_shape(op: str, name: str, shape: Sequence[int], expected: str) -> NoReturn:
    """Raises the shape error of argument `name` of `op`."""
    raise ValueError(f"{op}: `{name}` has shape {tuple(shape)}, expected {expected}")


def require_floating(op: str, arrays: Mapping[str, jax.Array | None]) -> None:
    """Every array given (None entries are skipped) has a floating dtype."""
    for name, x in arrays.items():
        if x is not None and not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"{op}: `{name}` has dtype {x.dtype}, expected a floating dtype")


def require_dtype_of(op: str, ref_name: str, ref: jax.Array, arrays: Mapping[str, jax.Array]) -> None:
    """Every array given has the dtype of `ref` (the argument named `ref_name`)."""
    for name, x in arrays.items():
        if x.dtype != ref.dtype:
            raise ValueError(f"{op}: `{name}` has dtype {x.dtype}, expected {ref_name}.dtype = {ref.dtype}")


def check_segment_ids(op: str, segment_ids: jax.Array | None, batch: int, length: int) -> None:
    """segment_ids: None or [B, T] of an integer dtype."""
    if segment_ids is None:
        return
    if segment_ids.shape != (batch, length):
        fail_shape(op, "segment_ids", segment_ids.shape, f"{(batch, length)} = [B, T]")
    if not jnp.issubdtype(segment_ids.dtype, jnp.integer):
        raise ValueError(f"{op}: `segment_ids` has dtype {segment_ids.dtype}, expected an integer dtype")


def check_gqa_keys(q: jax.Array, k: jax.Array, bad: Callable[[str, jax.Array, str], ValueError]) -> int:
    """k [B, T, Hkv, D] for q [B, T, H, D], with Hkv dividing H; returns Hkv.

    `bad(name, array, expected)` builds the op's own shape error (the attention ops word it their way).
    """
    b, t, h, d = q.shape
    if k.ndim != 4 or k.shape[:2] != (b, t) or k.shape[3] != d:
        raise bad("k", k, f"[B, T, Hkv, D] = [{b}, {t}, Hkv, {d}]")
    hkv = k.shape[2]
    if hkv == 0 or h % hkv != 0:
        raise bad("k", k, f"a number of key/value heads Hkv that divides H = {h}")
    return hkv


def check_chunk_size(op: str, chunk_size: int) -> None:
    """The chunked paths take one of CHUNK_SIZES."""
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"{op}: `chunk_size` is {chunk_size!r}, expected one of {CHUNK_SIZES}")


def is_concrete(x: jax.Array) -> bool:
    """False under jit/grad tracing, where values are unknown and range checks are skipped."""
    return not isinstance(x, jax.core.Tracer)
