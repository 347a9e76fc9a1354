"""Nearest-codebook vector quantisation (VQ-VAE, "Neural Discrete Representation Learning", arXiv 1711.00937)
with the straight-through estimator, as XR-1 and the VQ variant of the tokenizers use it.

For z [..., D] and a codebook e [K, D]: index = argmin_k ‖z − e_k‖², quantised = e_index. The forward value is
e_index; the backward pass copies the gradient of quantised onto z (z + stop_gradient(e_index − z)), so the
encoder trains through the bottleneck. Two losses move the two sides towards each other:
    codebook loss     mean ‖stop_gradient(z) − e_index‖²   (moves the codes; no gradient to the encoder)
    commitment loss   mean ‖z − stop_gradient(e_index)‖²   (keeps the encoder near its code)
    loss = codebook + β · commitment  (β = commitment_cost, 0.25 in the VQ-VAE paper)
    legacy: loss = commitment + β · codebook  (taming-transformers' VectorQuantizer2 with legacy=True, which XR-1
            keeps: β lands on the codebook term, a historical slip preserved for backward compatibility)
Means are over the quantised vectors (weighted when `weights` marks padding) and the D channels.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.validation import check_bool, check_int, check_non_negative

# The VQ-VAE paper's commitment weight.
DEFAULT_COMMITMENT_COST = 0.25


def check_codebook_size(num_codes: int, field: str = "num_codes") -> int:
    """An int >= 2 (one code carries no information); ValueError naming `field` otherwise."""
    return check_int(field, num_codes, minimum=2)


@dataclasses.dataclass(frozen=True)
class VQOutput:
    """What vector_quantize returns (a pytree of arrays).

    quantized [..., D] (straight-through), indices int32 [...], codebook_loss, commitment_loss and loss (scalars).
    """

    quantized: jax.Array
    indices: jax.Array
    codebook_loss: jax.Array
    commitment_loss: jax.Array
    loss: jax.Array


jax.tree_util.register_dataclass(VQOutput, data_fields=[f.name for f in dataclasses.fields(VQOutput)], meta_fields=[])


def nearest_code(z: jax.Array, codebook: jax.Array) -> jax.Array:
    """z [..., D], codebook [K, D] -> int32 indices [...] of the nearest code in squared Euclidean distance
    (ties: the lowest index)."""
    _check_pair(z, codebook)
    z = z.astype(jnp.float32)
    codebook = codebook.astype(jnp.float32)
    # ‖z − e‖² = ‖z‖² − 2 z·e + ‖e‖²; ‖z‖² does not change the argmin.
    distances = jnp.sum(codebook**2, axis=-1) - 2.0 * jnp.einsum("...d,kd->...k", z, codebook)
    return jnp.argmin(distances, axis=-1).astype(jnp.int32)


def vector_quantize(z: jax.Array, codebook: jax.Array, *, commitment_cost: float = DEFAULT_COMMITMENT_COST,
                    weights: jax.Array | None = None, legacy: bool = False) -> VQOutput:
    """Quantises z [..., D] to its nearest codes in codebook [K, D] (module docstring); `weights` [...] (0 marks
    padding) weights the two losses; `legacy` puts β on the codebook term instead of the commitment term."""
    check_non_negative("commitment_cost", commitment_cost, finite=True)
    check_bool("legacy", legacy)
    indices = nearest_code(z, codebook)
    chosen = jnp.take(codebook.astype(jnp.float32), indices, axis=0)
    z = z.astype(jnp.float32)
    quantized = z + jax.lax.stop_gradient(chosen - z)
    if weights is None:
        weights = jnp.ones(z.shape[:-1], jnp.float32)
    if weights.shape != z.shape[:-1]:
        raise ValueError(f"weights must have shape {list(z.shape[:-1])} (z without its channel axis), "
                         f"got shape {list(weights.shape)}")
    weights = weights.astype(jnp.float32)
    denominator = jnp.maximum(jnp.sum(weights), 1.0) * z.shape[-1]

    def mean_square(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.sum(weights[..., None] * jnp.square(a - b)) / denominator

    codebook_loss = mean_square(jax.lax.stop_gradient(z), chosen)
    commitment_loss = mean_square(z, jax.lax.stop_gradient(chosen))
    if legacy:
        loss = commitment_loss + commitment_cost * codebook_loss
    else:
        loss = codebook_loss + commitment_cost * commitment_loss
    return VQOutput(quantized, indices, codebook_loss, commitment_loss, loss)


def _check_pair(z: jax.Array, codebook: jax.Array) -> None:
    if codebook.ndim != 2:
        raise ValueError(f"codebook must have shape [K, D], got shape {list(codebook.shape)}")
    check_codebook_size(codebook.shape[0], "codebook.shape[0] (the number of codes)")
    if z.ndim < 1 or z.shape[-1] != codebook.shape[1]:
        raise ValueError(f"z must have shape [..., {codebook.shape[1]}] (the codebook's D), got shape {list(z.shape)}")


class VectorQuantizer(nnx.Module):
    """A learned codebook [num_codes, dim] (uniform init in ±1/num_codes, as VQ-VAE): x [..., dim] -> VQOutput;
    `legacy` selects the legacy-β loss (module docstring)."""

    def __init__(self, num_codes: int, dim: int, *, commitment_cost: float = DEFAULT_COMMITMENT_COST,
                 legacy: bool = False, rngs: nnx.Rngs) -> None:
        check_codebook_size(num_codes)
        check_int("dim", dim)
        self.commitment_cost = check_non_negative("commitment_cost", commitment_cost, finite=True)
        self.legacy = check_bool("legacy", legacy)
        limit = 1.0 / num_codes
        self.codebook = nnx.Param(jax.random.uniform(rngs.params(), (num_codes, dim), jnp.float32, -limit, limit))

    def __call__(self, x: jax.Array, weights: jax.Array | None = None) -> VQOutput:
        return vector_quantize(x, self.codebook[...], commitment_cost=self.commitment_cost, weights=weights,
                               legacy=self.legacy)
