"""Cα structures as arrays, and what the protein tokenizer needs around them: validation, centring, optimal rigid
alignment (Kabsch) and the aligned RMSD, and the nested-dropout prefix masks.

Shapes: coordinates [B, N, 3] float (padded chains), weights [B, N] (> 0 on the L_b real residues of row b, 0 on
padding; the real residues come first). Coordinates are in the units of the data (the zoo's backbones are in nm,
Å / 10, as "Adaptive Protein Tokenization", arXiv 2602.06418, feeds its model).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_float_array, check_int, check_probability

# Added to the denominators of weighted means: a row of padding only gives 0, not NaN.
_TINY = 1e-12


def check_structures(coordinates: jax.Array, weights: jax.Array, field: str = "coordinates") -> None:
    """ValueError naming `field` (or "weights") unless coordinates [B, N, 3] and weights [B, N] are shaped and
    typed so; when the arrays are concrete (not traced under jit), also unless every coordinate is finite (a NaN
    coordinate names its row and residue)."""
    check_float_array(field, coordinates, (None, None, 3), "[B, N, 3]")
    check_float_array("weights", weights, coordinates.shape[:2], "[B, N]")
    if isinstance(coordinates, jax.core.Tracer):
        return
    finite = np.isfinite(np.asarray(coordinates))
    if not finite.all():
        row, residue, _ = np.argwhere(~finite)[0].tolist()
        raise ValueError(f"{field} must be finite; row {row}, residue {residue} is "
                         f"{np.asarray(coordinates)[row, residue].tolist()} (a NaN or infinite coordinate)")


def residue_counts(weights: jax.Array) -> jax.Array:
    """weights [B, N] -> int32 [B]: L_b, the real residues of each row."""
    return jnp.sum(weights > 0, axis=1).astype(jnp.int32)


def centre(coordinates: jax.Array, weights: jax.Array) -> jax.Array:
    """Subtracts each row's mean over its real residues; padding stays where it was. [B, N, 3] -> [B, N, 3]."""
    mask = (weights > 0).astype(jnp.float32)[..., None]
    mean = jnp.sum(mask * coordinates, axis=1, keepdims=True) / (jnp.sum(mask, axis=1, keepdims=True) + _TINY)
    return coordinates - mask * mean


def kabsch_rotation(moving: jax.Array, fixed: jax.Array, weights: jax.Array) -> jax.Array:
    """The rotation R [B, 3, 3] (det +1) minimising Σ_i w_i ‖R m_i − f_i‖² for centred moving, fixed [B, N, 3]
    (Kabsch: the SVD of the covariance Σ_i w_i f_i m_iᵀ, with the reflection fix)."""
    mask = (weights > 0).astype(jnp.float32)[..., None]
    covariance = jnp.einsum("bni,bnj->bij", mask * fixed, moving)
    u, _, vt = jnp.linalg.svd(covariance)
    sign = jnp.sign(jnp.linalg.det(u @ vt))
    # Flip the last singular direction when U Vᵀ is a reflection.
    correction = jnp.ones_like(covariance[:, 0]).at[:, 2].set(jnp.where(sign == 0, 1.0, sign))
    return jnp.einsum("bij,bj,bjk->bik", u, correction, vt)


def aligned_rmsd(predicted: jax.Array, target: jax.Array, weights: jax.Array) -> jax.Array:
    """RMSD [B] over each row's real residues after centring both and rotating `predicted` onto `target`
    optimally (no gradient is meant to flow through it: it is an evaluation metric)."""
    predicted, target = centre(predicted, weights), centre(target, weights)
    rotation = kabsch_rotation(predicted, target, weights)
    aligned = jnp.einsum("bij,bnj->bni", rotation, predicted)
    mask = (weights > 0).astype(jnp.float32)
    squared = jnp.sum(mask * jnp.sum(jnp.square(aligned - target), axis=-1), axis=1)
    return jnp.sqrt(squared / (jnp.sum(mask, axis=1) + _TINY))


def token_counts(weights: jax.Array, n_tokens: int) -> jax.Array:
    """int32 [B]: min(L_b, n_tokens), the tokens that exist for each row (token i sits on encoder position i)."""
    return jnp.minimum(residue_counts(weights), check_int("n_tokens", n_tokens))


def prefix_mask(keep: jax.Array, n_tokens: int) -> jax.Array:
    """keep int [B] -> float32 [B, n_tokens]: 1 at token indices < keep_b, 0 from keep_b on (monotone)."""
    return (jnp.arange(n_tokens)[None, :] < keep[:, None]).astype(jnp.float32)


def nested_dropout_keep(key: jax.Array, weights: jax.Array, n_tokens: int, *, min_tokens: int = 1,
                        drop_all_probability: float = 0.05) -> jax.Array:
    """The nested-dropout cut-off per row, int32 [B]: k_b ~ UniformInt[min_tokens, min(L_b, n_tokens)) (upper bound
    excluded, as the paper's code draws it; k_b = min_tokens when that range is empty), and k_b = 0 (every token
    zeroed) with probability `drop_all_probability`."""
    check_int("min_tokens", min_tokens, minimum=0)
    check_probability("drop_all_probability", drop_all_probability)
    cut_key, drop_key = jax.random.split(key)
    upper = jnp.maximum(token_counts(weights, n_tokens), min_tokens + 1)
    keep = jax.random.randint(cut_key, upper.shape, min_tokens, upper)
    dropped = jax.random.bernoulli(drop_key, drop_all_probability, upper.shape)
    return jnp.where(dropped, 0, keep).astype(jnp.int32)
