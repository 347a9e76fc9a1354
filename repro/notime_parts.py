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

__all__ = ["METHODS", "PAIR_METHODS", "SCORES", "adjacency_figure", "fit_methods", "pair_scores", "scores_of"]

METHODS = ("notears_mse", "notime", "notime_agl")
SCORES = ("shd", "tpr", "fdr", "f1", "edges")
PAIR_METHODS = ("notears_mse", "notime")  # the direction test compares the two losses (stage 1, no penalty)


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


def pair_scores(seed: int, pairs: int, num_samples: int, methods: tuple[str, ...], config: causal.FitConfig, *,
                scale: float, threshold: float) -> dict[str, dict[str, float]]:
    """The two-variable direction test of one seed: `pairs` ANMs x_a → x_b (f a random tanh MLP, uniform or
    Laplace noises with scales in [0.5, 2]; the cause is variable 0 in even pairs, 1 in odd ones), variable 0
    multiplied by `scale`. method -> the structure scores averaged over the pairs and `direction`, the fraction
    of pairs whose extracted graph is exactly the true edge."""
    forward = np.array([[0, 1], [0, 0]])
    found: dict[str, list[dict[str, float]]] = {}
    for index in range(pairs):
        dag = forward if index % 2 == 0 else forward.T
        sample = causal.sample_anm(1000 * seed + index, 2, num_samples, dag=dag, noises=("uniform", "laplace"))
        data = sample.data * np.array([scale, 1.0])
        fitted = fit_methods(data, tuple(m for m in methods if m in PAIR_METHODS), config, lam=0.0, seed=seed)
        for method, strengths in fitted.items():
            scores = scores_of(strengths, dag, threshold)
            scores["direction"] = float(np.array_equal(causal.extract_dag(strengths, threshold), dag))
            found.setdefault(method, []).append(scores)
    return {m: {k: float(np.mean([s[k] for s in v])) for k in v[0]} for m, v in found.items()}
