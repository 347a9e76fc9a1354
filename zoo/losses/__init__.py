"""Losses and training objectives.

`cross_entropy` holds the weighted softmax cross-entropy every objective reduces to; `objectives` the
registered training objectives (`lm`, `classification`), looked up by name in `zoo.registry.OBJECTIVES`.
"""

from icml26zoo.losses.cross_entropy import CrossEntropySums, weighted_cross_entropy, weighted_mean
from icml26zoo.losses.objectives import Objective, classification_objective, lm_objective, pooled_logits

__all__ = [
    "CrossEntropySums",
    "Objective",
    "classification_objective",
    "lm_objective",
    "pooled_logits",
    "weighted_cross_entropy",
    "weighted_mean",
]
