"""Model "pacenet": a ViT-style stack of PACE attention (or CRATE's MSSA / ToST's TSSA) over a set of patch tokens.

PACEAttention (Yu, Zhang, Deng, Peng, ICML 2026) is a RECONSTRUCTION (`pace_layers`, `pace_ops`).

Interface (issue 20): `model(points, features, weights, *, key=None)` with points = patch centres [B, N, 2],
features = patch intensities [B, N, F], weights [B, N] (0 = padding). Token embedding: one Linear of
[features, points, sin/cos(π 2^j points) for j < fourier_frequencies] -> d. The position enters only through
the patch centre's coordinates (not a table indexed by patch order), so permuting the tokens permutes nothing
but the order of a set: the pooled output is exactly permutation invariant (`equivariance_errors`).
Blocks: x + Attn(LN x), then x + MLP(LN x) (the config's MLP), or with ffn="ista" CRATE's x <- ISTA(LN x).
Readout "pool": weighted mean over tokens, LayerNorm, Linear; "point": LayerNorm, Linear per token.

Randomness: the sketch of the expansion is drawn from `key` (fresh per training step when the caller passes the
objective's key). Without a key the forward is deterministic: the exact covariance when N <= sketch_rank
(a sketch of rank r >= N saves nothing), else a sketch seeded by the option `eval_seed` and the layer index.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.geometric.common import check_point_inputs, masked_mean
from icml26zoo.geometric.pace_layers import (
    ATTENTIONS,
    COMPRESS_MODES,
    EXPAND_MODES,
    ISTA,
    PaceLayerConfig,
    build_attention,
)
from icml26zoo.layers.mlp import build_mlp
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_choice, check_int, check_positive

FIELD = MODEL_OPTIONS_FIELD
READOUTS = ("pool", "point")
FFNS = ("mlp", "ista")


@dataclasses.dataclass(frozen=True)
class PaceNetOptions:
    """The pacenet model's options (ModelConfig.model_options)."""

    # Classes ("pool") or output channels per token ("point").
    num_outputs: int = 10
    readout: str = "pool"
    # Input features F per token (zoo_digit_patches: 4 intensities of a 2x2 patch) and point dimension d.
    num_features: int = 4
    point_dim: int = 2
    # Octaves of the sin/cos embedding of the patch centres.
    fourier_frequencies: int = 4
    # "pace" (the paper), "mssa" (CRATE), "tssa" (ToST): the token mixer of every block.
    attention: str = "pace"
    # PACE's expansion: "sketch" (randomized covariance, spec reading (a)), "exact", "subspace" (reading (b)).
    expand: str = "sketch"
    # PACE's compression: "subspace" (∇R_c in the head subspaces) or "tssa" (ToST's operator).
    compress: str = "subspace"
    # Columns r of the Gaussian sketch S [N, r].
    sketch_rank: int = 32
    # ε² of the coding rate (α = d / (n ε²)).
    eps_sq: float = 0.5
    # The second sublayer: "mlp" (pre-norm residual MLP) or "ista" (CRATE's sparse-coding step).
    ffn: str = "mlp"
    # Seed of the deterministic (key=None) sketch.
    eval_seed: int = 0

    def __post_init__(self) -> None:
        for name, low in (("num_outputs", 1), ("num_features", 0), ("point_dim", 1), ("fourier_frequencies", 0),
                          ("sketch_rank", 1), ("eval_seed", 0)):
            check_int(f"{FIELD}: pacenet option {name!r}", getattr(self, name), minimum=low)
        for name, choices in (("readout", READOUTS), ("attention", ATTENTIONS), ("expand", EXPAND_MODES),
                              ("compress", COMPRESS_MODES), ("ffn", FFNS)):
            check_choice(f"{FIELD}: pacenet option {name!r}", getattr(self, name), choices)
        check_positive(f"{FIELD}: pacenet option 'eps_sq'", self.eps_sq)


def pacenet_options(cfg: ModelConfig) -> PaceNetOptions:
    """cfg.model_options as PaceNetOptions; ValueError naming model.model_options."""
    return parse_model_options(PaceNetOptions, cfg, owner="pacenet model")


