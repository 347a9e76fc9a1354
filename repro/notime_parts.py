"""The pieces of the NOTIME reproduction: one seed's fits of every method on one synthetic ANM, their scores,
and the true-versus-recovered adjacency figure.

Methods (all share the per-node MLPs, the NOTEARS constraint, the augmented-Lagrangian schedule, the threshold
τ and the cycle breaking; `icml26zoo.causal`):
- `notears_mse`: squared-error loss (the NOTEARS-MLP-style negative control), no group penalty;
- `notime`: the independence loss (dHSIC of standardised residuals), no group penalty (stage 1);
- `notime_agl`: stage 2, the independence fit warm-started from stage 1 with the adaptive group lasso
  λ Σ w_kj ‖w1[j, :, k]‖, w_kj = 1 / (A_kj + ε) from stage 1's edge strengths.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from matplotlib.figure import Figure

from icml26zoo import causal

__all__ = ["METHODS", "SCORES", "adjacency_figure", "fit_methods", "scores_of"]

METHODS = ("notears_mse", "notime", "notime_agl")
SCORES = ("shd", "tpr", "fdr", "f1", "edges")


def fit_methods(data: np.ndarray, methods: tuple[str, ...], config: causal.FitConfig, *, lam: float,
                seed: int) -> dict[str, np.ndarray]:
    """method -> learned edge strengths A [d, d] on data [n, d]; stage 1 is fitted once for both NOTIME rows."""
    found = {}
    if "notears_mse" in methods:
        found["notears_mse"] = causal.fit(data, dataclasses.replace(config, loss="mse"), seed=seed).strengths
    if "notime_agl" in methods:
        first, second, _ = causal.fit_two_stage(data, config, lam, seed=seed)
        found["notime_agl"] = second.strengths
        if "notime" in methods:
            found["notime"] = first.strengths
    elif "notime" in methods:
        found["notime"] = causal.fit(data, config, seed=seed).strengths
    return {m: found[m] for m in methods}


def scores_of(strengths: np.ndarray, truth: np.ndarray, threshold: float) -> dict[str, float]:
    """SHD, TPR, FDR, F1 and the edge count of the DAG extracted from `strengths` at `threshold`."""
    return causal.structure_scores(causal.extract_dag(strengths, threshold), truth)


def adjacency_figure(truth: np.ndarray, strengths: dict[str, np.ndarray], threshold: float) -> Figure:
    """The true DAG and each method's extracted DAG (shading: learned strength; ✓ hit, ✗ false edge,
    ○ missed edge)."""
    figure = Figure(figsize=(3.2 * (1 + len(strengths)), 3.4), layout="constrained")
    panels = figure.subplots(1, 1 + len(strengths), squeeze=False)[0]
    panels[0].imshow(truth, cmap="Greys", vmin=0, vmax=1)
    panels[0].set_title("true DAG")
    for panel, (method, values) in zip(panels[1:], strengths.items(), strict=True):
        dag = causal.extract_dag(values, threshold)
        panel.imshow(np.minimum(values, 2.0), cmap="Blues", vmin=0, vmax=2.0)
        for k, j in zip(*np.nonzero(dag | truth), strict=True):
            mark = "✓" if dag[k, j] and truth[k, j] else ("✗" if dag[k, j] else "○")
            panel.text(j, k, mark, ha="center", va="center", color="red" if mark != "✓" else "black")
        panel.set_title(method)
    for panel in panels:
        panel.set(xlabel="to node j", ylabel="from node k", xticks=range(len(truth)), yticks=range(len(truth)))
    return figure
