"""Packed segments cannot poison each other: a NaN or an inf in one segment's inputs reaches no other
segment's outputs, final state or input gradients, in every implementation of every op (the harness's
`check_nan_segment_isolation`).

Each op goes through its public entry with `implementation=` naming the path: the entry zeroes every position
holding a non-finite input before the path runs (`segments.quarantine`; a masked zero weight times a NaN in
a matmul over time is still NaN, so masking the weights alone cannot keep a NaN out) and puts NaN back on the
bad segment's outputs, so the run with the bad segment equals the clean run everywhere else. One tiny shape per op: two
rows of T = 40 with chunks / blocks of 16, the poisoned segment 10:20 of row 0 straddling a chunk edge with
clean segments on both sides in the same chunks. The long convolution's filter `h` is read by every segment,
so its gradient is left out of the check (see the harness docstring).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import harness
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo import kernels
from icml26zoo.kernels.delta_rule import api as delta_api
from icml26zoo.kernels.forgetting_attention import api as fox_api
from icml26zoo.kernels.long_conv import api as long_conv_api
from icml26zoo.kernels.momentum_delta_rule import api as mdn_api
from icml26zoo.kernels.ssd import api as ssd_api
from icml26zoo.kernels.value_forget_attention import api as fix_api

BOUNDS = [[0, 10, 20, 40], [0, 7, 40]]
POISONED = (0, 1)  # row 0, positions 10:20
CHUNK = 16
H, HKV, D = 2, 1, 8


def _normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> jax.Array:
    return jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)


def _uniform(rng: np.random.Generator, lo: float, hi: float, *shape: int) -> jax.Array:
    return jnp.asarray(rng.uniform(lo, hi, shape), jnp.float32)


def _fox(rng: np.random.Generator, b: int, t: int) -> dict[str, jax.Array]:
    """q [B, T, H, D], k, v [B, T, Hkv, D], log_fgate [B, T, H]."""
    return {"q": _normal(rng, b, t, H, D), "k": _normal(rng, b, t, HKV, D), "v": _normal(rng, b, t, HKV, D),
            "log_fgate": _uniform(rng, -3, 0, b, t, H)}


def _fix(rng: np.random.Generator, b: int, t: int) -> dict[str, jax.Array]:
    """FoX's inputs plus log_vgate [B, T, H, D]."""
    return {**_fox(rng, b, t), "log_vgate": _uniform(rng, -3, 0, b, t, H, D)}


def _delta(variant: str, rng: np.random.Generator, b: int, t: int) -> dict[str, jax.Array]:
    """q, k [B, T, H, D], v [B, T, H, D], beta [B, T, H], g (GDN [B, T, H], KDA [B, T, H, D]), S0 [B, H, D, D]."""
    x = {"q": _normal(rng, b, t, H, D, scale=D**-0.5), "k": _normal(rng, b, t, H, D, scale=D**-0.5),
         "v": _normal(rng, b, t, H, D), "beta": _uniform(rng, 0, 1, b, t, H),
         "initial_state": _normal(rng, b, H, D, D)}
    if variant != "deltanet":
        x["g"] = _uniform(rng, -3, 0, *((b, t, H, D) if variant == "kda" else (b, t, H)))
    return x


def _mdn(rng: np.random.Generator, b: int, t: int) -> dict[str, jax.Array]:
    """The delta rule's inputs plus p [B, T, H, D], log_mu and eta [B, T, H], and the pair (S0, M0)."""
    x = _delta("gdn", rng, b, t)
    return {**x, "p": _normal(rng, b, t, H, D, scale=D**-0.5), "log_mu": _uniform(rng, -3, 0, b, t, H),
            "eta": _uniform(rng, 0, 1, b, t, H),
            "initial_state": (x["initial_state"], _normal(rng, b, H, D, D, scale=0.3))}


