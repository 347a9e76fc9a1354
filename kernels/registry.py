"""Every op over packed sequences (`segment_ids`), with a small valid example input: the registry the
conformance tests iterate (tests/kernels/test_segment_isolation.py runs every implementation of every entry
with a NaN, then an inf, in one packed segment). A new op is covered by registering it here.

An entry names the public entry point, its implementations (the api's dispatch table), which inputs are
per-step `[B, T, ...]`, the initial state (if any), the inputs every segment reads (a filter: their
gradients sum over all segments), the keyword that takes a chunk size and fixed keyword arguments.
Variants that take different inputs (DeltaNet / GDN / KDA, scalar / diagonal SSD) are entries of their own.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.kernels.block_sparse_attention import api as block_sparse_api
from icml26zoo.kernels.block_sparse_attention import lists
from icml26zoo.kernels.delta_rule import api as delta_api
from icml26zoo.kernels.forgetting_attention import api as fox_api
from icml26zoo.kernels.long_conv import api as long_conv_api
from icml26zoo.kernels.momentum_delta_rule import api as mdn_api
from icml26zoo.kernels.selective_scan import api as selective_scan_api
from icml26zoo.kernels.ssd import api as ssd_api
from icml26zoo.kernels.value_forget_attention import api as fix_api

Inputs = dict[str, Any]
# Example sizes: 2 query heads on 1 kv head (GQA), width 8, state width 4 for the selective scan.
H, HKV, D, N = 2, 1, 8, 4
# Block-sparse attention's block: the smallest its Pallas path takes on CPU (a power of two ≥ 16).
BLOCK = 16


@dataclasses.dataclass(frozen=True)
class SegmentedOp:
    """One op over packed sequences.

    name: the op's entry in the tolerance table (tests/tolerances.py).
    fn: the public entry point, called as `fn(**example, segment_ids=..., implementation=..., **static)`.
    implementations: every name of its `implementation=` dispatch table, "reference" included.
    example: (rng, batch, length) -> valid float32 keyword inputs, without `segment_ids`.
    time_inputs: the inputs shaped `[B, T, ...]`; state_input: the initial state's name or None (the op then
      returns its output alone, otherwise `(output, final_state)`).
    shared: inputs read by every segment (a NaN there reaches every segment by definition).
    chunk_arg: the keyword taking a chunk size (None: none); static: fixed keyword arguments.
    """

    name: str
    fn: Callable[..., Any]
    implementations: tuple[str, ...]
    example: Callable[[np.random.Generator, int, int], Inputs]
    time_inputs: tuple[str, ...]
    state_input: str | None = None
    shared: tuple[str, ...] = ()
    chunk_arg: str | None = None
    static: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> jax.Array:
    return jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)


def _uniform(rng: np.random.Generator, lo: float, hi: float, *shape: int) -> jax.Array:
    return jnp.asarray(rng.uniform(lo, hi, shape), jnp.float32)


def _fox(rng: np.random.Generator, b: int, t: int) -> Inputs:
    """q [B, T, H, D], k, v [B, T, Hkv, D], log_fgate [B, T, H]."""
    return {"q": _normal(rng, b, t, H, D), "k": _normal(rng, b, t, HKV, D), "v": _normal(rng, b, t, HKV, D),
            "log_fgate": _uniform(rng, -3, 0, b, t, H)}


def _fix(rng: np.random.Generator, b: int, t: int) -> Inputs:
    """FoX's inputs plus log_vgate [B, T, H, D]."""
    return {**_fox(rng, b, t), "log_vgate": _uniform(rng, -3, 0, b, t, H, D)}


def _delta(variant: str, rng: np.random.Generator, b: int, t: int) -> Inputs:
    """q, k, v [B, T, H, D], beta [B, T, H], g (GDN [B, T, H], KDA [B, T, H, D]), S0 [B, H, D, D]."""
    x = {"q": _normal(rng, b, t, H, D, scale=D**-0.5), "k": _normal(rng, b, t, H, D, scale=D**-0.5),
         "v": _normal(rng, b, t, H, D), "beta": _uniform(rng, 0, 1, b, t, H),
         "initial_state": _normal(rng, b, H, D, D)}
    if variant != "deltanet":
        x["g"] = _uniform(rng, -3, 0, *((b, t, H, D) if variant == "kda" else (b, t, H)))
    return x


def _mdn(rng: np.random.Generator, b: int, t: int) -> Inputs:
    """The delta rule's inputs plus p [B, T, H, D], log_mu and eta [B, T, H], and the pair (S0, M0)."""
    x = _delta("gdn", rng, b, t)
    return {**x, "p": _normal(rng, b, t, H, D, scale=D**-0.5), "log_mu": _uniform(rng, -3, 0, b, t, H),
            "eta": _uniform(rng, 0, 1, b, t, H),
            "initial_state": (x["initial_state"], _normal(rng, b, H, D, D, scale=0.3))}


