"""Model "sola": a pre-norm transformer over tokens on the sphere whose attention is SoLA's
(`icml26zoo.geometric.sola_attention`; RECONSTRUCTION of Sekikawa et al., ICML 2026, see that module).

Interface (issue 20): `model(points, features, weights)` with points = unit directions u_i [B, N, 3],
features = signal values at them [B, N, F], weights [B, N] (0 = padding). Blocks: x + SoLA(LN x), then
x + MLP(LN x), a GELU MLP of width cfg.resolved_mlp_dim (4·D when cfg.mlp_activation is "gelu", the spec's 4x;
the activation is GELU either way). The input embedding sees only the features, so with
`position_embedding="none"` nothing depends on the absolute orientation and every output is invariant under a
global rotation of the directions (the scalar-field form of SO(3) equivariance).

`position_embedding="spherical_harmonics"` adds a learned projection of the real spherical harmonics of
degrees 1..`lpe_degree` of u (e3nn-jax, the `geometric` extra): an absolute-position embedding that exists ONLY
as the negative control of the symmetry test (the spec's invariant 6); it breaks the invariance on purpose.

Deviation from the spec's U-net: the paper uses SoLA inside a U-shaped spherical transformer; the zoo has one
resolution (no icosphere pooling), which keeps the model exactly equivariant on point sets.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.geometric.common import check_point_inputs, is_concrete, masked_mean, point_mask
from icml26zoo.geometric.sola_attention import (
    LINEAR_ALPHA,
    direction_lift,
    linear_lifted_attention,
    local_softmax_attention,
    neighbour_table,
)
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_choice, check_int

FIELD = MODEL_OPTIONS_FIELD
READOUTS = ("point", "pool")
ATTENTIONS = ("local", "linear")
POSITION_EMBEDDINGS = ("none", "spherical_harmonics")
# |‖u‖ − 1| allowed for a real token's direction: float32 normalization leaves ~1e-7, data stored in float32
# and rotated a few times stays far below 1e-4; anything beyond is a bug upstream (e.g. raw coordinates).
UNIT_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class SolaOptions:
    """The sola model's options (ModelConfig.model_options)."""

    # Outputs per token ("point") or per example ("pool").
    num_outputs: int = 1
    # "point": [B, N, num_outputs] (zoo_sphere's per-token regression); "pool": weighted mean, then the head.
    readout: str = "point"
    # Input features F per token (the last axis of `features`); 0 gives every token one learned embedding.
    feature_dim: int = 1
    # "local": softmax over the k geodesic nearest neighbours; "linear": the softmax-free global variant A.
    attention: str = "local"
    # k of the local attention (capped at the number of tokens N of the call).
    neighbours: int = 16
    # "none" (SoLA: LPE-free) or "spherical_harmonics" (the negative control only).
    position_embedding: str = "none"
    # Highest spherical-harmonic degree of the negative control's embedding.
    lpe_degree: int = 3

    def __post_init__(self) -> None:
        for name, minimum in (("num_outputs", 1), ("feature_dim", 0), ("neighbours", 1), ("lpe_degree", 1)):
            check_int(f"{FIELD}: sola option {name!r}", getattr(self, name), minimum=minimum)
        for name, choices in (("readout", READOUTS), ("attention", ATTENTIONS),
                              ("position_embedding", POSITION_EMBEDDINGS)):
            check_choice(f"{FIELD}: sola option {name!r}", getattr(self, name), choices)


def sola_options(cfg: ModelConfig) -> SolaOptions:
    """cfg.model_options as SolaOptions; ValueError naming model.model_options."""
    return parse_model_options(SolaOptions, cfg, owner="sola model")


def _linear(rngs: nnx.Rngs, features_in: int, features_out: int) -> nnx.Linear:
    return nnx.Linear(features_in, features_out, kernel_init=nnx.initializers.xavier_uniform(), rngs=rngs)


class SolaAttention(nnx.Module):
    """Multi-head SoLA attention: x [B, N, D], directions [B, N, 3], neighbour table -> [B, N, D]."""

    def __init__(self, d_model: int, num_heads: int, head_dim: int, attention: str, *, rngs: nnx.Rngs) -> None:
        self.num_heads, self.head_dim, self.attention = num_heads, head_dim, attention
        width = num_heads * head_dim
        self.query, self.key, self.value = (_linear(rngs, d_model, width) for _ in range(3))
        self.out = _linear(rngs, width, d_model)
        # α_h: learnable for the softmax path (init π/4, φ of unit norm); the linear path keeps a = b fixed.
        self.alpha = nnx.Param(jnp.full((num_heads,), math.pi / 4, jnp.float32))

    def __call__(self, x: jax.Array, directions: jax.Array, mask: jax.Array,
                 table: tuple[jax.Array, jax.Array] | None) -> jax.Array:
        split = lambda y: y.reshape(*y.shape[:-1], self.num_heads, self.head_dim)
        queries, keys, values = split(self.query(x)), split(self.key(x)), split(self.value(x))
        if self.attention == "linear":
            alpha = jnp.full((self.num_heads,), LINEAR_ALPHA, jnp.float32)
            heads = linear_lifted_attention(queries, keys, values, direction_lift(directions, alpha), mask)
        else:
            phi = direction_lift(directions, self.alpha[...])
            heads = local_softmax_attention(queries, keys, values, phi, *table)
        return self.out(heads.reshape(*heads.shape[:-2], self.num_heads * self.head_dim))


