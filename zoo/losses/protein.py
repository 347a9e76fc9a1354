"""Objective `protein_reconstruction` of the protein tokenizer (icml26zoo.bio.tokenizer, issue 34).

On a batch of Cα chains (points [B, N, 3], weights [B, N] > 0 on real residues; dataset zoo_backbones) it
rotates every chain by a fresh Haar-random rotation (the option `rotate`; the model is not rotation invariant, so
the paper trains on rotated copies), encodes it to FSQ tokens, keeps the prefix the model's training rule draws
(nested dropout, or every token for the baseline) and decodes. The loss is the mean over real chains of the
per-chain mean squared coordinate error in the rotated frame (the regression decoder's stand-in for the paper's
flow-matching loss), plus the bottleneck's own loss (a VQ tokenizer's codebook and commitment terms; 0 for FSQ).
Metrics:
    loss_sum, weight     Σ chains of that error, the number of real chains (eval/loss)
    rmsd_sum             Σ chains of the Cα RMSD after optimal rigid alignment, in Å (eval/rmsd)
    fsq/perplexity, fsq/used_codes, fsq/usage_fraction
                         train diagnostics: the batch's code usage over the tokens that exist (FSQ or VQ)
    bottleneck/loss      train diagnostic: the bottleneck's loss (VQ; 0 for FSQ)
Evaluation calls it with a fixed key, so eval/loss and eval/rmsd are those of fixed random prefixes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.bio.structure import aligned_rmsd, prefix_mask, token_counts
from icml26zoo.geometric.common import random_rotation, rotate_points
from icml26zoo.losses.batch_fields import FEATURE_FIELDS, require_batch_fields
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_bool, check_positive
from icml26zoo.vq import usage_statistics

Batch = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class ProteinReconstructionOptions:
    """Options of objective protein_reconstruction (TrainConfig.objective_options)."""

    # Rotate every chain by a random rotation before encoding (training augmentation).
    rotate: bool = True
    # Ångström per unit of the coordinates (the zoo's backbones are in nm: 10), for the RMSD metric.
    angstrom_per_unit: float = 10.0

    def __post_init__(self) -> None:
        check_bool("protein_reconstruction option 'rotate'", self.rotate)
        check_positive("protein_reconstruction option 'angstrom_per_unit'", self.angstrom_per_unit, finite=True)


_DEFAULTS = ProteinReconstructionOptions()


def chain_mse(predicted: jax.Array, target: jax.Array, weights: jax.Array) -> jax.Array:
    """Per chain mean squared coordinate error [B] over its real residues and 3 axes (0 for a padding row)."""
    mask = (weights > 0).astype(jnp.float32)
    squared = jnp.sum(mask * jnp.sum(jnp.square(predicted - target), axis=-1), axis=1)
    return squared / jnp.maximum(3.0 * jnp.sum(mask, axis=1), 1.0)


def protein_reconstruction(model: nnx.Module, batch: Batch, rng: jax.Array,
                           options: ProteinReconstructionOptions = _DEFAULTS) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Reconstruction loss of a protein tokenizer on Cα chains (module docstring)."""
    require_batch_fields("protein_reconstruction", batch, FEATURE_FIELDS, dataset="zoo_backbones")
    rotate_key, keep_key = jax.random.split(rng)
    points, weights = batch["points"].astype(jnp.float32), batch["weights"]
    if options.rotate:
        points = rotate_points(points, random_rotation(rotate_key, (points.shape[0],)))
    tokens, _, indices, bottleneck_loss = model.encode_with_loss(points, weights)
    predicted = model.decode(tokens, weights, model.training_keep(keep_key, weights)).astype(jnp.float32)
    rows = jnp.any(weights > 0, axis=1).astype(jnp.float32)
    errors = chain_mse(predicted, points, weights)
    rmsd = aligned_rmsd(jax.lax.stop_gradient(predicted), points, weights) * options.angstrom_per_unit
    exists = prefix_mask(token_counts(weights, model.options.n_tokens), indices.shape[1])
    usage = usage_statistics(indices, model.codebook_size, exists)
    weight = jnp.sum(rows)
    metrics = {"loss_sum": jnp.sum(errors * rows), "weight": weight, "rmsd_sum": jnp.sum(rmsd * rows),
               "fsq/perplexity": usage["perplexity"], "fsq/used_codes": usage["used_codes"].astype(jnp.float32),
               "fsq/usage_fraction": usage["usage_fraction"], "bottleneck/loss": bottleneck_loss}
    return metrics["loss_sum"] / jnp.maximum(weight, 1.0) + bottleneck_loss, metrics


protein_reconstruction.options_class = ProteinReconstructionOptions
protein_reconstruction.plotted_metrics = ("fsq/perplexity",)
register_objective("protein_reconstruction")(protein_reconstruction)
