"""Objective `camp` of CAMP (icml26zoo.multimodal.camp, a RECONSTRUCTION; docs/papers/camp.md).

On a feature batch of zoo_complementary or zoo_digit_halves (point m = modality m's embedding, weights = the
present modalities, labels [B]):
    present ← modality_dropout(present, rate)                     (option modality_dropout; 0 keeps the data's)
    loss = CE(logits, y) + λ_OT L_OT + λ_dom L_dom + λ_uni L_uni
with L_OT the class-wise Sinkhorn alignment of the modalities' prototypes (`multimodal.camp_align`; skipped,
and ott-jax never imported, when ot_weight = 0: the "no OT" ablation), L_dom the anti-dominance and L_uni the
anti-collapse (uniformity) penalties (`multimodal.camp_regularisers`). Rows with no present modality (padding)
weigh 0. The objective's key also drives the dropout at evaluation (the trainer passes a fixed key there), so
with modality_dropout > 0 eval/accuracy is measured on dropped inputs.
Metrics: loss_sum, weight, correct (eval/loss, eval/accuracy); train diagnostics camp/ot, camp/dominance,
camp/uniformity and camp/beta_max (the largest modality weight).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import FEATURE_FIELDS, require_batch_fields
from icml26zoo.losses.cross_entropy import weighted_cross_entropy, weighted_mean
from icml26zoo.multimodal.camp_align import ot_alignment
from icml26zoo.multimodal.camp_regularisers import dominance_penalty, modality_dropout, uniformity_penalty
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_non_negative, check_positive, check_probability

Batch = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class CampObjectiveOptions:
    """Options of objective camp (TrainConfig.objective_options); the spec's starting weights."""

    ot_weight: float = 0.1
    dominance_weight: float = 0.01
    uniformity_weight: float = 0.01
    # Sinkhorn's entropic regularisation ε.
    epsilon: float = 0.05
    # Probability of dropping each present modality of a row in a step (one always kept).
    modality_dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("ot_weight", "dominance_weight", "uniformity_weight"):
            check_non_negative(f"camp option {name!r}", getattr(self, name), finite=True)
        check_positive("camp option 'epsilon'", self.epsilon, finite=True)
        check_probability("camp option 'modality_dropout'", self.modality_dropout)


_DEFAULTS = CampObjectiveOptions()


def camp(model: nnx.Module, batch: Batch, rng: jax.Array,
         options: CampObjectiveOptions = _DEFAULTS) -> tuple[jax.Array, dict[str, jax.Array]]:
    """CAMP's loss on a feature batch (module docstring)."""
    require_batch_fields("camp", batch, (*FEATURE_FIELDS, "labels"), dataset="zoo_complementary")
    if not hasattr(model, "evidence"):
        raise ValueError(f"objective 'camp' needs model.name='camp' (a model with `evidence`), got "
                         f"{type(model).__name__}")
    embeddings, present = model.unpack(batch["points"], batch["weights"])
    rows = (jnp.sum(present, axis=1) > 0).astype(jnp.float32)
    if options.modality_dropout > 0:
        present = modality_dropout(rng, present, options.modality_dropout)
    out = model.evidence(embeddings, present)
    sums = weighted_cross_entropy(out.logits, batch["labels"], rows)
    prototypes = model.prototypes()
    ot = ot_alignment(prototypes, options.epsilon) if options.ot_weight > 0 else jnp.zeros((), jnp.float32)
    dominance = dominance_penalty(out.evidence, out.present * rows[:, None])
    uniformity = uniformity_penalty(prototypes)
    loss = (weighted_mean(sums) + options.ot_weight * ot + options.dominance_weight * dominance
            + options.uniformity_weight * uniformity)
    metrics = {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct, "camp/ot": ot,
               "camp/dominance": dominance, "camp/uniformity": uniformity, "camp/beta_max": jnp.max(out.beta)}
    return loss, metrics


camp.options_class = CampObjectiveOptions
camp.plotted_metrics = ("camp/ot",)
register_objective("camp", extras=("ot",))(camp)
