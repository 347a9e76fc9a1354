"""Mixture-of-experts: pluggable routers (top-k softmax, ConfSMoE confidence, Gaussian and Laplacian gates,
MP-MoE Mahalanobis), grouped-matmul expert dispatch with capacity, and the MoE feed-forward layer."""

from icml26zoo.moe import confidence, mahalanobis, routers
from icml26zoo.moe.grouped_matmul import capacity_keep, expert_capacity, grouped_matmul
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
    "grouped_matmul",
    "mahalanobis",
    "register_router",
    "router_options",
    "routers",
]
