"""Losses and training objectives.

`cross_entropy` holds the weighted softmax cross-entropy every objective reduces to; `objectives` the
registered training objectives (`lm`, `classification`), looked up by name in `zoo.registry.OBJECTIVES`.
The papers' objectives register when their modules are imported below: the neural-collapse losses
(`nc_*`), masked diffusion (`mdlm`, `puma`), the IPW scoring rule (`ipw_scoring`), language membership
(`membership`), the PCFG KL (`pcfg_lm`) and the Boolean chains' SFT/RL (`boolean_chain`); the MoE language
model's `lm_moe` lives with the MoE layer (`icml26zoo.moe.objective`, listed in `zoo.registry`).
"""

from icml26zoo.losses import (  # noqa: F401  (each module registers its objectives)
    boolean_chain,
    geometric,
    ipw_scoring,
    masked_diffusion,
    membership,
    nc_objectives,
    pcfg_lm,
    progressive_unmasking,
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
    "nc_objectives",
    "pooled_logits",
    "progressive_unmasking",
    "weighted_cross_entropy",
    "weighted_mean",
]