def _ssd(diagonal: bool, rng: np.random.Generator, b: int, t: int) -> dict[str, jax.Array]:
    """x [B, T, H, D], a [B, T, H] or [B, T, H, D], b, c [B, T, H, D], S0 [B, H, D, D]."""
    return {"x": _normal(rng, b, t, H, D), "a": _uniform(rng, -3, 0, *((b, t, H, D) if diagonal else (b, t, H))),
            "b": _normal(rng, b, t, H, D, scale=D**-0.5), "c": _normal(rng, b, t, H, D, scale=D**-0.5),
            "initial_state": _normal(rng, b, H, D, D)}


def _long_conv(rng: np.random.Generator, b: int, t: int) -> dict[str, jax.Array]:
    """u [B, T, D] and a full-length filter h [T, D]."""
    return {"u": _normal(rng, b, t, D), "h": _normal(rng, t, D, scale=t**-0.5)}


def _case(name: str, api: ModuleType, op: Callable[..., Any], make: Callable[..., dict[str, jax.Array]],
          time_inputs: tuple[str, ...], *, state: str | None, chunk_arg: str | None) -> harness.OpCase:
    """The public op with every implementation of its dispatch table as one OpCase (the reference too)."""
    paths = {impl: functools.partial(op, implementation=impl) for impl in api._IMPLEMENTATIONS}
    differentiable = time_inputs + (() if state is None else (state,))
    return harness.OpCase(name=name, make_inputs=make, reference=paths["reference"], fast=paths,
                          differentiable=differentiable, time_inputs=time_inputs, state_input=state,
                          returns_state=state is not None, chunk_arg=chunk_arg)


DELTA = ("q", "k", "v", "beta")
CASES = {
    # The FoX api takes no block size: its blocked paths run at their default block.
    "fox": _case("forgetting_attention", fox_api, kernels.forgetting_attention, _fox, ("q", "k", "v", "log_fgate"),
                 state=None, chunk_arg=None),
    "fix": _case("value_forget_attention", fix_api, kernels.value_forget_attention, _fix,
                 ("q", "k", "v", "log_vgate", "log_fgate"), state=None, chunk_arg="block_size"),
    "deltanet": _case("delta_rule", delta_api, kernels.gated_delta_rule, functools.partial(_delta, "deltanet"),
                      DELTA, state="initial_state", chunk_arg="chunk_size"),
    "gdn": _case("delta_rule", delta_api, kernels.gated_delta_rule, functools.partial(_delta, "gdn"),
                 DELTA + ("g",), state="initial_state", chunk_arg="chunk_size"),
    "kda": _case("delta_rule", delta_api, kernels.gated_delta_rule, functools.partial(_delta, "kda"),
                 DELTA + ("g",), state="initial_state", chunk_arg="chunk_size"),
    "mdn": _case("momentum_delta_rule", mdn_api, kernels.momentum_delta_rule, _mdn,
                 DELTA + ("p", "g", "log_mu", "eta"), state="initial_state", chunk_arg="chunk_size"),
    "ssd_scalar": _case("ssd", ssd_api, kernels.ssd, functools.partial(_ssd, False), ("x", "a", "b", "c"),
                        state="initial_state", chunk_arg="chunk_size"),
    "ssd_diagonal": _case("ssd", ssd_api, kernels.ssd, functools.partial(_ssd, True), ("x", "a", "b", "c"),
                          state="initial_state", chunk_arg="chunk_size"),
    "long_conv": _case("long_conv", long_conv_api, kernels.causal_long_conv, _long_conv, ("u",), state=None,
                       chunk_arg=None),
}
SHARED = {"long_conv": ("h",)}
PARAMS = [(op, impl) for op, case in CASES.items() for impl in case.fast]


@pytest.mark.parametrize("op, impl", PARAMS)
def test_bad_values_in_one_segment_stay_in_it(op: str, impl: str) -> None:
    harness.check_nan_segment_isolation(CASES[op], impl, BOUNDS, POISONED, chunk_size=CHUNK, shared=SHARED.get(op, ()))
