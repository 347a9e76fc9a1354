"""Losses and training objectives.

`cross_entropy` holds the weighted softmax cross-entropy every objective reduces to; `objectives` the
registered training objectives (`lm`, `classification`), looked up by name in `zoo.registry.OBJECTIVES`.
The papers' objectives register when their modules are imported below: the neural-collapse losses
(`nc_*`), masked diffusion (`mdlm`, `puma`), the IPW scoring rule (`ipw_scoring`), language membership
(`membership`), the PCFG KL (`pcfg_lm`), the Boolean chains' SFT/RL (`boolean_chain`) and the mixture-of-experts
objectives `lm_moe` and `multimodal_moe` (`moe`), and the protein tokenizer's reconstruction
(`protein_reconstruction`, `protein`).

An objective returns `(loss, metrics)`: summable statistics (names without "/") that evaluation adds over
batches, and optionally train diagnostics (names with a "/", e.g. "moe/collapse") that the trainer logs
averaged over each logging window and draws on its loss plot when the objective lists them in
`plotted_metrics` (the contract: `zoo.losses.objectives`).
"""

from icml26zoo.losses import (  # noqa: F401  (each module registers its objectives)
    api_objective,
    boolean_chain,
    camp_objective,
    conglude,
    geocoupling,
    geometric,
    ipw_scoring,
    masked_diffusion,
    membership,
    moe,
    nc_objectives,
    pcfg_lm,
    progressive_unmasking,
    protein,
    rna,
    xr1_objective,
)
from icml26zoo.losses.cross_entropy import CrossEntropySums, weighted_cross_entropy, weighted_mean
from icml26zoo.losses.objectives import Objective, classification_objective, lm_objective, pooled_logits

__all__ = [
    "CrossEntropySums",
    "Objective",
    "classification_objective",
    "ipw_scoring",
    "lm_objective",
    "masked_diffusion",
    "moe",
    "nc_objectives",
    "pooled_logits",
    "progressive_unmasking",
    "weighted_cross_entropy",
    "weighted_mean",
]
