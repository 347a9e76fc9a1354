"""Differentiable causal discovery with identifiability by independence (NOTIME: Berrevoets, Raymaekers, van der
Schaar, Verdonck, Yao, AISTATS 2025) and the adaptive group lasso on first-layer MLP columns ("Identifiable
Nonlinear Differentiable Causal Discovery via Independence and Adaptive Group Sparsity", ICML 2026;
docs/papers/notime.md). Neither paper's code was found: the independence measure and the schedule are
RECONSTRUCTIONS.

    acyclicity    NOTEARS h(A) = tr(exp(A ∘ A)) − d and its closed-form gradient, adjacency validation
    independence  standardisation, Gaussian Grams (median heuristic), dHSIC and its permutation test, the sum of
                  pairwise unbiased HSICs (the fit's default measure)
    mlp           per-node MLPs vectorised over nodes (w1 [d, m, d], self column masked), edge strengths
    sparsity      group soft-thresholding (the prox), adaptive weights
    fitting       the augmented-Lagrangian fit (an optax loop, jitted; not the shared trainer), two stages
    graph         DAG extraction (threshold, break cycles) and SHD / TPR / FDR / F1
    synthetic     nonlinear ANMs on Erdős–Rényi DAGs with non-Gaussian noises
"""

from icml26zoo.causal.acyclicity import acyclicity, acyclicity_grad, check_adjacency
from icml26zoo.causal.fitting import LOSSES, FitConfig, FitResult, check_data, fit, fit_two_stage, residual_loss
from icml26zoo.causal.graph import extract_dag, is_dag, reachability, structure_scores
from icml26zoo.causal.independence import (
    MEASURES,
    dhsic,
    dhsic_permutation_test,
    gaussian_grams,
    independence_measure,
    median_bandwidths,
    pairwise_hsic,
    standardise,
)
from icml26zoo.causal.mlp import MLPParams, Scaling, data_scaling, edge_strengths, init_mlp, predict, self_mask
from icml26zoo.causal.sparsity import adaptive_weights, group_penalty, group_soft_threshold
from icml26zoo.causal.synthetic import NOISES, ANMSample, erdos_renyi_dag, sample_anm, standard_noise

__all__ = [
    "LOSSES",
    "MEASURES",
    "NOISES",
    "ANMSample",
    "FitConfig",
    "FitResult",
    "MLPParams",
    "Scaling",
    "acyclicity",
    "acyclicity_grad",
    "adaptive_weights",
    "check_adjacency",
    "check_data",
    "data_scaling",
    "dhsic",
    "dhsic_permutation_test",
    "edge_strengths",
    "erdos_renyi_dag",
    "extract_dag",
    "fit",
    "fit_two_stage",
    "gaussian_grams",
    "group_penalty",
    "group_soft_threshold",
    "independence_measure",
    "init_mlp",
    "is_dag",
    "median_bandwidths",
    "pairwise_hsic",
    "predict",
    "reachability",
    "residual_loss",
    "sample_anm",
    "self_mask",
    "standard_noise",
    "standardise",
    "structure_scores",
]
