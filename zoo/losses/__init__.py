"""Losses and training objectives.

`cross_entropy` holds the weighted softmax cross-entropy every objective reduces to.
"""

from zoo.losses.cross_entropy import CrossEntropySums, weighted_cross_entropy, weighted_mean

__all__ = ["CrossEntropySums", "weighted_cross_entropy", "weighted_mean"]
