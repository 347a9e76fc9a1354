"""From learned edge strengths to a DAG, and the structural scores of a DAG against the truth.

Graph extraction as on docs/papers/notime.md: keep A[k, j] > τ, then, while a directed cycle remains,
drop the weakest edge that lies on one. Scores: SHD (each unordered pair of nodes whose edge differs counts once, so
a reversed edge costs 1), TPR and FDR of directed edges (a reversed edge is a false discovery), F1.
"""

from __future__ import annotations

import numpy as np

from icml26zoo.causal.acyclicity import check_adjacency
from icml26zoo.validation import check_non_negative

__all__ = ["extract_dag", "is_dag", "reachability", "structure_scores"]


def reachability(adjacency: np.ndarray) -> np.ndarray:
    """[d, d] bool: R[a, b] iff a directed path of length >= 1 leads from a to b (edges where adjacency ≠ 0)."""
    reach = np.asarray(adjacency) != 0
    for k in range(reach.shape[0]):  # Floyd-Warshall on booleans
        reach = reach | (reach[:, k : k + 1] & reach[k : k + 1, :])
    return reach


def is_dag(adjacency: np.ndarray) -> bool:
    """True when the graph [d, d] (edge k → j where adjacency[k, j] ≠ 0, self-loops allowed) has no cycle."""
    array = check_adjacency("adjacency", adjacency, allow_self_loops=True)
    return not np.any(np.diagonal(reachability(array)))


def extract_dag(strengths: np.ndarray, threshold: float = 0.3) -> np.ndarray:
    """The binary DAG [d, d] (int) from edge strengths A [d, d] >= 0 with zero diagonal: A > threshold, then the
    weakest edge on a cycle removed until none is left."""
    array = check_adjacency("strengths", strengths)
    check_non_negative("threshold", threshold, finite=True)
    weights = np.where(array > threshold, array, 0.0)
    while True:
        on_cycle = (weights != 0) & reachability(weights).T  # k → j with a path j ⇝ k
        if not on_cycle.any():
            return (weights != 0).astype(np.int64)
        masked = np.where(on_cycle, weights, np.inf)
        weights[np.unravel_index(np.argmin(masked), masked.shape)] = 0.0


def structure_scores(estimate: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """{shd, tpr, fdr, f1, edges} of the binary graph `estimate` [d, d] against `truth` [d, d] (edge k → j at
    [k, j]; no self-loops in either)."""
    est = check_adjacency("estimate", estimate) != 0
    true = check_adjacency("truth", truth) != 0
    if est.shape != true.shape:
        raise ValueError(f"estimate must have the shape of truth {true.shape}, got {est.shape}")
    upper = np.triu(np.ones_like(est, dtype=bool), 1)
    differs = (est != true) | (est.T != true.T)
    shd = int(np.sum(differs & upper))
    hits = int(np.sum(est & true))
    found, actual = int(est.sum()), int(true.sum())
    tpr = hits / actual if actual else float("nan")
    fdr = (found - hits) / found if found else 0.0
    precision = hits / found if found else 0.0
    f1 = 2 * precision * tpr / (precision + tpr) if actual and precision + tpr > 0 else 0.0
    return {"shd": float(shd), "tpr": float(tpr), "fdr": float(fdr), "f1": float(f1), "edges": float(found)}
