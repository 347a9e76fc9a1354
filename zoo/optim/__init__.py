"""Optimizers as optax GradientTransformations, registered by name for train configs.

The package exports the constructors (`icml26zoo.optim.sam_polyak(...)` is the optax transformation);
the implementations live in modules named after the method, so a module never hides a function:

- `sam`: plain SAM (`sam_sgd`, `sam_step`) and SAM with Polyak step sizes (`sam_polyak`,
  `scale_by_sam_polyak`, `sam_polyak_step`), sharing one perturbation (`sam_polyak_grads`);
- `muon`: the Muon fine-tuning recipe (`muon_finetune`, its parameter routing, `update_strength`);
- `cubic_damping`: cubic-damped momentum SGD and Adam, and the adaptive-friction (kinetic-energy) heavy ball;
- `minimax`: GDA, AGDA and TALDA-R for two-sided PL minimax problems (`talda`, `talda_step`, `gda`);
- `spike_monitor`: the Adam loss-spike monitor (`spike_diagnostics`, pure functions of the Adam state);
- `builtin`: the registered optax defaults (adamw, adam, sgd, lion) and `decay_mask`;
- `pmdo`, `pmdo_gpm`, `pmdo_cdcil`: PMDO (experimental reconstruction) for cross-domain class-incremental
  learning: parameter masks, GPM projection and slow weights as optax transformations, and its benchmark. Import
  the modules (`from icml26zoo.optim import pmdo`): the constructor `pmdo.pmdo` is not re-exported here, where it
  would hide its module, and it is not in the optimizer registry (it needs per-task masks and bases).
"""

from icml26zoo.optim import builtin, cubic_damping, minimax, muon, sam, spike_monitor  # noqa: F401  (registers)
from icml26zoo.optim.builtin import decay_mask
from icml26zoo.optim.cubic_damping import (
    adaptive_friction_sgd,
    cubic_damped_adam,
    cubic_damped_sgd,
    discrete_from_physical,
    scale_by_adaptive_friction_momentum,
    scale_by_cubic_damped_adam,
    scale_by_cubic_damped_momentum,
)
from icml26zoo.optim.minimax import (
    MinimaxTrace,
    TaldaInfo,
    TaldaState,
    gda,
    pl_surrogate_weights,
    talda,
    talda_init,
    talda_step,
)
from icml26zoo.optim.muon import muon_dimension_numbers, muon_finetune, muon_param_labels, update_strength
from icml26zoo.optim.sam import (
    SamPolyakGrads,
    sam_polyak,
    sam_polyak_grads,
    sam_polyak_step,
    sam_sgd,
    sam_step,
    scale_by_sam_polyak,
)
from icml26zoo.optim.spike_monitor import decoupling_stats, directional_curvature, spike_diagnostics

__all__ = [
    "MinimaxTrace",
    "SamPolyakGrads",
    "TaldaInfo",
    "TaldaState",
    "adaptive_friction_sgd",
    "cubic_damped_adam",
    "cubic_damped_sgd",
    "decay_mask",
    "decoupling_stats",
    "directional_curvature",
    "discrete_from_physical",
    "gda",
    "muon_dimension_numbers",
    "muon_finetune",
    "muon_param_labels",
    "pl_surrogate_weights",
    "sam_polyak",
    "sam_polyak_grads",
    "sam_polyak_step",
    "sam_sgd",
    "sam_step",
    "scale_by_adaptive_friction_momentum",
    "scale_by_cubic_damped_adam",
    "scale_by_cubic_damped_momentum",
    "scale_by_sam_polyak",
    "spike_diagnostics",
    "talda",
    "talda_init",
    "talda_step",
    "update_strength",
]
