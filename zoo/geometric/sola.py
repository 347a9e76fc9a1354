"""SoLA family (issue 20): Sekikawa, Nagata, Araki, Eto, "Spherical SO(3) Equivariant Local Attention"
(ICML 2026). RECONSTRUCTION (no paper code): the operators live in `sola_attention`, the registered model
"sola" in `sola_model`; this module adds the symmetry measurement every family exports.

The symmetry: tokens carry unit directions u_i ∈ S² and scalar features; a global rotation R ∈ SO(3) of every
direction must leave every output unchanged (the outputs are scalar fields attached to the rotated points).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.geometric.common import check_point_inputs, random_rotation, rotate_points
from icml26zoo.geometric.sola_attention import (
    direction_lift,
    lifted_scores,
    linear_lifted_attention,
    linear_lifted_attention_reference,
    local_softmax_attention,
    neighbour_table,
)
from icml26zoo.geometric.sola_model import SolaModel, SolaOptions, check_unit_directions

# Random rotations per in-group measurement.
NUM_ROTATIONS = 4
# The out-of-group map's axis stretches (applied in a random frame, then renormalized onto S²).
STRETCH = (1.6, 1.0, 0.6)


def stretch_directions(points: jax.Array, key: jax.Array) -> jax.Array:
    """A non-orthogonal linear map of the directions, renormalized: u -> A u / ‖A u‖ with A = Q diag(STRETCH) Qᵀ,
    Q a random rotation. It keeps tokens on S² but changes their great-circle distances, so it lies outside
    SO(3). points [B, N, 3] -> [B, N, 3] (zero padding rows stay zero)."""
    frame = random_rotation(key)
    matrix = frame @ jnp.diag(jnp.asarray(STRETCH, jnp.float32)) @ frame.T
    mapped = points @ matrix.T
    norm = jnp.linalg.norm(mapped, axis=-1, keepdims=True)
    return jnp.where(norm > 0, mapped / jnp.where(norm > 0, norm, 1.0), 0.0)


def compiled(model: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
             ) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    """An nnx model as one jitted function of (points, features, weights); any other callable unchanged."""
    if not isinstance(model, nnx.Module):
        return model
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, points, features, weights: nnx.merge(graphdef, state)(points, features, weights))
    return lambda points, features, weights: forward(state, points, features, weights)


def _max_real_error(reference: jax.Array, other: jax.Array, weights: jax.Array) -> float:
    """max |other − reference| over real tokens (per-point outputs) or over examples (pooled outputs)."""
    difference = jnp.abs(other - reference)
    if difference.ndim == 3:
        difference = jnp.where((weights > 0)[:, :, None], difference, 0.0)
    return float(jnp.max(difference))


def equivariance_errors(model: nnx.Module, points: jax.Array, features: jax.Array, weights: jax.Array,
                        key: jax.Array) -> dict[str, float]:
    """Max abs output change of `model` under transformations of the directions points [B, N, 3].

    "in_group": NUM_ROTATIONS Haar-random rotations R ∈ SO(3) of every direction (features kept): SoLA's
    outputs must not change (float32 round-off only). "out_of_group": `stretch_directions`, a non-orthogonal
    linear map renormalized onto S², which changes the geodesic distances the attention reads, so the outputs
    must change. The same call on a model with position_embedding="spherical_harmonics" (the negative control)
    gives a large "in_group" error. Works for any model with the issue-20 call signature (the set_transformer
    baseline too). The inputs are validated eagerly, then every forward runs compiled (`compiled`).
    """
    check_point_inputs(points, features, weights, dim=3)
    check_unit_directions(points, weights)
    model = compiled(model)
    rotation_key, stretch_key = jax.random.split(key)
    reference = model(points, features, weights)
    rotations = random_rotation(rotation_key, (NUM_ROTATIONS,))
    in_group = max(
        _max_real_error(reference, model(rotate_points(points, rotation), features, weights), weights)
        for rotation in rotations
    )
    stretched = model(stretch_directions(points, stretch_key), features, weights)
    return {"in_group": in_group, "out_of_group": _max_real_error(reference, stretched, weights)}


__all__ = [
    "NUM_ROTATIONS",
    "STRETCH",
    "SolaModel",
    "SolaOptions",
    "check_unit_directions",
    "compiled",
    "direction_lift",
    "equivariance_errors",
    "lifted_scores",
    "linear_lifted_attention",
    "linear_lifted_attention_reference",
    "local_softmax_attention",
    "neighbour_table",
    "stretch_directions",
]
