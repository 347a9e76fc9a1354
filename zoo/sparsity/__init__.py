"""Pruning at initialisation (Pham, Ta, Tran-Thanh, arXiv 2602.06675): Random, Magnitude, SNIP and GraSP
masks at an exact target sparsity, an optax wrapper that keeps pruned weights at zero, graphon-view mask statistics,
and the Factorised Saliency Model's predicted graphon (`graphon`).

Typical use on a zoo LM:

    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    mask = snip_mask(params, sparsity=0.9, loss_fn=lm_loss_fn(graphdef), batch=batch)
    params = apply_mask(params, mask)
    optimizer = masked_optimizer(optax.adamw(1e-3, weight_decay=0.1), mask)
    print(mask_statistics(mask)["total"])
"""

from icml26zoo.sparsity.graphon import (
    SaliencyFactors,
    cut_norm,
    fit_factorised_saliency,
    graphon_distances,
    method_graphon,
    predicted_graphon,
)
from icml26zoo.sparsity.masks import (
    PRUNABLE_NAMES,
    MaskedOptimizerState,
    apply_mask,
    grasp_hessian_gradient,
    grasp_mask,
    grasp_scores,
    lm_loss_fn,
    magnitude_mask,
    mask_from_scores,
    masked_optimizer,
    prunable_mask,
    random_mask,
    snip_mask,
    snip_scores,
)
from icml26zoo.sparsity.stats import empirical_graphon, layer_densities, mask_statistics, matrix_statistics

__all__ = [
    "PRUNABLE_NAMES",
    "MaskedOptimizerState",
    "SaliencyFactors",
    "apply_mask",
    "cut_norm",
    "empirical_graphon",
    "fit_factorised_saliency",
    "grasp_hessian_gradient",
    "grasp_mask",
    "grasp_scores",
    "graphon_distances",
    "layer_densities",
    "lm_loss_fn",
    "magnitude_mask",
    "mask_from_scores",
    "mask_statistics",
    "masked_optimizer",
    "matrix_statistics",
    "method_graphon",
    "predicted_graphon",
    "prunable_mask",
    "random_mask",
    "snip_mask",
    "snip_scores",
]
