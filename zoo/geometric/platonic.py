"""The Platonic Transformer (Islam, Anand, Wessels, de Kruiff, Kuipers, Ying, Sánchez, Vadgama, Bökman,
Bekkers: "Platonic Transformers: A Solid Choice For Equivariance", arXiv 2510.03511), registered as model
"platonic".

Positions are the points [B, N, 3]; features are per-point scalars [B, N, F] (optional per-point vectors
[B, N, V, 3] through `predict`). The features are lifted to functions on a finite rotation group G (frames),
embedded by a group-convolution linear map, processed by pre-norm blocks of frame-relative attention with
group-rotated RoPE (softmax, or the linear-time dynamic group convolution), pooled over real points (weighted
mean) for readout "pool", and read out by a small group-convolution MLP: scalars by the mean over frames
(invariant to G and to translations), vectors rotated back to the global frame (equivariant).

Sizes: ModelConfig.d_model = G·C (C channels per frame) and ModelConfig.num_heads = G·H_e (H_e heads per
frame, D_h = C / H_e even), as in the paper's configs (e.g. octahedral, d_model 384, 48 heads: C = 16, H_e = 2).
The layers are in `platonic_layers`, the groups in `platonic_groups`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.geometric.common import check_point_inputs, masked_mean, random_rotation
from icml26zoo.geometric.platonic_groups import GROUP_NAMES, platonic_group
from icml26zoo.geometric.platonic_layers import (
    ATTENTION_MODES,
    FREQ_INITS,
    PlatonicBlock,
    PlatonicLinear,
    gelu,
    group_elements,
    lift,
    readout_scalars,
    readout_vectors,
)
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int

FIELD = MODEL_OPTIONS_FIELD
READOUTS = ("pool", "point")


@dataclasses.dataclass(frozen=True)
class PlatonicOptions:
    """The platonic model's options (ModelConfig.model_options)."""

    # Outputs per example (readout "pool") or per point ("point"): classes or regression channels.
    num_outputs: int = 1
    # "pool": [B, num_outputs] from the weighted mean over real points; "point": [B, N, num_outputs].
    readout: str = "pool"
    # The symmetry group (platonic_groups.GROUP_NAMES): trivial, tetrahedral, octahedral, icosahedral, axis_sign.
    group: str = "octahedral"
    # Scalar features F per point (the last axis of `features`).
    feature_dim: int = 0
    # Vector features V per point (predict's `vectors` [B, N, V, 3]) and vector outputs per example/point.
    vector_feature_dim: int = 0
    num_vector_outputs: int = 0
    # "softmax" attention or "linear" (the linear-time dynamic group convolution, Z = real points per example).
    attention: str = "softmax"
    # A learned key projection; False (the paper's default) uses k = ones, so scores depend on q_i and p_i − p_j.
    use_key: bool = False
    # Rotate values by θ_j and un-rotate the output by θ_i (the paper's reference config does).
    rope_on_values: bool = True
    # RoPE frequency scale σ, initialization ("spiral" or "random" N(0, σ²)) and whether it is learned.
    rope_sigma: float = 1.0
    freq_init: str = "spiral"
    learned_freqs: bool = True
    # FFN hidden width per frame as a multiple of C.
    ffn_multiplier: int = 4

    def __post_init__(self) -> None:
        for name in ("num_outputs", "ffn_multiplier"):
            check_int(f"{FIELD}: platonic option {name!r}", getattr(self, name), minimum=1)
        for name in ("feature_dim", "vector_feature_dim", "num_vector_outputs"):
            check_int(f"{FIELD}: platonic option {name!r}", getattr(self, name), minimum=0)
        for name, value, choices in (("readout", self.readout, READOUTS), ("group", self.group, GROUP_NAMES),
                                     ("attention", self.attention, ATTENTION_MODES),
                                     ("freq_init", self.freq_init, FREQ_INITS)):
            if value not in choices:
                raise ValueError(f"{FIELD}: platonic option {name!r} must be one of {list(choices)}, got {value!r}")
        if not self.rope_sigma > 0:
            raise ValueError(f"{FIELD}: platonic option 'rope_sigma' must be > 0, got {self.rope_sigma!r}")




