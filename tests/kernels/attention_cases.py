"""Test pieces shared by the softmax-attention op tests (FoX and FiX, XLA and Pallas files): the FiX harness
case, its float64 oracle, a small FoX case for the Pallas files, and the NaN-in-one-gate check of the Pallas
kernels themselves."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from harness import OpCase, assert_close, forward_and_grads, make_case_inputs, random_cotangents
from tolerances import tolerance

from icml26zoo.kernels.forgetting_attention import reference as fox_reference
from icml26zoo.kernels.value_forget_attention import (
    ValueForgetAttentionState,
    init_value_forget_attention_state,
    reference,
    value_forget_attention_step,
    xla,
)

H, HKV, D = 4, 2, 16


def make_fix_inputs(rng: np.random.Generator, batch: int, length: int, *, dv: int = 8, with_fgate: bool = True,
                    gate: tuple[float, float] = (-3.0, 0.0), dtype: jnp.dtype = jnp.float32) -> dict[str, jax.Array]:
    """q [B,T,H,D], k [B,T,Hkv,D], v [B,T,Hkv,Dv] ~ N(0, 1), log_vgate [B,T,H,Dv] and (with_fgate) log_fgate
    [B,T,H] ~ U(gate). GQA: two query heads per kv head."""
    inputs = {
        "q": jnp.asarray(rng.normal(size=(batch, length, H, D)), dtype),
        "k": jnp.asarray(rng.normal(size=(batch, length, HKV, D)), dtype),
        "v": jnp.asarray(rng.normal(size=(batch, length, HKV, dv)), dtype),
        "log_vgate": jnp.asarray(rng.uniform(*gate, size=(batch, length, H, dv)), jnp.float32),
    }
    if with_fgate:
        inputs["log_fgate"] = jnp.asarray(rng.uniform(*gate, size=(batch, length, H)), jnp.float32)
    return inputs


def _one_token_step(q: jax.Array, k: jax.Array, v: jax.Array, log_vgate: jax.Array,
                    log_fgate: jax.Array | None = None, *,
                    state: ValueForgetAttentionState) -> tuple[jax.Array, ValueForgetAttentionState]:
    """The decode step on one token ([B, H, ...] inputs, as the harness slices them)."""
    u, state = value_forget_attention_step(q[:, None], k[:, None], v[:, None], log_vgate[:, None],
                                           None if log_fgate is None else log_fgate[:, None], state=state)
    return u[:, 0], state


def _init_state(inputs: dict[str, jax.Array]) -> ValueForgetAttentionState:
    batch, length = inputs["q"].shape[:2]
    return init_value_forget_attention_state(batch, length, H, HKV, D, inputs["v"].shape[-1], jnp.float32)


FIX_CASE = OpCase(
    name="value_forget_attention",
    make_inputs=make_fix_inputs,
    reference=reference.value_forget_attention,
    fast={"xla": xla.value_forget_attention},
    differentiable=("q", "k", "v", "log_vgate", "log_fgate"),
    time_inputs=("q", "k", "v", "log_vgate", "log_fgate"),
    state_input=None,
    returns_state=False,
    chunk_arg="block_size",
    step=_one_token_step,
    init_state=_init_state,
)


@functools.cache
def fix_case(with_fgate: bool = True, dv: int = 8) -> OpCase:
    """FIX_CASE with or without the scalar gate and with value width Dv."""
    names = FIX_CASE.differentiable if with_fgate else FIX_CASE.differentiable[:4]
    make = functools.partial(make_fix_inputs, dv=dv, with_fgate=with_fgate)
    return dataclasses.replace(FIX_CASE, make_inputs=make, differentiable=names, time_inputs=names)


def fix_float64_oracle(q: jax.Array, k: jax.Array, v: jax.Array, av: jax.Array, af: jax.Array | None = None,
                       seg: jax.Array | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Direct float64 numpy FiX: (u, the unnormalized numerator Σ_j exp(s_ij) D_ij ⊙ v_j), each [B,T,H,Dv]."""
    q, k, v, av = (np.asarray(x, np.float64) for x in (q, k, v, av))
    t, groups = q.shape[1], q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    mask = np.tril(np.ones((t, t), bool))[None]
    if seg is not None:
        mask = mask & (np.asarray(seg)[:, :, None] == np.asarray(seg)[:, None, :])
    s = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(q.shape[-1])
    if af is not None:
        lam_f = np.cumsum(np.asarray(af, np.float64), axis=1).transpose(0, 2, 1)  # [B, H, T]
        s = s + lam_f[..., :, None] - lam_f[..., None, :]
    weights = np.exp(np.where(mask[:, None], s, -np.inf))  # [B, H, i, j]
    lam_v = np.cumsum(av, axis=1)
    log_decay = lam_v[:, :, None] - lam_v[:, None, :]  # [B, i, j, H, Dv]
    decay = np.exp(np.where(mask[..., None, None], log_decay, -np.inf))
    numerator = np.einsum("bhij,bijhc,bjhc->bihc", weights, decay, v)
    return numerator / np.sum(weights, axis=-1).transpose(0, 2, 1)[..., None], numerator


