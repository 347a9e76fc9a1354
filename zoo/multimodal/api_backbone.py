"""The MulT-style backbone of API (Adaptive Prototype Imputation, ICML 2026): cross-modal transformer blocks, the
self-attention "memory" transformer, the sigmoid-gated last-step readout and the residual MLP head.

The structure follows the official code (github KX-yolo/API, `trains/singleTask/model/april.py`, model "APRIL",
itself the MulT backbone): per target modality two cross-modal transformers (query = target, key/value = source),
their outputs concatenated (2d) and passed through a self-attention transformer; the last time step, gated by
sigmoid(Linear(2d -> 2d)), concatenated over modalities (6d); residual MLP; Linear -> scalar.

Why stacked: the six cross-modal encoders (and the three memory encoders) have equal shapes, so their parameters
are stacked on a leading axis, run under `jax.vmap`, and their layers under `jax.lax.scan`; XLA then compiles one
layer body instead of 21, which is what dominates the cost of this small model on a CPU. Attention, residual and
embedding dropout of MulT are left out (the small-scale runs do not need them); the head's dropout is kept.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

__all__ = ["ResidualHead", "StackedEncoders", "layer_norm", "sinusoidal_positions"]


def sinusoidal_positions(length: int, dim: int) -> jax.Array:
    """Sinusoidal position embedding [length, dim] for positions 1..length (first half sin, second half cos, as
    fairseq's embedding that MulT uses; an odd `dim` gets a zero last column)."""
    half = dim // 2
    scale = math.log(10000.0) / max(half - 1, 1)
    freqs = jnp.exp(-scale * jnp.arange(half, dtype=jnp.float32))
    angles = jnp.arange(1, length + 1, dtype=jnp.float32)[:, None] * freqs[None, :]
    table = jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=1)
    return jnp.pad(table, ((0, 0), (0, dim - 2 * half)))


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float = 1e-5) -> jax.Array:
    """LayerNorm over the last axis (biased variance, torch's default eps)."""
    mean = x.mean(-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), -1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * scale + bias


def _layer(x: jax.Array, kv: jax.Array | None, p: dict[str, jax.Array], num_heads: int) -> jax.Array:
    """One pre-norm layer: x + MHA(LN(x), LN(kv)) then x + FFN(LN(x)) (ReLU). The query and the key/value share
    the first LayerNorm, as in MulT. x [B, Tq, D], kv [B, Tk, D] or None (self-attention)."""
    batch, length, dim = x.shape
    q_in = layer_norm(x, p["ln1_scale"], p["ln1_bias"])
    kv_in = q_in if kv is None else layer_norm(kv, p["ln1_scale"], p["ln1_bias"])

    def heads(y: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        return (y @ w + b).reshape(*y.shape[:2], num_heads, dim // num_heads)

    attended = jax.nn.dot_product_attention(heads(q_in, p["wq"], p["bq"]), heads(kv_in, p["wk"], p["bk"]),
                                            heads(kv_in, p["wv"], p["bv"]))
    x = x + attended.reshape(batch, length, dim) @ p["wo"] + p["bo"]
    hidden = jax.nn.relu(layer_norm(x, p["ln2_scale"], p["ln2_bias"]) @ p["w1"] + p["b1"])
    return x + hidden @ p["w2"] + p["b2"]


class StackedEncoders(nnx.Module):
    """`count` independent MulT TransformerEncoders of `num_layers` pre-norm layers each (inputs scaled by
    sqrt(dim) plus sinusoidal positions, a final LayerNorm); parameters [count, num_layers, ...]."""

    def __init__(self, count: int, dim: int, num_heads: int, num_layers: int, *, rngs: nnx.Rngs) -> None:
        self.dim, self.num_heads = dim, num_heads
        init = nnx.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0, 1))
        lead = (count, num_layers)

        def weight(d_in: int, d_out: int) -> nnx.Param:
            return nnx.Param(init(rngs.params(), (*lead, d_in, d_out), jnp.float32))

        def const(size: int, value: float) -> nnx.Param:
            return nnx.Param(jnp.full((*lead, size), value, jnp.float32))

        self.wq, self.wk, self.wv, self.wo = (weight(dim, dim) for _ in range(4))
        self.bq, self.bk, self.bv, self.bo = (const(dim, 0.0) for _ in range(4))
        self.w1, self.b1 = weight(dim, 4 * dim), const(4 * dim, 0.0)
        self.w2, self.b2 = weight(4 * dim, dim), const(dim, 0.0)
        self.ln1_scale, self.ln1_bias = const(dim, 1.0), const(dim, 0.0)
        self.ln2_scale, self.ln2_bias = const(dim, 1.0), const(dim, 0.0)
        self.final_scale = nnx.Param(jnp.ones((count, dim), jnp.float32))
        self.final_bias = nnx.Param(jnp.zeros((count, dim), jnp.float32))

    def _layer_params(self) -> dict[str, jax.Array]:
        names = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "w1", "b1", "w2", "b2", "ln1_scale", "ln1_bias",
                 "ln2_scale", "ln2_bias")
        return {name: getattr(self, name)[...] for name in names}

    def __call__(self, x: jax.Array, kv: jax.Array | None = None) -> jax.Array:
        """x [count, B, Tq, dim] (targets), kv [count, B, Tk, dim] (sources) or None -> [count, B, Tq, dim]."""
        def embed(y: jax.Array) -> jax.Array:
            return math.sqrt(self.dim) * y + sinusoidal_positions(y.shape[-2], self.dim)

        def encoder(x1, kv1, params, scale, bias):
            def body(h, p):
                return _layer(h, kv1, p, self.num_heads), None

            h, _ = jax.lax.scan(body, x1, params)
            return layer_norm(h, scale, bias)

        kv = None if kv is None else embed(kv)
        return jax.vmap(encoder, in_axes=(0, None if kv is None else 0, 0, 0, 0))(
            embed(x), kv, self._layer_params(), self.final_scale[...], self.final_bias[...])


class ResidualHead(nnx.Module):
    """last states [B, 6d] -> sentiment [B]: h + Linear(Dropout(ReLU(Linear(h)))), then Linear(6d -> 1)."""

    def __init__(self, dim: int, dropout: float, *, rngs: nnx.Rngs) -> None:
        self.proj1 = nnx.Linear(dim, dim, rngs=rngs)
        self.proj2 = nnx.Linear(dim, dim, rngs=rngs)
        self.dropout = nnx.Dropout(dropout)
        self.out = nnx.Linear(dim, 1, rngs=rngs)

    def __call__(self, h: jax.Array, *, train: bool, rngs: nnx.Rngs | None) -> jax.Array:
        hidden = self.dropout(jax.nn.relu(self.proj1(h)), deterministic=not train, rngs=rngs)
        return self.out(self.proj2(hidden) + h)[:, 0]
