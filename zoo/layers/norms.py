"""The RMSNorm family, all with float32 statistics: one `rms_normalize`, three thin modules.

* `RMSNorm`: one scale [dim] over the last axis (block norms, attention's qk-norm, Mamba2's output norm).
* `HeadRMSNorm`: one scale per head, [H, Dh] (FoX's qk and output norms, FiX's mandatory output norm).
* `GatedRMSNorm`: one scale [Dv] shared by the heads, times act(gate) (the delta-rule mixers' output).

`DyT` (Dynamic Tanh) is the normalization-free stand-in for a block norm (`ModelConfig.norm = "dyt"`).

The mean square and the rescaling run in float32 whatever the input dtype (a bfloat16 mean of squares
loses about three digits); each module casts its result back to the input dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

GATE_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"silu": jax.nn.silu, "sigmoid": jax.nn.sigmoid}


def rms_normalize(x: jax.Array, eps: float) -> jax.Array:
    """x [..., K] -> float32 x / sqrt(mean(x²) + eps) over the last axis (no scale)."""
    x32 = x.astype(jnp.float32)
    return x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)


class RMSNorm(nnx.Module):
    """Root-mean-square norm over the last axis: `y = x / sqrt(mean(x²) + eps) · scale`, scale [dim]."""

    def __init__(self, dim: int, *, eps: float = 1e-6) -> None:
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: [..., dim] -> [..., dim] in x.dtype."""
        if x.shape[-1] != self.scale.shape[0]:
            raise ValueError(f"x must have last dimension {self.scale.shape[0]}, got shape {x.shape}")
        return (rms_normalize(x, self.eps) * self.scale[...]).astype(x.dtype)


class HeadRMSNorm(nnx.Module):
    """RMSNorm over the head dimension with a separate learned scale per head (scale [H, Dh], init 1).

    FoX's per-head norm has H·Dh scales (the paper's shared [Dh] scale was an accident of its code).
    """

    def __init__(self, num_heads: int, head_dim: int, *, eps: float) -> None:
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((num_heads, head_dim), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: [..., H, Dh] -> [..., H, Dh] in x.dtype."""
        if x.shape[-2:] != self.scale.shape:
            raise ValueError(f"x must end in [H, Dh] = {self.scale.shape}, got shape {x.shape}")
        return (rms_normalize(x, self.eps) * self.scale[...]).astype(x.dtype)


class GatedRMSNorm(nnx.Module):
    """Per-head output RMSNorm over d_v (one scale [d_v] shared by the heads, init 1) times act(gate).

    The gate activation is SiLU for DeltaNet and GDN and sigmoid for KDA and MDN.
    """

    def __init__(self, head_dim: int, *, eps: float, activation: str) -> None:
        if activation not in GATE_ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(GATE_ACTIVATIONS)}, got {activation!r}")
        self.eps, self.activation = eps, activation
        self.scale = nnx.Param(jnp.ones((head_dim,), jnp.float32))

    def __call__(self, o: jax.Array, gate: jax.Array) -> jax.Array:
        """o, gate: [B, T, H, d_v] -> [B, T, H, d_v] in o.dtype; statistics and gating in float32."""
        act = GATE_ACTIVATIONS[self.activation]
        return (rms_normalize(o, self.eps) * self.scale[...] * act(gate.astype(jnp.float32))).astype(o.dtype)


def gated_norm_output(
    o: jax.Array, gate: jax.Array, norm: GatedRMSNorm, o_proj: nnx.Module, dtype: Any
) -> jax.Array:
    """o [B, T, H, d_v] and gate pre-activations [B, T, H·d_v] -> o_proj(norm(o, gate)) [B, T, D].

    The delta-rule mixers' output: o is cast to the compute dtype `dtype` before the norm.
    """
    batch, length, heads, dim = o.shape
    out = norm(o.astype(dtype), gate.reshape(batch, length, heads, dim))
    return o_proj(out.reshape(batch, length, heads * dim))


class DyT(nnx.Module):
    """Dynamic Tanh (Zhu, Chen, He, LeCun, Liu 2025, "Transformers without Normalization"), a drop-in for a norm.

    `y = tanh(alpha · x) · weight + bias` elementwise: alpha a learned scalar (init `alpha_init`), weight
    [dim] (init 1), bias [dim] (init 0). No statistics over tokens or channels; computed in float32.
    """

    def __init__(self, dim: int, *, alpha_init: float = 0.5) -> None:
        if not alpha_init > 0:
            raise ValueError(f"alpha_init must be > 0, got {alpha_init!r}")
        self.alpha = nnx.Param(jnp.full((), alpha_init, jnp.float32))
        self.weight = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((dim,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: [..., dim] -> [..., dim] in x.dtype."""
        if x.shape[-1] != self.weight.shape[0]:
            raise ValueError(f"x must have last dimension {self.weight.shape[0]}, got shape {x.shape}")
        y = jnp.tanh(self.alpha[...] * x.astype(jnp.float32)) * self.weight[...] + self.bias[...]
        return y.astype(x.dtype)


NORMS = ("rmsnorm", "dyt")


def build_norm(kind: str, dim: int, *, eps: float = 1e-6) -> RMSNorm | DyT:
    """The residual stream's norm of `kind` ("rmsnorm" or "dyt", `ModelConfig.norm`) over [..., dim]."""
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    if kind == "dyt":
        return DyT(dim)
    raise ValueError(f"norm must be one of {list(NORMS)}, got {kind!r}")
