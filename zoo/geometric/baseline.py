"""`set_transformer`: the plain, non-equivariant transformer over point sets that issue 20's models are compared to.

Each point's coordinates and features [p_i, f_i] are embedded by a two-layer MLP; cfg.num_layers pre-norm
blocks follow, each masked multi-head self-attention over the points (padding keys excluded) and a GELU MLP
(width cfg.resolved_mlp_dim), both residual; then a final LayerNorm and a linear readout, either per point
(readout "point": [B, N, num_outputs]) or of the weighted mean over real points (readout "pool":
[B, num_outputs]; the weights are the batch's, so mesh quadrature weights integrate). No positional encoding:
the model is permutation-equivariant over points, and nothing makes it rotation-invariant, since the raw
coordinates enter the first linear layer (the contrast the equivariance table needs).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.geometric.common import check_point_inputs, masked_mean, masked_softmax
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int

READOUTS = ("pool", "point")


@dataclasses.dataclass(frozen=True)
class SetTransformerOptions:
    """The set_transformer's options (ModelConfig.model_options)."""

    # Classes (readout "pool") or output channels per point (readout "point").
    num_outputs: int = 8
    readout: str = "pool"
    # d of points [B, N, d] and F of features [B, N, F] (the embedding's input width is d + F).
    point_dim: int = 3
    feature_dim: int = 0

    def __post_init__(self) -> None:
        for name, minimum in (("num_outputs", 1), ("point_dim", 1), ("feature_dim", 0)):
            check_int(f"{MODEL_OPTIONS_FIELD}: set_transformer option {name!r}", getattr(self, name), minimum=minimum)
        if self.readout not in READOUTS:
            raise ValueError(f"{MODEL_OPTIONS_FIELD}: set_transformer option 'readout' must be one of "
                             f"{list(READOUTS)}, got {self.readout!r}")


class MaskedSelfAttention(nnx.Module):
    """Multi-head softmax self-attention over points; keys with weight 0 get probability 0."""

    def __init__(self, width: int, num_heads: int, *, rngs: nnx.Rngs) -> None:
        if width % num_heads:
            raise ValueError(f"model.d_model ({width}) must be divisible by model.num_heads ({num_heads})")
        self.num_heads = num_heads
        self.qkv = nnx.Linear(width, 3 * width, rngs=rngs)
        self.out = nnx.Linear(width, width, rngs=rngs)

    def __call__(self, x: jax.Array, weights: jax.Array) -> jax.Array:
        """x [B, N, D], weights [B, N] -> [B, N, D]."""
        batch, num_points, width = x.shape
        head = width // self.num_heads
        q, k, v = jnp.split(self.qkv(x).reshape(batch, num_points, 3 * self.num_heads, head), 3, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.float32(head))
        probs = masked_softmax(scores, weights[:, None, None, :])
        return self.out(jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, num_points, width))


class Block(nnx.Module):
    """Pre-norm residual block: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, width: int, num_heads: int, mlp_width: int, *, rngs: nnx.Rngs) -> None:
        self.attention_norm = nnx.LayerNorm(width, rngs=rngs)
        self.attention = MaskedSelfAttention(width, num_heads, rngs=rngs)
        self.mlp_norm = nnx.LayerNorm(width, rngs=rngs)
        self.up = nnx.Linear(width, mlp_width, rngs=rngs)
        self.down = nnx.Linear(mlp_width, width, rngs=rngs)

    def __call__(self, x: jax.Array, weights: jax.Array) -> jax.Array:
        x = x + self.attention(self.attention_norm(x), weights)
        return x + self.down(jax.nn.gelu(self.up(self.mlp_norm(x))))


@register_model("set_transformer")
class SetTransformer(nnx.Module):
    """model(points [B, N, d], features [B, N, F], weights [B, N]) -> [B, num_outputs] or [B, N, num_outputs]."""

    LANGUAGE_MODEL = False
    options_class = SetTransformerOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = parse_model_options(SetTransformerOptions, cfg, owner="set_transformer model")
        width, inputs = cfg.d_model, self.options.point_dim + self.options.feature_dim
        self.embed_in = nnx.Linear(inputs, width, rngs=rngs)
        self.embed_out = nnx.Linear(width, width, rngs=rngs)
        self.blocks = nnx.List([Block(width, cfg.num_heads, cfg.resolved_mlp_dim, rngs=rngs)
                                for _ in range(cfg.num_layers)])
        self.final_norm = nnx.LayerNorm(width, rngs=rngs)
        self.head = nnx.Linear(width, self.options.num_outputs, rngs=rngs)

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
        check_point_inputs(points, features, weights, dim=self.options.point_dim)
        if features.shape[-1] != self.options.feature_dim:
            raise ValueError(f"features must have shape [B, N, {self.options.feature_dim}] (set_transformer option "
                             f"feature_dim), got shape {list(features.shape)}")
        inputs = jnp.concatenate([points, features], axis=-1).astype(jnp.float32)
        x = self.embed_out(jax.nn.gelu(self.embed_in(inputs)))
        for block in self.blocks:
            x = block(x, weights)
        x = self.final_norm(x)
        if self.options.readout == "pool":
            return self.head(masked_mean(x, weights))
        return self.head(x)