def frame_sizes(cfg: ModelConfig, group: str) -> tuple[int, int]:
    """(C, H_e): channels and heads per frame from d_model = G·C and num_heads = G·H_e; ValueError otherwise."""
    order = platonic_group(group).order
    if cfg.d_model % order or cfg.num_heads % order:
        raise ValueError(f"model.d_model and model.num_heads must be multiples of the group order {order} "
                         f"({group}), got d_model={cfg.d_model}, num_heads={cfg.num_heads}")
    channels, heads = cfg.d_model // order, cfg.num_heads // order
    if channels % heads or (channels // heads) % 2:
        raise ValueError(f"channels per frame C = d_model/G = {channels} must be H_e·D_h with H_e = num_heads/G = "
                         f"{heads} and D_h even (RoPE pairs), got d_model={cfg.d_model}, num_heads={cfg.num_heads}")
    return channels, heads


class _ReadoutMLP(nnx.Module):
    """PlatonicLinear(C -> C), exact (erf) GELU, PlatonicLinear(C -> outputs): [..., G, C] -> [..., G, outputs]."""

    def __init__(self, group: str, channels: int, outputs: int, *, rngs: nnx.Rngs) -> None:
        self.hidden = PlatonicLinear(group, channels, channels, rngs=rngs)
        self.out = PlatonicLinear(group, channels, outputs, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(gelu(self.hidden(x)))


@register_model("platonic")
class PlatonicTransformer(nnx.Module):
    """`model(points [B, N, 3], features [B, N, F], weights [B, N]) -> [B, num_outputs]` (readout "pool") or
    `[B, N, num_outputs]` ("point"), invariant to the group's rotations and to translations of the points."""

    LANGUAGE_MODEL = False
    options_class = PlatonicOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        options = parse_model_options(PlatonicOptions, cfg, owner="platonic model")
        self.options = options
        self.channels, self.heads = frame_sizes(cfg, options.group)
        group, channels = options.group, self.channels
        # Without input features every point gets the constant scalar 1 (its presence), an invariant input.
        lifted = max(options.feature_dim + 3 * options.vector_feature_dim, 1)
        self.embed = PlatonicLinear(group, lifted, channels, use_bias=False, rngs=rngs)
        self.blocks = nnx.List([
            PlatonicBlock(group, channels, self.heads, ffn_multiplier=options.ffn_multiplier, rngs=rngs,
                          attention=options.attention, use_key=options.use_key,
                          rope_on_values=options.rope_on_values, rope_sigma=options.rope_sigma,
                          freq_init=options.freq_init, learned_freqs=options.learned_freqs)
            for _ in range(cfg.num_layers)
        ])
        self.scalar_readout = _ReadoutMLP(group, channels, options.num_outputs, rngs=rngs)
        self.vector_readout = (_ReadoutMLP(group, channels, 3 * options.num_vector_outputs, rngs=rngs)
                               if options.num_vector_outputs else None)

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
        """points [B, N, 3], features [B, N, F], weights [B, N] -> float32 [B, num_outputs] or [B, N, num_outputs]."""
        return self.predict(points, features, weights)[0]

    def predict(self, points: jax.Array, features: jax.Array, weights: jax.Array,
                vectors: jax.Array | None = None) -> tuple[jax.Array, jax.Array | None]:
        """(scalars, vectors): scalars [B, num_outputs] ("pool") or [B, N, num_outputs] ("point"), invariant;
        vectors [B, num_vector_outputs, 3] or [B, N, num_vector_outputs, 3], equivariant (None without vector
        outputs). `vectors` are the vector features [B, N, V, 3] (None when V = 0)."""
        self._check_inputs(points, features, weights, vectors)
        elements = group_elements(self.options.group, points.dtype)
        mask = weights > 0
        if features.shape[-1] == 0 and vectors is None:
            features = jnp.ones((*points.shape[:2], 1), points.dtype)
        x = self.embed(lift(features, vectors, elements))
        for block in self.blocks:
            x = block(x, points, mask)
        if self.options.readout == "pool":
            batch, num_points = x.shape[:2]
            x = masked_mean(x.reshape(batch, num_points, -1), weights).reshape(batch, *x.shape[2:])
        scalars = readout_scalars(self.scalar_readout(x))
        vectors = None if self.vector_readout is None else readout_vectors(self.vector_readout(x), elements)
        if self.options.readout == "point":
            # Padding rows are set to zero so that nothing downstream mistakes them for predictions.
            real = mask.astype(scalars.dtype)
            scalars = scalars * real[:, :, None]
            vectors = None if vectors is None else vectors * real[:, :, None, None]
        return scalars, vectors

    def _check_inputs(self, points: jax.Array, features: jax.Array, weights: jax.Array,
                      vectors: jax.Array | None) -> None:
        check_point_inputs(points, features, weights, dim=3)
        if features.shape[-1] != self.options.feature_dim:
            raise ValueError(f"features must have shape [B, N, F] with F = feature_dim = {self.options.feature_dim} "
                             f"(model.model_options), got shape {list(features.shape)}")
        expected = (*points.shape[:2], self.options.vector_feature_dim, 3)
        if self.options.vector_feature_dim == 0 and vectors is None:
            return
        if vectors is None or vectors.shape != expected:
            got = None if vectors is None else list(vectors.shape)
            raise ValueError(f"vectors must have shape [B, N, V, 3] = {list(expected)} (V = vector_feature_dim, "
                             f"model.model_options), got {got}")


@nnx.jit
def _forward(model: PlatonicTransformer, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
    return model(points, features, weights)


def equivariance_errors(model: PlatonicTransformer, points: jax.Array, features: jax.Array, weights: jax.Array,
                        key: jax.Array, *, num_transforms: int = 4) -> dict[str, float]:
    """Max abs change of the model's (invariant) outputs under transformations of the points.

    "in_group": `num_transforms` elements of the model's group drawn uniformly (with replacement);
    "out_of_group": as many Haar-random rotations of SO(3) (almost surely outside the finite group);
    "translation": as many random shifts of all points, N(0, 1) per axis (outputs are translation-invariant).
    points [B, N, 3], features [B, N, F], weights [B, N]. The untransformed input and the 3·num_transforms
    transformed copies go through one jitted call ([(1 + 3·num_transforms)·B, N, ...]).
    """
    check_point_inputs(points, features, weights, dim=3)
    elements = jnp.asarray(platonic_group(model.options.group).elements, points.dtype)
    pick, rotate, shift = jax.random.split(key, 3)
    identity = jnp.broadcast_to(jnp.eye(3, dtype=points.dtype), (num_transforms, 3, 3))
    rotations = jnp.concatenate([
        identity[:1],
        elements[jax.random.randint(pick, (num_transforms,), 0, elements.shape[0])],
        random_rotation(rotate, (num_transforms,)).astype(points.dtype),
        identity,
    ])
    offsets = jnp.concatenate([jnp.zeros((1 + 2 * num_transforms, 3), points.dtype),
                               jax.random.normal(shift, (num_transforms, 3), points.dtype)])
    copies = rotations.shape[0]
    moved = jnp.einsum("kij,bnj->kbni", rotations, points) + offsets[:, None, None, :]
    tile = lambda a: jnp.broadcast_to(a, (copies, *a.shape)).reshape(copies * a.shape[0], *a.shape[1:])
    outputs = _forward(model, moved.reshape(-1, *points.shape[1:]), tile(features), tile(weights))
    outputs = outputs.reshape(copies, points.shape[0], *outputs.shape[1:])
    errors = jnp.abs(outputs[1:] - outputs[:1]).reshape(3, num_transforms, -1).max(axis=(1, 2))
    return {"in_group": float(errors[0]), "out_of_group": float(errors[1]), "translation": float(errors[2])}