def _ssd(diagonal: bool, rng: np.random.Generator, b: int, t: int) -> Inputs:
    """x [B, T, H, D], a [B, T, H] or [B, T, H, D], b, c [B, T, H, D], S0 [B, H, D, D]."""
    return {"x": _normal(rng, b, t, H, D), "a": _uniform(rng, -3, 0, *((b, t, H, D) if diagonal else (b, t, H))),
            "b": _normal(rng, b, t, H, D, scale=D**-0.5), "c": _normal(rng, b, t, H, D, scale=D**-0.5),
            "initial_state": _normal(rng, b, H, D, D)}


def _long_conv(rng: np.random.Generator, b: int, t: int) -> Inputs:
    """u [B, T, D] and a full-length filter h [T, D]."""
    return {"u": _normal(rng, b, t, D), "h": _normal(rng, t, D, scale=t**-0.5)}


def _block_sparse(rng: np.random.Generator, b: int, t: int) -> Inputs:
    """q [B, T, H, D], k, v [B, T, Hkv, D] and random causal lists [B, H, N, N] of `BLOCK` blocks (density 1/2)."""
    n = lists.num_blocks(t, BLOCK)
    keep = jnp.asarray(rng.random((b, H, n, n)) < 0.5)
    return {**{name: x for name, x in _fox(rng, b, t).items() if name != "log_fgate"},
            "block_indices": lists.from_mask(keep)}


def _selective_scan(rng: np.random.Generator, b: int, t: int) -> Inputs:
    """u, delta [B, T, D] (Δ > 0), A [D, N] (< 0), B, C [B, T, N], D [D], S0 [B, D, N]."""
    return {"u": _normal(rng, b, t, D), "delta": _uniform(rng, 0.1, 1, b, t, D), "A": -_uniform(rng, 0.5, 2, D, N),
            "B": _normal(rng, b, t, N), "C": _normal(rng, b, t, N), "D": _normal(rng, D),
            "initial_state": _normal(rng, b, D, N)}


def _names(api: Any) -> tuple[str, ...]:
    return tuple(api._IMPLEMENTATIONS)


_DELTA = ("q", "k", "v", "beta")
_ATTENTION = ("q", "k", "v")
SEGMENTED_OPS: dict[str, SegmentedOp] = {
    # The FoX api takes no block size: its blocked paths run at their default block.
    "fox": SegmentedOp("forgetting_attention", fox_api.forgetting_attention, _names(fox_api), _fox,
                       _ATTENTION + ("log_fgate",)),
    "fix": SegmentedOp("value_forget_attention", fix_api.value_forget_attention, _names(fix_api), _fix,
                       _ATTENTION + ("log_vgate", "log_fgate"), chunk_arg="block_size"),
    "deltanet": SegmentedOp("delta_rule", delta_api.gated_delta_rule, _names(delta_api),
                            functools.partial(_delta, "deltanet"), _DELTA, "initial_state", chunk_arg="chunk_size"),
    "gdn": SegmentedOp("delta_rule", delta_api.gated_delta_rule, _names(delta_api), functools.partial(_delta, "gdn"),
                       _DELTA + ("g",), "initial_state", chunk_arg="chunk_size"),
    "kda": SegmentedOp("delta_rule", delta_api.gated_delta_rule, _names(delta_api), functools.partial(_delta, "kda"),
                       _DELTA + ("g",), "initial_state", chunk_arg="chunk_size"),
    "mdn": SegmentedOp("momentum_delta_rule", mdn_api.momentum_delta_rule, _names(mdn_api), _mdn,
                       _DELTA + ("p", "g", "log_mu", "eta"), "initial_state", chunk_arg="chunk_size"),
    "ssd_scalar": SegmentedOp("ssd", ssd_api.ssd, _names(ssd_api), functools.partial(_ssd, False),
                              ("x", "a", "b", "c"), "initial_state", chunk_arg="chunk_size"),
    "ssd_diagonal": SegmentedOp("ssd", ssd_api.ssd, _names(ssd_api), functools.partial(_ssd, True),
                                ("x", "a", "b", "c"), "initial_state", chunk_arg="chunk_size"),
    "selective_scan": SegmentedOp("selective_scan", selective_scan_api.selective_scan, _names(selective_scan_api),
                                  _selective_scan, ("u", "delta", "B", "C"), "initial_state", shared=("A", "D"),
                                  chunk_arg="chunk_size"),
    "long_conv": SegmentedOp("long_conv", long_conv_api.causal_long_conv, _names(long_conv_api), _long_conv, ("u",),
                             shared=("h",)),
    "block_sparse_attention": SegmentedOp("block_sparse_attention", block_sparse_api.block_sparse_attention,
                                          _names(block_sparse_api), _block_sparse, _ATTENTION,
                                          static={"block_size": BLOCK}),
}
