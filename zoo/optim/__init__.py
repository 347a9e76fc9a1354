"""Optimizers as optax GradientTransformations, registered by name for train configs."""

from zoo.optim import builtin
from zoo.optim.builtin import decay_mask

__all__ = ["builtin", "decay_mask"]