class SolaBlock(nnx.Module):
    """Pre-norm block: x + SoLA(LN x), then x + MLP(LN x) (GELU, width cfg.resolved_mlp_dim). [B, N, D] -> [B, N, D]."""

    def __init__(self, cfg: ModelConfig, attention: str, *, rngs: nnx.Rngs) -> None:
        d_model = cfg.d_model
        self.attention_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.attention = SolaAttention(d_model, cfg.num_heads, cfg.resolved_head_dim, attention, rngs=rngs)
        self.mlp_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.mlp_up = _linear(rngs, d_model, cfg.resolved_mlp_dim)
        self.mlp_down = _linear(rngs, cfg.resolved_mlp_dim, d_model)

    def __call__(self, x: jax.Array, directions: jax.Array, mask: jax.Array,
                 table: tuple[jax.Array, jax.Array] | None) -> jax.Array:
        x = x + self.attention(self.attention_norm(x), directions, mask, table)
        return x + self.mlp_down(jax.nn.gelu(self.mlp_up(self.mlp_norm(x))))


def spherical_harmonic_features(directions: jax.Array, max_degree: int) -> jax.Array:
    """Real spherical harmonics of degrees 1..max_degree (e3nn-jax, component normalization) of unit
    directions [B, N, 3] -> [B, N, (max_degree + 1)² − 1]. They rotate with u (Wigner D), so a learned linear
    map of them is an absolute-position embedding."""
    try:
        import e3nn_jax as e3nn
    except ImportError as error:
        raise ImportError("sola's position_embedding='spherical_harmonics' needs e3nn-jax: "
                          "pip install 'icml26zoo[geometric]'") from error
    irreps = e3nn.Irreps.spherical_harmonics(max_degree)[1:]
    return e3nn.spherical_harmonics(irreps, directions, normalize=True, normalization="component").array


def check_unit_directions(points: jax.Array, weights: jax.Array) -> None:
    """ValueError naming `points` when a real token's direction is not a unit vector (UNIT_TOLERANCE)."""
    if points.shape[-1] != 3:
        raise ValueError(f"points must be unit directions [B, N, 3], got shape {list(points.shape)}")
    if not is_concrete(points, weights):
        return
    lengths = np.linalg.norm(np.asarray(points, np.float64), axis=-1)
    error = np.abs(lengths - 1.0) * (np.asarray(weights) > 0)
    if error.max() > UNIT_TOLERANCE:
        index = [int(i) for i in np.unravel_index(np.argmax(error), error.shape)]
        raise ValueError(f"points must be unit directions (| |u| - 1 | <= {UNIT_TOLERANCE}) at real tokens, "
                         f"got |u| = {lengths[tuple(index)]:.6g} at index {index} of shape {list(points.shape)}")


@register_model("sola", extras=("geometric",))
class SolaModel(nnx.Module):
    """SoLA transformer: (points [B, N, 3] unit, features [B, N, F], weights [B, N]) -> [B, N, O] or [B, O]."""

    LANGUAGE_MODEL = False
    options_class = SolaOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        options = sola_options(cfg)
        self.cfg, self.options = cfg, options
        self.embed = _linear(rngs, max(options.feature_dim, 1), cfg.d_model)
        if options.position_embedding == "spherical_harmonics":
            self.position = _linear(rngs, (options.lpe_degree + 1) ** 2 - 1, cfg.d_model)
        self.blocks = nnx.List([SolaBlock(cfg, options.attention, rngs=rngs) for _ in range(cfg.num_layers)])
        self.final_norm = nnx.LayerNorm(cfg.d_model, rngs=rngs)
        self.head = _linear(rngs, cfg.d_model, options.num_outputs)

    def _embed(self, points: jax.Array, features: jax.Array) -> jax.Array:
        if self.options.feature_dim == 0:
            features = jnp.zeros((*features.shape[:2], 1), jnp.float32)
        x = self.embed(features.astype(jnp.float32))
        if self.options.position_embedding == "spherical_harmonics":
            x = x + self.position(spherical_harmonic_features(points, self.options.lpe_degree))
        return x

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
        """points [B, N, 3] unit, features [B, N, F], weights [B, N] -> [B, N, O] ("point") or [B, O] ("pool")."""
        check_point_inputs(points, features, weights, dim=3)
        check_unit_directions(points, weights)
        if features.shape[-1] != self.options.feature_dim:
            raise ValueError(f"features must have F = feature_dim = {self.options.feature_dim} "
                             f"({FIELD}), got shape {list(features.shape)}")
        mask = point_mask(weights)
        table = None
        if self.options.attention == "local":
            table = neighbour_table(points, mask, min(self.options.neighbours, points.shape[1]))
        x = self._embed(points, features)
        for block in self.blocks:
            x = block(x, points, mask, table)
        x = self.final_norm(x)
        if self.options.readout == "pool":
            return self.head(masked_mean(x, weights))
        return self.head(x) * mask[:, :, None]
