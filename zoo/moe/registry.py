"""The router registry: routers register by name (`@register_router("topk_softmax")`), the MoE layer and
the model config look them up (`ROUTERS.get(name)`), so a new router never edits the layer."""

from __future__ import annotations

from typing import Any

from icml26zoo.layers.options import build_options
from icml26zoo.registry import Registry

ROUTERS: Registry[type] = Registry(
    "router", modules=("icml26zoo.moe.routers", "icml26zoo.moe.confidence", "icml26zoo.moe.mahalanobis")
)
register_router = ROUTERS.register


def router_options(name: str, pairs: tuple[tuple[str, Any], ...]) -> Any:
    """Router `name`'s typed options from (name, value) pairs; unknown names raise ValueError listing the valid."""
    return build_options(ROUTERS.get(name).OPTIONS, pairs, owner=f"{name} router")
