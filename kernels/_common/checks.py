"""Argument checks shared by the ops' api.py files; each raises ValueError naming the op and the argument.

Value checks (`check_values`, `check_scale`) run on concrete arrays with numpy and are written so that NaN
fails them (`isfinite` and "inside the range", never "above the bound"). Under `jit`/`grad` tracing the
values are unknown: they are skipped, unless the op runs inside `icml26zoo.kernels.checked`, which turns
them into `jax.experimental.checkify` checks (`checkify_enabled`).
"""

from __future__ import annotations

import contextlib
import contextvars
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from icml26zoo.kernels._common.chunks import CHUNK_SIZES

# Set while `kernels.checked` traces an op: value checks on traced arrays become checkify checks.
_CHECKIFY = contextvars.ContextVar("icml26zoo_kernels_checkify", default=False)


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


def is_int(value: object) -> bool:
    """A Python or NumPy integer, not a bool (an int subclass) and not a float that compares equal to one."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def check_positive_int(op: str, name: str, value: object, *, optional: bool = False) -> None:
    """`name=` of `op` is an int >= 1 (or None when `optional`): ValueError naming both otherwise."""
    if (value is None and optional) or (is_int(value) and value >= 1):
        return
    expected = "None or an int ≥ 1" if optional else "an int ≥ 1"
    raise ValueError(f"{op}: `{name}` is {value!r}; expected {expected}")


def check_chunk_size(op: str, chunk_size: int) -> None:
    """The chunked paths take one of CHUNK_SIZES, as a Python int (64.0, "64" and True are rejected)."""
    # bool is an int subclass and 64.0 == 64, so membership alone would accept True-like or float sizes.
    if not is_int(chunk_size) or chunk_size not in CHUNK_SIZES:
        raise ValueError(f"{op}: `chunk_size` is {chunk_size!r}, expected one of {CHUNK_SIZES}")


def is_concrete(x: jax.Array) -> bool:
    """False under jit/grad tracing, where values are unknown and range checks are skipped."""
    return not isinstance(x, jax.core.Tracer)


def _describe(x: Any) -> str:
    """A short account of a received value for an error message: its type and, when short, its repr."""
    text = repr(x)
    return f"{type(x).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def require_arrays(op: str, arrays: Mapping[str, Any], optional: Sequence[str] = ()) -> None:
    """Every entry is a jax or numpy array (None allowed for the names in `optional`); Python lists, scalars
    and None elsewhere raise a ValueError naming the argument and the type received."""
    for name, x in arrays.items():
        if x is None and name in optional:
            continue
        if not isinstance(x, jax.Array | np.ndarray):
            allowed = " or None" if name in optional else ""
            raise ValueError(f"{op}: `{name}` is {_describe(x)}, expected a jax.Array or numpy array{allowed}")


def require_length(op: str, name: str, x: jax.Array) -> None:
    """x [B, T, ...] has T >= 1 (a zero-length sequence has no outputs to define)."""
    if x.ndim < 2 or x.shape[1] < 1:
        fail_shape(op, name, x.shape, "[B, T, ...] with T >= 1")


@contextlib.contextmanager
def checkify_enabled() -> Iterator[None]:
    """Inside this block, value checks on traced arrays emit `checkify.check`s (used by `kernels.checked`)."""
    token = _CHECKIFY.set(True)
    try:
        yield
    finally:
        _CHECKIFY.reset(token)


def _value_message(op: str, name: str, expected: str) -> str:
    """The error text with `{bad}`, `{lo}`, `{hi}` left to fill (by str.format or by checkify)."""
    return (f"{op}: `{name}` must be {expected}; got {{bad}} bad value(s) (NaN, inf or out of range), "
            "min {lo}, max {hi}")


def check_values(op: str, name: str, x: jax.Array | None, expected: str, *, lo: float = -np.inf,
                 hi: float = np.inf) -> None:
    """x (None skipped) is finite and within [lo, hi]; NaN and inf fail. `expected` words the rule.

    Concrete arrays are checked here (ValueError); traced ones only inside `kernels.checked` (checkify).
    """
    if x is None:
        return
    template = _value_message(op, name, expected)
    if is_concrete(x):
        a = np.asarray(x, np.float32)
        ok = np.isfinite(a) & (a >= lo) & (a <= hi)
        if not bool(np.all(ok)):
            raise ValueError(template.format(bad=int(np.sum(~ok)), lo=np.min(a), hi=np.max(a)))
    elif _CHECKIFY.get():
        # A check carries no gradient; under `grad` differentiable message values break checkify's JVP.
        a = jax.lax.stop_gradient(x).astype(jnp.float32)
        ok = jnp.isfinite(a) & (a >= lo) & (a <= hi)
        checkify.check(jnp.all(ok), template, bad=jnp.sum(~ok), lo=jnp.min(a), hi=jnp.max(a))


def check_scale(op: str, scale: Any) -> None:
    """scale is None (the op's default) or a positive finite real number (a Python number or a 0-d array)."""
    if scale is None:
        return
    if isinstance(scale, jax.Array | np.ndarray) and scale.ndim == 0:
        check_values(op, "scale", scale, "a positive finite number", lo=np.finfo(np.float32).tiny)
        return
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool):  # a bool is a Real too
        raise ValueError(f"{op}: `scale` is {_describe(scale)}, expected None or a positive finite number")
    if not np.isfinite(scale) or not scale > 0:
        raise ValueError(f"{op}: `scale` is {scale!r}, expected None or a positive finite number")


def check_capacity(op: str, index: jax.Array, new: int, capacity: int) -> None:
    """A decode step writing `new` tokens at position `index` (an int32 scalar) fits `capacity` slots.

    Past the end, `dynamic_update_slice` clamps the write start and silently overwrites the last slots, so
    the step would return wrong tokens: a concrete index raises a ValueError here; a traced one is checked
    only inside `kernels.checked` (a checkify check, like `check_values`).
    """
    template = (f"{op}: writing {new} token(s) at position {{index}} needs index + T ≤ the state's capacity "
                f"{capacity}; the decode state is full (make it with a larger capacity)")
    if is_concrete(index):
        at = int(np.asarray(index))
        if at + new > capacity:
            raise ValueError(template.format(index=at))
    elif _CHECKIFY.get():
        at = jax.lax.stop_gradient(index).astype(jnp.int32)
        checkify.check(at + new <= capacity, template, index=at)