def fourier_features(points: jax.Array, num_frequencies: int) -> jax.Array:
    """points [B, N, d] -> [B, N, d (1 + 2 num_frequencies)]: the points, then sin and cos of π 2^j points."""
    scales = jnp.pi * 2.0 ** jnp.arange(num_frequencies, dtype=jnp.float32)
    angles = (points[..., None] * scales).reshape(*points.shape[:-1], -1)
    return jnp.concatenate([points, jnp.sin(angles), jnp.cos(angles)], axis=-1)


class PaceBlock(nnx.Module):
    """x + Attn(LN x), then x + MLP(LN x) or ISTA(LN x). x [B, N, d] -> [B, N, d]."""

    def __init__(self, cfg: ModelConfig, options: PaceNetOptions, *, rngs: nnx.Rngs) -> None:
        layer = PaceLayerConfig(dim=cfg.d_model, num_heads=cfg.num_heads, eps_sq=float(options.eps_sq),
                                expand=options.expand, compress=options.compress, sketch_rank=options.sketch_rank)
        self.ffn_kind = options.ffn
        self.attention_norm = nnx.LayerNorm(cfg.d_model, rngs=rngs)
        self.attention = build_attention(options.attention, layer, rngs=rngs)
        self.ffn_norm = nnx.LayerNorm(cfg.d_model, rngs=rngs)
        if options.ffn == "ista":
            self.ffn = ISTA(cfg.d_model, rngs=rngs)
        else:
            self.ffn = build_mlp(cfg.mlp_activation, cfg.d_model, cfg.resolved_mlp_dim, rngs=rngs)

    def __call__(self, x: jax.Array, weights: jax.Array, key: jax.Array | None) -> jax.Array:
        x = x + self.attention(self.attention_norm(x), weights, key)
        if self.ffn_kind == "ista":
            return self.ffn(self.ffn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


@register_model("pacenet")
class PaceNet(nnx.Module):
    """(points [B, N, d], features [B, N, F], weights [B, N]) -> logits [B, O] ("pool") or [B, N, O] ("point")."""

    LANGUAGE_MODEL = False
    # The objectives pass their key (zoo/losses/geometric.py): a fresh sketch every training step.
    TAKES_KEY = True
    options_class = PaceNetOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        options = pacenet_options(cfg)
        if cfg.d_model % cfg.num_heads:
            raise ValueError(f"model.d_model must be a multiple of model.num_heads for pacenet (head dim p = d/K), "
                             f"got d_model={cfg.d_model}, num_heads={cfg.num_heads}")
        self.cfg, self.options = cfg, options
        embed_in = options.num_features + options.point_dim * (1 + 2 * options.fourier_frequencies)
        self.embed = nnx.Linear(embed_in, cfg.d_model, rngs=rngs)
        self.blocks = nnx.List([PaceBlock(cfg, options, rngs=rngs) for _ in range(cfg.num_layers)])
        self.final_norm = nnx.LayerNorm(cfg.d_model, rngs=rngs)
        self.head = nnx.Linear(cfg.d_model, options.num_outputs, rngs=rngs)

    def _check(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> None:
        check_point_inputs(points, features, weights, dim=self.options.point_dim)
        if features.shape[-1] != self.options.num_features:
            raise ValueError(f"features must have F = num_features = {self.options.num_features} ({FIELD}), "
                             f"got shape {list(features.shape)}")

    def layer_keys(self, num_tokens: int, key: jax.Array | None) -> list[jax.Array | None]:
        """One sketch key per block: None (exact covariance) when N <= sketch_rank, since a sketch then saves
        nothing; else from `key`, or seeded by eval_seed without one."""
        if num_tokens <= self.options.sketch_rank:
            return [None] * len(self.blocks)
        if key is None:
            key = jax.random.key(self.options.eval_seed)
        return [jax.random.fold_in(key, index) for index in range(len(self.blocks))]

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array, *,
                 key: jax.Array | None = None) -> jax.Array:
        """points [B, N, d], features [B, N, F], weights [B, N], optional PRNG key -> [B, O] or [B, N, O]."""
        self._check(points, features, weights)
        weights = weights.astype(jnp.float32)
        tokens = jnp.concatenate([features, fourier_features(points, self.options.fourier_frequencies)], axis=-1)
        x = self.embed(tokens.astype(jnp.float32))
        for block, layer_key in zip(self.blocks, self.layer_keys(points.shape[1], key), strict=True):
            x = block(x, weights, layer_key)
        if self.options.readout == "point":
            return self.head(self.final_norm(x))
        return self.head(self.final_norm(masked_mean(x, weights)))



def _apply_token_map(maps: jax.Array, values: jax.Array) -> jax.Array:
    """maps [B, N, N] (permutation or mixing matrices) applied over tokens of values [B, N, C] -> [B, N, C]."""
    return jnp.einsum("bij,bjc->bic", maps, values)


def _output_error(model: Callable, maps: jax.Array, inputs: tuple[jax.Array, jax.Array, jax.Array],
                  reference: jax.Array, *, move_weights: bool) -> float:
    """max |f(M x) − f(x)| (pooled [B, O]) or max over real tokens of |f(M x) − M f(x)| (per token [B, N, O]).

    M [B, N, N] acts on points and features, and on weights too when `move_weights`.
    """
    points, features, weights = inputs
    if move_weights:
        weights = _apply_token_map(maps, weights[..., None])[..., 0]
    moved = model(_apply_token_map(maps, points), _apply_token_map(maps, features), weights)
    if moved.ndim == 2:
        return float(jnp.max(jnp.abs(moved - reference)))
    difference = jnp.where((weights > 0)[..., None], jnp.abs(moved - _apply_token_map(maps, reference)), 0.0)
    return float(jnp.max(difference))


@functools.partial(jax.jit, static_argnums=1)
def random_token_maps(key: jax.Array, shape: tuple[int, int]) -> tuple[jax.Array, jax.Array]:
    """(random permutation matrices, random orthogonal mixings), both [B, N, N] for shape (B, N).

    A mixing is the product of two Householder reflections I − 2 v vᵀ / |v|² with Gaussian v: orthogonal,
    dense, and (almost surely) not a permutation. Built without LAPACK (no QR), see pace_ops._cholesky.
    """
    batch, num_tokens = shape
    permutation_key, mixing_key = jax.random.split(key)
    orders = jax.vmap(lambda k: jax.random.permutation(k, num_tokens))(jax.random.split(permutation_key, batch))
    vectors = jax.random.normal(mixing_key, (2, batch, num_tokens), jnp.float32)
    vectors = vectors / jnp.linalg.norm(vectors, axis=-1, keepdims=True)
    identity = jnp.eye(num_tokens, dtype=jnp.float32)
    first, second = (identity - 2.0 * v[:, :, None] * v[:, None, :] for v in vectors)
    return jax.nn.one_hot(orders, num_tokens, dtype=jnp.float32), first @ second


def _compiled(model: Callable) -> Callable:
    """model(points, features, weights) as one jitted program when it is an nnx module, else unchanged."""
    if not isinstance(model, nnx.Module):
        return model
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, points, features, weights: nnx.merge(graphdef, state)(points, features, weights))
    return lambda points, features, weights: forward(state, points, features, weights)


