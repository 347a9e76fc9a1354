"""Mixture-of-experts: pluggable routers (top-k softmax, ConfSMoE confidence, Gaussian and Laplacian gates,
MP-MoE Mahalanobis), capacity-limited expert dispatch (the experts run as `icml26zoo.kernels.grouped_matmul`),
the MoE feed-forward layer, routing diagnostics and ConfSMoE's multimodal classifier.

This package sits below `icml26zoo.models` (whose `ModelConfig.moe` is a `MoEConfig` and whose blocks hold
`MoEFeedForward`s) and `icml26zoo.losses` (the MoE objectives `lm_moe` and `multimodal_moe`); it imports neither.
"""

from icml26zoo.moe import confidence, mahalanobis, routers
from icml26zoo.moe.capacity import capacity_keep, expert_capacity
from icml26zoo.moe.layer import MoEConfig, MoEFeedForward
from icml26zoo.moe.registry import ROUTERS, register_router, router_options
from icml26zoo.moe.routers import Routing, balance_losses, expert_load

__all__ = [
    "ROUTERS",
    "MoEConfig",
    "MoEFeedForward",
    "Routing",
    "balance_losses",
    "capacity_keep",
    "confidence",
    "expert_capacity",
    "expert_load",
    "mahalanobis",
    "register_router",
    "router_options",
    "routers",
]
