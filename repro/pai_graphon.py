"""Pruning at initialisation as a graphon limit: do PaI masks of a widening MLP converge to the graphon that the
Factorised Saliency Model predicts, constant for Random/Magnitude and heterogeneous for SNIP/GraSP?

Paper: Pham, Ta, Tran-Thanh, "Pruning at Initialisation through the lens of Graphon Limit" (ICML 2026,
arXiv 2602.06675); see docs/papers/pai_graphon.md.

For each hidden width n of a ReLU MLP d_in -> n -> n -> 4 on a bag-of-tokens view of the zoo's `topics` task
(`pai_graphon_parts`), and each init seed, the four criteria of `icml26zoo.sparsity.masks` prune the freshly
initialised network at `sparsity`; the hidden n x n layer's mask is a bipartite graph whose degree-sorted
empirical graphon (`icml26zoo.sparsity.stats.empirical_graphon`, grid x grid cells) is compared with the
predicted graphon (`icml26zoo.sparsity.graphon`): the constant `density` for Random/Magnitude, and for
SNIP/GraSP the FSM graphon whose neuron-factor laws and edge-noise law are fitted once, on the same criterion's
scores of an independent reference network (seed REFERENCE_SEED, width `reference_width`, default twice the
largest width). Nothing is trained: masks are computed at initialisation, so the shared trainer and its cells
are not used, and `resume` only requires the run directory to exist (everything is recomputed, in seconds).

Budget fields (no training steps): `steps` = the number of widths, 16, 32, ... (16 · 2^(steps − 1));
`batch_size` = the rows of the class-balanced scoring batch (SNIP's batch, GraSP's two halves; a multiple of 8);
`seq_len` = the tokens per topics row; `seeds` = the init seeds.

    from icml26zoo import repro
    results = repro.run("pai_graphon", "runs/pai_graphon", budget="quick")

From a shell: `python -m icml26zoo.repro pai_graphon [--smoke | --quick] --out DIR [methods=random,snip]
[sparsity=0.8] [scope=layerwise] [widths=16,32,64] [grid=8] [reference_width=256] [grasp_reinit=false]`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.pai_graphon_parts import convergence_figure, graphon_figure, init_mlp, prune, topic_features
from icml26zoo.repro.registry import register_experiment
from icml26zoo.sparsity.graphon import (
    HETEROGENEOUS,
    METHODS,
    fit_factorised_saliency,
    graphon_distances,
    method_graphon,
)
from icml26zoo.sparsity.masks import SCOPES
from icml26zoo.sparsity.stats import matrix_statistics
from icml26zoo.validation import check_choice, check_int, check_interval

__all__ = ["FULL", "METHODS", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

# QUICK: widths 16 ... 128 (reference 256), 2 seeds, 64 scoring rows (the notebook, a few CPU-seconds).
QUICK = Budget(steps=4, batch_size=64, seq_len=65, seeds=(0, 1))
# FULL: widths 16 ... 1024 (reference 2048), 3 seeds, 128 scoring rows.
FULL = Budget(steps=7, batch_size=128, seq_len=65, seeds=(0, 1, 2))
# SMOKE: both kinds of predicted graphon, constant (random) and fitted FSM (SNIP; GraSP's scores cost a Hessian-
# vector product compile per width: tests/repro/test_repro_pai_graphon.py runs all four criteria), at widths 16
# and 32, reference 64, one seed, 16 scoring rows of 17 tokens, 4 x 4 graphons.
SMOKE = Budget(steps=2, batch_size=16, seq_len=17, seeds=(0,))
SMOKE_ARGS = {"methods": ("random", "snip"), "grid": 4}
MIN_WIDTH = 16
REFERENCE_SEED = 10_000  # the reference network's seed, away from the budgets' seeds
NUM_CLASSES, NUM_TOKENS, NOISE_TOKENS = 4, 32, 32  # topics classes and informative tokens; distractor tokens
COLUMNS = ("method", "width", "density", "cell_std", "null_std", "l2_to_pred", "cut_to_pred", "l2_seed_to_seed",
           "fsm_r2", "informative_share")


def _check_widths(widths: Sequence[int] | None, steps: int) -> tuple[int, ...]:
    if widths is None:
        return tuple(MIN_WIDTH * 2 ** k for k in range(steps))
    widths = tuple(widths)
    for w in widths:
        check_int("widths[i]", w, minimum=2)
    if len(widths) < 2 or any(b <= a for a, b in zip(widths, widths[1:], strict=False)):
        raise ValueError(f"widths must be at least two strictly increasing integers >= 2, got {list(widths)}")
    return widths


def _check_args(methods, widths, sparsity, scope, grid, reference_width, budget):
    methods = check_names("methods", methods, METHODS)
    widths = _check_widths(widths, budget.steps)
    check_interval("sparsity", sparsity, 0, 1, closed="neither")
    check_choice("scope", scope, SCOPES)
    check_int("grid", grid)
    if grid > min(widths):
        raise ValueError(f"grid must be at most the smallest width {min(widths)}, got {grid}")
    reference_width = 2 * widths[-1] if reference_width is None else reference_width
    check_int("reference_width", reference_width, minimum=widths[-1] + 1)
    if budget.batch_size % (2 * NUM_CLASSES):
        raise ValueError(f"budget.batch_size must be a multiple of {2 * NUM_CLASSES} (two class-balanced halves "
                         f"of {NUM_CLASSES} classes), got {budget.batch_size}")
    return methods, widths, reference_width


def _prune_all(methods, width, seed, batch, *, sparsity, scope, grasp_reinit):
    """{method: (mask tree, hidden saliency or None)} for the network of `width` initialised from `seed`."""
    params = init_mlp(seed, batch["x"].shape[1], width, NUM_CLASSES)
    return {m: prune(m, params, batch, sparsity=sparsity, scope=scope, seed=seed, grasp_reinit=grasp_reinit)
            for m in methods}


def _mean(values):
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


@register_experiment("pai_graphon", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/pai_graphon.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, methods: Sequence[str] = METHODS,
        widths: Sequence[int] | None = None, sparsity: float = 0.8, scope: str = "layerwise", grid: int = 8,
        reference_width: int | None = None, grasp_reinit: bool = True, resume: bool = False) -> Results:
    """Masks of the widening MLP vs the FSM's predicted graphons; returns the table and two figures.

    Args:
      budget: see the module docstring (steps = number of widths, batch_size = scoring rows, seq_len = tokens
        per row, seeds = init seeds).
      methods: criteria among METHODS ("random", "magnitude", "snip", "grasp").
      widths: hidden widths (strictly increasing, >= 2, at least two); default 16 · 2^k for k < budget.steps.
      sparsity: the pruned fraction, strictly inside (0, 1) (default 0.8: density 0.2).
      scope: "layerwise" (default: every layer keeps exactly 1 − sparsity, so every graphon has the same
        density) or "global" (one threshold for all layers; the predicted graphon then uses the hidden layer's
        realised density).
      grid: cells per side of the graphons (default 8; at most the smallest width, and 16 for the cut norm).
      reference_width: width of the network the SNIP/GraSP factor laws are fitted on (default 2 x the largest).
      grasp_reinit: GraSP's Xavier-normal re-initialisation before scoring (default True, the official code).
      resume: require run_dir to exist (nothing is cached: the masks are recomputed).
    """
    methods, widths, reference_width = _check_args(methods, widths, sparsity, scope, grid, reference_width, budget)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    batch = topic_features(budget.batch_size, budget.seq_len, num_classes=NUM_CLASSES, num_tokens=NUM_TOKENS,
                           noise_tokens=NOISE_TOKENS)
    options = {"sparsity": sparsity, "scope": scope, "grasp_reinit": grasp_reinit}
    fitted = [m for m in methods if m in HETEROGENEOUS]
    reference = _prune_all(fitted, reference_width, REFERENCE_SEED, batch, **options)
    factors = {m: fit_factorised_saliency(reference[m][1]) for m in fitted}
    predicted_cache: dict[tuple[str, float], np.ndarray] = {}

    def predicted(method, density):
        if (method, density) not in predicted_cache:
            predicted_cache[method, density] = method_graphon(method, density, factors.get(method), grid=grid)
        return predicted_cache[method, density]

    rows, curves, images, per_seed = [], {m: {"l2": [], "cut": []} for m in methods}, {}, {}
    for width in widths:
        masks = {seed: _prune_all(methods, width, seed, batch, **options) for seed in budget.seeds}
        for method in methods:
            row, graphons = _cell(method, width, [masks[s][method] for s in budget.seeds], predicted, grid)
            rows.append(row)
            per_seed[f"{method}/{width}"] = {"l2": row.pop("_l2"), "cut": row.pop("_cut")}
            curves[method]["l2"].append(row["l2_to_pred"])
            curves[method]["cut"].append(row["cut_to_pred"])
            if width == widths[-1]:
                images[method] = (graphons[0], predicted(method, row["density"]))
    notes = _notes(methods, widths, reference_width, sparsity, scope, grid, factors, predicted_cache)
    figures = {"convergence": convergence_figure(widths, curves), "graphons": graphon_figure(images, widths[-1])}
    extra = {"widths": list(widths), "reference_width": reference_width, "sparsity": sparsity, "scope": scope,
             "grid": grid, "grasp_reinit": grasp_reinit, "per_seed": per_seed,
             "reference_fsm_r2": {m: f.r2 for m, f in factors.items()},
             "predicted_graphons": {f"{m}@{d:.4g}": g for (m, d), g in predicted_cache.items()}}
    return experiment.write(rows, columns=COLUMNS, title="PaI masks of a widening MLP vs the FSM graphon",
                            notes=notes, figures=figures, extra=extra)


def _cell(method, width, pruned, predicted, grid):
    """One table row (means over seeds) and the empirical graphons [seeds][grid, grid] of the hidden layer."""
    stats = [matrix_statistics(np.asarray(mask["hidden"]["kernel"]), grid=grid) for mask, _ in pruned]
    graphons = [s["graphon"] for s in stats]
    distances = [graphon_distances(s["graphon"], predicted(method, s["density"])) for s in stats]
    seed_pairs = [graphon_distances(a, b)["l2"] for a, b in zip(graphons, graphons[1:], strict=False)]
    first = [np.asarray(mask["input"]["kernel"]) for mask, _ in pruned]
    informative = [m[:NUM_TOKENS].sum() / max(m.sum(), 1) for m in first]
    r2 = [fit_factorised_saliency(scores).r2 if scores is not None else None for _, scores in pruned]
    row = {"method": method, "width": width, "density": _mean(s["density"] for s in stats),
           "cell_std": _mean(s["homogeneity"] ** 0.5 for s in stats),
           "null_std": _mean(s["null_var"] ** 0.5 for s in stats),
           "l2_to_pred": _mean(d["l2"] for d in distances), "cut_to_pred": _mean(d["cut"] for d in distances),
           "l2_seed_to_seed": _mean(seed_pairs), "fsm_r2": _mean(r2), "informative_share": _mean(informative),
           "_l2": [d["l2"] for d in distances], "_cut": [d["cut"] for d in distances]}
    return row, graphons


def _notes(methods, widths, reference_width, sparsity, scope, grid, factors, predicted_cache):
    spreads = ", ".join(f"{m} {np.std(predicted_cache[m, d]):.3f}" for (m, d) in predicted_cache
                        if m in factors and d == max(d for (n, d) in predicted_cache if n == m))
    r2 = ", ".join(f"{m} {f.r2:.3f}" for m, f in factors.items())
    return [
        f"The hidden n x n layer of the ReLU MLP, n = {widths[0]}..{widths[-1]}, pruned at sparsity {sparsity} "
        f"({scope});"
        f" {grid}x{grid} degree-sorted graphons. No training (masks at initialisation).",
        f"Predicted graphon: constant density for random/magnitude; for SNIP/GraSP the FSM fitted on a width-"
        f"{reference_width} reference network (seed {REFERENCE_SEED}); R^2 of its factors: {r2 or '-'}; "
        f"std of its cells: {spreads or '-'}.",
        "cell_std: std of the empirical graphon's cells (null_std: what a constant graphon shows from noise); "
        "l2/cut_to_pred: distance to the predicted graphon (mean over seeds); l2_seed_to_seed: between the "
        "graphons of consecutive seeds; fsm_r2: share of var(log|score|) the neuron factors explain at this "
        f"width; informative_share: fraction of first-layer kept edges on the {NUM_TOKENS} informative of "
        f"{NUM_TOKENS + NOISE_TOKENS} inputs (0.5 = no selection).",
    ]
