"""ConGLUDe's losses and its objective `conglude` (icml26zoo.bio.conglude; ml-jku/conglude conglude/utils/losses.py
and conglude/model.py at commit 71c7113823e1ef1f0f81b1b8235b2e25dc71c1cc, reimplemented).

On a batch of complexes (dataset zoo_pockets: points [B, N, 3] Å, features [B, N, F], weights [B, N], targets
[B, N, 142] holding the site labels, pocket centre, the protein's pocket types and the ligand; see
icml26zoo.bio.conglude_data) the loss is the sum, each weighted 1 except the last (6):
    dice        Dice loss of the residue segmentation over every real residue of the batch (smooth 1)
    position    Huber(‖x_VN − centre‖) (δ = 1 Å), minimum over the protein's K VNs, mean over complexes
    confidence  MSE of every VN's confidence to c = 1 − d/(2γ) if d ≤ γ = 4 Å else 0.001
    pocket      InfoNCE over the protein's K VNs of ⟨b_k, ℓ_b⟩/τ for its ligand, positive the VN closest to the centre
    fishing     InfoNCE over the batch's proteins of ⟨P, ℓ_p⟩/τ for each ligand, positive its own protein
    screening   InfoNCE over the batch's ligands of the combined score with the closest VN, /τ_vs, positive diagonal
    bce         binary cross-entropy of ⟨P_i, ℓ_p,j⟩ (scale 1, shift 0) for every protein i and ligand j of the batch,
                label 1 when ligand j's pocket type is one of protein i's; the geometric encoder's output is
                stopped (the paper's ligand-based batches run it without gradient), the projections learn.
Deviation: the paper alternates structure-based batches (the first six terms) with separate ligand-based
bioactivity batches (the BCE); here every batch is both, the BCE labels coming from the pocket types in the batch.
Metrics: loss_sum/weight (eval/loss: mean over complexes), dcc_success_sum (the closest VN within 4 Å of the centre;
eval/dcc_success), and the terms as train diagnostics "conglude/<term>".
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26zoo.bio.conglude import combined_scores
from icml26zoo.bio.conglude_data import unpack_targets
from icml26zoo.losses.batch_fields import FEATURE_FIELDS, require_batch_fields
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_bool, check_non_negative, check_positive

__all__ = ["ConGLUDeLossOptions", "confidence_loss", "confidence_targets", "conglude_objective", "dice_loss",
           "info_nce", "vn_position_loss"]

Batch = dict[str, jax.Array]
TERMS = ("dice", "position", "confidence", "pocket", "fishing", "screening", "bce")
DCC_THRESHOLD = 4.0  # Å


@dataclasses.dataclass(frozen=True)
class ConGLUDeLossOptions:
    """Options of objective conglude (TrainConfig.objective_options): temperatures, the confidence cut-off γ
    (Å), the Huber δ (Å), the BCE weight and whether to rotate the VN sphere randomly (training augmentation)."""

    temperature: float = 0.0625
    screening_temperature: float = 0.0442
    gamma: float = 4.0
    huber_delta: float = 1.0
    bce_weight: float = 6.0
    rotate_sphere: bool = True

    def __post_init__(self) -> None:
        for name in ("temperature", "screening_temperature", "gamma", "huber_delta"):
            check_positive(f"conglude option {name!r}", getattr(self, name), finite=True)
        check_non_negative("conglude option 'bce_weight'", self.bce_weight, finite=True)
        check_bool("conglude option 'rotate_sphere'", self.rotate_sphere)


_DEFAULTS = ConGLUDeLossOptions()


def dice_loss(logits: jax.Array, labels: jax.Array, mask: jax.Array, smooth: float = 1.0) -> jax.Array:
    """1 − (2 Σ p·y + s) / (Σ p + Σ y + s) over every entry with mask > 0, p = sigmoid(logits). Any shape."""
    weights = (mask > 0).astype(jnp.float32)
    probs = jax.nn.sigmoid(logits) * weights
    labels = labels * weights
    return 1.0 - (2.0 * jnp.sum(probs * labels) + smooth) / (jnp.sum(probs) + jnp.sum(labels) + smooth)


def vn_position_loss(distances: jax.Array, rows: jax.Array, delta: float = 1.0) -> jax.Array:
    """Mean over rows (rows [B] > 0) of min_k Huber(distances [B, K]); only the closest VN gets a gradient."""
    huber = optax.huber_loss(distances, delta=delta)
    weights = (rows > 0).astype(jnp.float32)
    return jnp.sum(jnp.min(huber, axis=1) * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def confidence_targets(distances: jax.Array, gamma: float = 4.0, floor: float = 0.001) -> jax.Array:
    """c = 1 − d/(2γ) where d ≤ γ, else `floor` (any shape)."""
    return jnp.where(distances <= gamma, 1.0 - distances / (2.0 * gamma), floor)


def confidence_loss(confidence: jax.Array, distances: jax.Array, rows: jax.Array, gamma: float = 4.0) -> jax.Array:
    """MSE of confidence [B, K] to confidence_targets(distances [B, K]) (no gradient to the distances) over the
    VNs of rows [B] > 0."""
    target = confidence_targets(jax.lax.stop_gradient(distances), gamma)
    weights = jnp.broadcast_to((rows > 0)[:, None], confidence.shape).astype(jnp.float32)
    return jnp.sum(jnp.square(confidence - target) * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def info_nce(logits: jax.Array, positives: jax.Array, rows: jax.Array, columns: jax.Array | None = None
             ) -> jax.Array:
    """Mean over rows [R] > 0 of −log softmax(logits [R, C])[positive], positives int [R]; columns [C] > 0 marks
    the candidates (None: all)."""
    if columns is not None:
        logits = jnp.where(columns[None] > 0, logits, -1e9)
    per_row = optax.softmax_cross_entropy_with_integer_labels(logits, positives)
    weights = (rows > 0).astype(jnp.float32)
    return jnp.sum(per_row * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def _bce(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
    per = optax.sigmoid_binary_cross_entropy(logits, labels)
    return jnp.sum(per * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def conglude_terms(model: nnx.Module, batch: Batch, rng: jax.Array, options: ConGLUDeLossOptions = _DEFAULTS
                   ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """({term: value} of the module docstring's seven terms, {"rows" [B], "dcc_success" [B]})."""
    points, weights = batch["points"].astype(jnp.float32), batch["weights"]
    site, centre, types, ligand = unpack_targets(batch["targets"].astype(jnp.float32))
    rows = jnp.any(weights > 0, axis=1).astype(jnp.float32)
    vn_init = model.virtual_node_init(points, weights, rng if options.rotate_sphere else None)
    out = model.encode_protein(points, batch["features"].astype(jnp.float32), weights, vn_init)
    ell_p, ell_b = model.encode_ligands(ligand)
    distances = jnp.sqrt(jnp.sum(jnp.square(out.vn_positions - centre[:, None]), axis=-1) + 1e-12)  # [B, K]
    closest = jnp.argmin(jax.lax.stop_gradient(distances), axis=1)
    index = jnp.arange(points.shape[0])
    pocket_logits = jnp.einsum("bkp,bp->bk", out.pockets, ell_b) / options.temperature
    protein_logits = ell_p @ out.protein.T / options.temperature  # [ligands, proteins]
    screening = combined_scores(out, ell_p, ell_b)[index, closest] / options.screening_temperature  # [B, L]
    stopped = model.project_protein(jax.lax.stop_gradient(out.protein_features))
    active = jnp.any((types[:, None, :] == types[None, :, 0:1]) & (types[:, None, :] >= 0), axis=-1)  # [B, L]
    terms = {
        "dice": dice_loss(out.residue_logits, site, weights),
        "position": vn_position_loss(distances, rows, options.huber_delta),
        "confidence": confidence_loss(out.confidence, distances, rows, options.gamma),
        "pocket": info_nce(pocket_logits, closest, rows),
        "fishing": info_nce(protein_logits, index, rows, rows),
        "screening": info_nce(screening, index, rows, rows),
        "bce": _bce(stopped @ ell_p.T, active.astype(jnp.float32), rows[:, None] * rows[None, :]),
    }
    success = (jnp.min(distances, axis=1) < DCC_THRESHOLD).astype(jnp.float32) * rows
    return terms, {"rows": rows, "dcc_success": success}


def conglude_objective(model: nnx.Module, batch: Batch, rng: jax.Array,
                       options: ConGLUDeLossOptions = _DEFAULTS) -> tuple[jax.Array, dict[str, jax.Array]]:
    """ConGLUDe's summed loss on a batch of complexes (module docstring)."""
    require_batch_fields("conglude", batch, (*FEATURE_FIELDS, "targets"), dataset="zoo_pockets")
    terms, per_row = conglude_terms(model, batch, rng, options)
    loss = sum(terms[name] for name in TERMS[:-1]) + options.bce_weight * terms["bce"]
    weight = jnp.sum(per_row["rows"])
    metrics = {"loss_sum": loss * weight, "weight": weight, "dcc_success_sum": jnp.sum(per_row["dcc_success"])}
    metrics |= {f"conglude/{name}": value for name, value in terms.items()}
    return loss, metrics


conglude_objective.options_class = ConGLUDeLossOptions
conglude_objective.plotted_metrics = ("conglude/position", "conglude/screening")
register_objective("conglude")(conglude_objective)
