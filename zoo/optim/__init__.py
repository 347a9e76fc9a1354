"""Optimizers as optax GradientTransformations, registered by name for train configs."""

from icml26zoo.optim import builtin, cubic_damping, muon_finetune, sam_polyak, spike_monitor, talda
from icml26zoo.optim.builtin import decay_mask

__all__ = ["builtin", "cubic_damping", "decay_mask", "muon_finetune", "sam_polyak", "spike_monitor", "talda"]
