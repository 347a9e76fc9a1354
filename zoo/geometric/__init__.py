"""Geometric and equivariant models (issue 20): point clouds, spherical signals and meshes.

Every model here is registered (`icml26zoo.registry.MODELS`) with `LANGUAGE_MODEL = False` and is called as
`model(points, features, weights) -> outputs` (shapes and padding rules in `icml26zoo.geometric.common`):
    points   float32 [B, N, d], features float32 [B, N, F], weights float32 [B, N] (0 = padding)
    outputs  float32 [B, num_outputs] (model option readout="pool") or [B, N, num_outputs] ("point").
`common` holds the shared validation and masked helpers, `baseline` the non-equivariant `set_transformer`;
each family module (FAMILY_MODULES: platonic, sola, pace, spikenet, apt; imported here when present) registers
its model and exports
`equivariance_errors(model, points, features, weights, key) -> {"in_group": ..., "out_of_group": ...}`.
"""

import importlib
import importlib.util

from icml26zoo.geometric import baseline, common
from icml26zoo.geometric.common import (
    check_point_inputs,
    masked_max,
    masked_mean,
    masked_softmax,
    point_mask,
    random_rotation,
    rotate_points,
)

__all__ = [
    "baseline",
    "check_point_inputs",
    "common",
    "masked_max",
    "masked_mean",
    "masked_softmax",
    "point_mask",
    "random_rotation",
    "rotate_points",
]

# The family modules that register the issue-20 models (platonic, sola, pacenet, spikenet, apt). Each is
# imported when present, so the package imports while the families land one by one.
FAMILY_MODULES = ("platonic", "sola", "pace", "spikenet", "apt")
for _name in FAMILY_MODULES:
    if importlib.util.find_spec(f"{__name__}.{_name}") is not None:
        importlib.import_module(f"{__name__}.{_name}")
