"""What every geometric model (issue 20) shares: input validation, masked reductions, random rotations.

The interface (see `icml26zoo.geometric`): `model(points, features, weights) -> outputs` with
    points   float32 [B, N, d]  coordinates (d = 3 point clouds, unit directions on S², d = 2 meshes)
    features float32 [B, N, F]  per-point features (F may be 0)
    weights  float32 [B, N]     0 marks padding; > 0 a real point (a mesh's quadrature weight)
Padding must not influence any real output, so every sum, softmax and pooling goes through the masked
helpers here. A row made only of padding (the eval pipeline pads its last batch with such rows) must stay
finite: the helpers return zeros there instead of dividing by zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_float_array

# Logit given to masked keys: exp(-1e9 - max) underflows to exactly 0 in float32.
MASKED_LOGIT = -1e9


def is_concrete(*arrays: object) -> bool:
    """Whether none of `arrays` is a tracer, i.e. their values can be checked eagerly (not under jit)."""
    return not any(isinstance(array, jax.core.Tracer) for array in arrays)


def check_point_inputs(points: jax.Array, features: jax.Array, weights: jax.Array, *,
                       dim: int | None = None) -> None:
    """Raises ValueError naming `points`, `features` or `weights` unless they follow the interface.

    Always checked: ranks, float dtypes, matching B and N (and d == `dim` when given). When the arrays are
    concrete (not traced under jit), also: finite coordinates and features, finite weights >= 0, and at least
    one real point (weight > 0) in every example.
    """
    check_float_array("points", points, (None, None, None), "[B, N, d]")
    check_float_array("features", features, (None, None, None), "[B, N, F]")
    check_float_array("weights", weights, (None, None), "[B, N]")
    batch, num_points, point_dim = points.shape
    if dim is not None and point_dim != dim:
        raise ValueError(f"points must have shape [B, N, {dim}], got shape {list(points.shape)}")
    if features.shape[:2] != (batch, num_points):
        raise ValueError(f"features must have shape [B, N, F] = [{batch}, {num_points}, F] like points, "
                         f"got shape {list(features.shape)}")
    if weights.shape != (batch, num_points):
        raise ValueError(f"weights must have shape [B, N] = [{batch}, {num_points}] like points, "
                         f"got shape {list(weights.shape)}")
    if not is_concrete(points, features, weights):
        return
    _check_values(np.asarray(points), np.asarray(features), np.asarray(weights))


def _check_values(points: np.ndarray, features: np.ndarray, weights: np.ndarray) -> None:
    if not np.all(np.isfinite(points)):
        bad = np.argwhere(~np.isfinite(points))[0].tolist()
        raise ValueError(f"points must be finite coordinates, got {points[tuple(bad)]} at index {bad} "
                         f"(shape {list(points.shape)})")
    if not np.all(np.isfinite(features)):
        bad = np.argwhere(~np.isfinite(features))[0].tolist()
        raise ValueError(f"features must be finite, got {features[tuple(bad)]} at index {bad} "
                         f"(shape {list(features.shape)})")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError(f"weights must be finite and >= 0 (0 marks padding), got values in "
                         f"[{np.nanmin(weights)}, {np.nanmax(weights)}]")
    empty = np.flatnonzero(~np.any(weights > 0, axis=1))
    if empty.size:
        raise ValueError(f"weights must mark at least one real point (weight > 0) in every example; examples "
                         f"{empty.tolist()} of weights {list(weights.shape)} have zero real points")


def point_mask(weights: jax.Array) -> jax.Array:
    """weights [B, N] -> float32 [B, N]: 1 for real points, 0 for padding."""
    return (weights > 0).astype(jnp.float32)


def masked_mean(values: jax.Array, weights: jax.Array) -> jax.Array:
    """Weighted mean over points: values [B, N, C], weights [B, N] -> [B, C] = Σ_i w_i v_i / Σ_i w_i.

    With quadrature weights this is the mesh integral divided by the area; with 0/1 weights the mean over
    real points. A row without real points gives zeros (never NaN).
    """
    weights = weights.astype(values.dtype)
    total = jnp.sum(weights, axis=1, keepdims=True)
    summed = jnp.sum(values * weights[:, :, None], axis=1)
    return jnp.where(total > 0, summed / jnp.where(total > 0, total, 1.0), 0.0)


def masked_max(values: jax.Array, weights: jax.Array) -> jax.Array:
    """Max over real points: values [B, N, C], weights [B, N] -> [B, C]; zeros for a row without real points."""
    real = (weights > 0)[:, :, None]
    largest = jnp.max(jnp.where(real, values, -jnp.inf), axis=1)
    return jnp.where(jnp.any(real, axis=1), largest, 0.0).astype(values.dtype)


def masked_softmax(logits: jax.Array, key_weights: jax.Array) -> jax.Array:
    """Softmax over the last axis of logits [..., N] with padding keys (key_weights [..., N] == 0) excluded.

    key_weights broadcasts against logits (e.g. [B, 1, 1, N] for [B, H, N, N] scores). Padding keys get
    probability exactly 0; a query whose keys are all padding gets all zeros.
    """
    real = jnp.broadcast_to(key_weights > 0, logits.shape)
    masked = jnp.where(real, logits, MASKED_LOGIT)
    probs = jax.nn.softmax(masked, axis=-1)
    return jnp.where(real, probs, 0.0).astype(logits.dtype)


def rotation_from_quaternion(quaternion: jax.Array) -> jax.Array:
    """Unit quaternions [..., 4] (w, x, y, z) -> rotation matrices [..., 3, 3] (acting on column vectors)."""
    w, x, y, z = (quaternion[..., i] for i in range(4))
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(row, axis=-1) for row in rows], axis=-2)


def random_rotation(key: jax.Array, shape: tuple[int, ...] = ()) -> jax.Array:
    """Haar-uniform rotations in SO(3): float32 [*shape, 3, 3].

    A standard normal 4-vector normalized is uniform on S³, and the double cover S³ -> SO(3) carries the
    uniform measure to the Haar measure.
    """
    quaternion = jax.random.normal(key, (*shape, 4), jnp.float32)
    quaternion = quaternion / jnp.linalg.norm(quaternion, axis=-1, keepdims=True)
    return rotation_from_quaternion(quaternion)


def rotate_points(points: jax.Array, rotation: jax.Array) -> jax.Array:
    """points [B, N, 3] rotated by rotation [3, 3] or [B, 3, 3]: p -> R p for every point."""
    if rotation.ndim == 2:
        return points @ rotation.T
    return jnp.einsum("bij,bnj->bni", rotation, points)