def equivariance_errors(model: Callable, points: jax.Array, features: jax.Array, weights: jax.Array,
                        key: jax.Array, num_transforms: int = 3) -> dict[str, float]:
    """The pacenet symmetry check: {"in_group": ..., "out_of_group": ...}, max abs output errors.

    The group is the permutations of the tokens (a set model): "in_group" applies `num_transforms` random
    permutations per example to points, features and weights together (pooled outputs must not change;
    per-token outputs must permute alongside). "out_of_group" applies random orthogonal N×N mixings to the
    tokens' points and features, weights left in place: a linear map of the set that is not a
    permutation, under which the outputs change (random_token_maps). The model runs deterministically
    (key=None); an nnx model (pacenet or the baseline) is validated eagerly once, then compiled once.
    """
    inputs = (points, features, weights)
    check_point_inputs(*inputs)
    model = _compiled(model)
    reference = model(*inputs)
    in_group, out_of_group = 0.0, 0.0
    for transform_key in jax.random.split(key, num_transforms):
        permutations, mixings = random_token_maps(transform_key, weights.shape)
        in_group = max(in_group, _output_error(model, permutations, inputs, reference, move_weights=True))
        out_of_group = max(out_of_group, _output_error(model, mixings, inputs, reference, move_weights=False))
    return {"in_group": in_group, "out_of_group": out_of_group}