def make_fox_inputs(rng: np.random.Generator, batch: int, length: int, *, heads: int = H, kv_heads: int = HKV,
                    d: int = D, gate: tuple[float, float] = (-3.0, 0.0),
                    dtype: jnp.dtype = jnp.float32) -> dict[str, jax.Array]:
    """q [B,T,H,D], k and v [B,T,Hkv,D] ~ N(0, 1), log_fgate [B,T,H] ~ U(gate)."""
    return {
        "q": jnp.asarray(rng.normal(size=(batch, length, heads, d)), dtype),
        "k": jnp.asarray(rng.normal(size=(batch, length, kv_heads, d)), dtype),
        "v": jnp.asarray(rng.normal(size=(batch, length, kv_heads, d)), dtype),
        "log_fgate": jnp.asarray(rng.uniform(*gate, size=(batch, length, heads)), jnp.float32),
    }


FOX_INPUTS = ("q", "k", "v", "log_fgate")
FOX_CASE = OpCase(
    name="forgetting_attention",
    make_inputs=make_fox_inputs,
    reference=fox_reference.forgetting_attention,
    fast={},
    differentiable=FOX_INPUTS,
    time_inputs=FOX_INPUTS,
    state_input=None,
    returns_state=False,
    chunk_arg="block_size",
)


def check_nan_gate_stays_in_its_segment(case: OpCase, impl: str, gate: str, bounds: list[list[int]],
                                        poisoned: tuple[int, int], chunk_size: int) -> None:
    """NaN in one packed segment of one log gate, straight into the kernels (no api quarantine): every other
    segment's outputs and every input gradient outside that segment equal the clean run's.

    The kernels mask logits with `jnp.where` (never an additive −inf on top of a NaN) and zero P and dS on
    masked pairs with `jnp.where` (never a masked zero times a NaN), so a NaN gate, whose local sums spill
    into the rest of its block, reaches only the pairs of its own segment. NaN in q, k or v would still
    cross through the masked zeros of the P·V, dS·K and dSᵀ·Q matmuls: the public entries keep those out
    (`segments.quarantine`), see `harness.check_nan_segment_isolation`.
    """
    tol = tolerance(case.name)
    row, index = poisoned
    lo, hi = bounds[row][index], bounds[row][index + 1]
    inputs = make_case_inputs(case, 0, bounds=bounds)
    bad = dict(inputs)
    bad[gate] = inputs[gate].at[row, lo:hi].set(jnp.nan)
    shape = jax.eval_shape(lambda i: case.reference(**i), inputs)
    cotangent = random_cotangents(np.random.default_rng(1), shape)
    clean_out, clean_grads = forward_and_grads(case, impl, inputs, cotangent, chunk_size)
    out, grads = forward_and_grads(case, impl, bad, cotangent, chunk_size)
    assert not np.all(np.isfinite(np.asarray(out[row, lo:hi]))), "the poisoned segment's outputs lost their NaN"

    def outside(x: jax.Array) -> np.ndarray:
        x = np.array(x, np.float64)
        x[row, lo:hi] = 0.0
        return x

    what = f"{case.name}[{impl}] NaN {gate} in row {row}, {lo}:{hi}"
    assert_close(outside(out), outside(clean_out), tol, what=f"{what}: output")
    for name in case.differentiable:
        assert_close(outside(grads[name]), outside(clean_grads[name]), tol, kind="grad", what=f"{what}: d{name}")

