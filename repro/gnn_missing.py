"""GNNs under missing node features (GNNmim, Ferrini et al., ICML 2026) and adaptive node feature selection by
permutation importance (Azizpour, Navarro, Segarra, ICML 2026; a reconstruction), on CSBM graphs.

Two parts, each per seed on a freshly generated dense contextual-SBM graph (`icml26zoo.graphs.csbm`: N nodes,
4 classes, homophily 0.8, D features of which 8 carry the class):

- `missing`: for every mechanism and rate p, the mask M is drawn once and two GCNs are trained with early
  stopping on validation macro-F1 (`repro/gnn_missing_parts.py`): `gnnmim` on [X̃ (missing -> 0), 1 − M] and
  `gcnmi` on column-mean-imputed X̃. The non-informative columns are noisy mixtures of the informative ones.
- `selection`: GCN (hidden 64) trained for the same number of epochs with all features (`all`), with ANFS
  (`anfs`: permutation scores on the validation loss after a warm-up and then on a schedule; features scoring
  <= threshold pruned, at most 10% of the active set per round), and with a random subset the size of ANFS's
  final set (`random`). Here the non-informative columns are pure noise, so the planted set is the answer.

Rows are mean ± spread (max − min) over seeds. Nothing is checkpointed: `resume` only requires `run_dir` to
exist and recomputes. `Budget`: `steps` = epochs, `batch_size` = nodes N, `seq_len` = features D.

    from icml26zoo import repro
    results = repro.run("gnn_missing", "runs/gnn_missing", budget="quick")

From a shell: `python -m icml26zoo.repro gnn_missing [--smoke | --quick] --out DIR [parts_to_run=missing,selection]
[mechanisms=umcar,fdmnar] [rates=0.1,0.5,0.9] [methods=gnnmim,gcnmi] [selectors=all,anfs,random]`.
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo import graphs
from icml26zoo.repro import gnn_missing_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, mean_and_spread
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_interval, check_number, check_positive, check_unit_interval

__all__ = ["FULL", "PARTS", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=500, batch_size=2000, seq_len=32, seeds=(0, 1, 2))
QUICK = Budget(steps=200, batch_size=1000, seq_len=32, seeds=(0, 1, 2))
# One mechanism and rate, both methods and all selectors, 20 epochs on 120 nodes with 16 features, one seed.
SMOKE = Budget(steps=20, batch_size=120, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"rates": (0.5,), "mechanisms": ("fdmnar",)}

PARTS = ("missing", "selection")
INFORMATIVE = 8
COLUMNS = ("part", "setting", "method", "macro_f1", "accuracy", "features_kept", "informative_kept",
           "noise_dropped")


def _cell(values: list[float], digits: int = 3) -> str:
    mean, spread = mean_and_spread(values, digits=digits)
    return f"{mean:.{digits}f} ± {0.0 if spread is None else spread:.{digits}f}"


def _data(budget: Budget, seed: int, *, correlated: bool, signal: float, mean_degree: float) -> graphs.CSBM:
    return graphs.csbm(num_nodes=budget.batch_size, dims=budget.seq_len, informative=min(INFORMATIVE, budget.seq_len),
                       mean_degree=mean_degree, signal=signal, correlated=correlated, seed=seed)


def missing_scores(budget: Budget, seed: int, *, mechanisms: tuple[str, ...], rates: tuple[float, ...],
                   methods: tuple[str, ...], signal: float, mean_degree: float) -> dict[tuple, dict[str, float]]:
    """(mechanism, p, method) -> {test_f1, test_acc, ...} of one seed."""
    data = _data(budget, seed, correlated=True, signal=signal, mean_degree=mean_degree)
    split, x = parts.split_nodes(data.labels, seed), np.asarray(data.graph.nodes)
    config = parts.TrainConfig(epochs=budget.steps)
    found = {}
    for mechanism in mechanisms:
        for p in rates:
            mask = graphs.make_missing(mechanism, x, data.labels, p, seed=seed)
            for method in methods:
                inputs = parts.missing_inputs(method, x, mask)
                found[(mechanism, p, method)] = parts.fit_early_stopping(inputs, data.labels, data.graph, split,
                                                                         config=config, seed=seed)
    return found


def selection_scores(budget: Budget, seed: int, *, selectors: tuple[str, ...], signal: float, mean_degree: float,
                     threshold: float, fraction: float) -> dict[str, dict]:
    """selector -> {test_acc, active [D], history} of one seed ("random" takes ANFS's final size, or half of D
    when ANFS is not run)."""
    data = _data(budget, seed, correlated=False, signal=signal, mean_degree=mean_degree)
    split = parts.split_nodes(data.labels, seed)
    config = parts.TrainConfig(hidden=64, epochs=budget.steps)
    schedule = {"warmup": max(1, budget.steps // 10), "every": max(1, budget.steps // 20), "repeats": 5,
                "fraction": fraction, "threshold": threshold}
    found = {}
    for selector in sorted(selectors, key=lambda s: s == "random"):  # random after anfs: it takes anfs's size
        size = int(found["anfs"]["active"].sum()) if "anfs" in found else budget.seq_len // 2
        found[selector] = parts.anfs_run(data, split, selector=selector, config=config, seed=seed,
                                         random_size=size, **schedule)
        found[selector]["informative"] = data.informative
    return found


def _selection_row(selector: str, runs: list[dict]) -> dict[str, str]:
    kept, informative, dropped = [], [], []
    for found in runs:
        active, planted = found["active"], np.zeros(len(found["active"]), bool)
        planted[found["informative"]] = True
        kept.append(float(active.sum()))
        informative.append(float(active[planted].mean()))
        dropped.append(float((~active[~planted]).mean()) if (~planted).any() else float("nan"))
    return {"part": "selection", "setting": "csbm noise features", "method": selector, "macro_f1": "-",
            "accuracy": _cell([f["test_acc"] for f in runs]), "features_kept": _cell(kept, 1),
            "informative_kept": _cell(informative), "noise_dropped": _cell(dropped)}


def figure(missing: dict[tuple, list[dict]], history: list[tuple[int, np.ndarray]],
           informative: np.ndarray | None) -> Figure:
    """Left: test macro-F1 against p per mechanism and method (mean over seeds); right: ANFS's permutation
    scores over training (first seed; planted informative features solid)."""
    fig = Figure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    for mechanism, method in sorted({(k[0], k[2]) for k in missing}):
        rates = sorted({k[1] for k in missing if k[0] == mechanism})
        means = [np.mean([r["test_f1"] for r in missing[(mechanism, p, method)]]) for p in rates]
        left.plot(rates, means, marker="o", linestyle="-" if method == "gnnmim" else "--",
                  label=f"{mechanism} {method}")
    left.set(xlabel="missing rate p", ylabel="test macro-F1", title="GNNmim vs mean imputation")
    left.legend(fontsize=8)
    if history:
        epochs = [e for e, _ in history]
        scores = np.stack([s for _, s in history])
        for column in range(scores.shape[1]):
            planted = informative is not None and column in informative
            right.plot(epochs, scores[:, column], color="C3" if planted else "0.6", linewidth=1.5 if planted else 0.7)
    right.axhline(0.0, color="k", linewidth=0.5)
    right.set(xlabel="epoch", ylabel="NPT score (val. loss)", title="ANFS scores (red: planted informative)")
    for panel in (left, right):
        panel.grid(True, alpha=0.3)
    return fig


@register_experiment("gnn_missing", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/gnn_missing.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, parts_to_run: tuple[str, ...] = PARTS,
        mechanisms: tuple[str, ...] = ("umcar", "fdmnar"), rates: tuple[float, ...] = (0.1, 0.5, 0.9),
        methods: tuple[str, ...] = parts.METHODS, selectors: tuple[str, ...] = parts.SELECTORS,
        signal: float = 0.5, mean_degree: float = 5.0, threshold: float = 0.0, fraction: float = 0.1,
        resume: bool = False) -> Results:
    """Runs the chosen parts for every seed; writes results.md/json and the figure `gnn_missing`.

    Args:
      run_dir: where to write.
      budget: see the module docstring (default FULL).
      parts_to_run: a subset of PARTS ("missing", "selection").
      mechanisms: missingness mechanisms (`graphs.MECHANISMS`; "cdmnar" needs the [sklearn] extra).
      rates: missing rates p in [0, 1).
      methods: a subset of ("gnnmim", "gcnmi").
      selectors: a subset of ("all", "anfs", "random").
      signal: std of the class means on the informative features (noise std 1).
      mean_degree: expected node degree of the CSBM.
      threshold: ANFS prunes only features whose score is <= threshold.
      fraction: at most this share of the active set is pruned per round.
      resume: require `run_dir` to exist (everything is recomputed).
    """
    parts_to_run = check_names("parts_to_run", parts_to_run, PARTS)
    mechanisms = check_names("mechanisms", mechanisms, graphs.MECHANISMS)
    methods = check_names("methods", methods, parts.METHODS)
    selectors = check_names("selectors", selectors, parts.SELECTORS)
    if not rates:
        raise ValueError("rates must name at least one p in [0, 1), got none")
    for p in rates:
        check_unit_interval("rates[i]", p)
    check_positive("signal", signal, finite=True)
    check_positive("mean_degree", mean_degree, finite=True)
    check_number("threshold", threshold)
    check_interval("fraction", fraction, 0.0, 1.0, closed="right")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    missing: dict[tuple, list[dict]] = {}
    selection: dict[str, list[dict]] = {}
    for seed in budget.seeds:
        if "missing" in parts_to_run:
            for key, scores in missing_scores(budget, seed, mechanisms=mechanisms, rates=rates, methods=methods,
                                              signal=signal, mean_degree=mean_degree).items():
                missing.setdefault(key, []).append(scores)
        if "selection" in parts_to_run:
            for key, found in selection_scores(budget, seed, selectors=selectors, signal=signal,
                                               mean_degree=mean_degree, threshold=threshold,
                                               fraction=fraction).items():
                selection.setdefault(key, []).append(found)
    rows = [{"part": "missing", "setting": f"{mechanism} p={p:g}", "method": method,
             "macro_f1": _cell([r["test_f1"] for r in runs]), "accuracy": _cell([r["test_acc"] for r in runs]),
             "features_kept": "-", "informative_kept": "-", "noise_dropped": "-"}
            for (mechanism, p, method), runs in missing.items()]
    rows += [_selection_row(selector, selection[selector]) for selector in selectors if selector in selection]
    anfs = selection.get("anfs", [{}])[0]
    notes = [
        f"CSBM: {budget.batch_size} nodes, 4 classes, homophily 0.8, mean degree {mean_degree:g}, {budget.seq_len} "
        f"features, {min(INFORMATIVE, budget.seq_len)} informative (class-mean std {signal:g}, noise std 1); split "
        "70/10/20 stratified. missing: GCN hidden 128, dropout 0.5, Adam 0.01, up to "
        f"{budget.steps} epochs, early stopping on validation macro-F1 (patience 50), test scores of the best "
        "weights. selection: GCN hidden 64 trained for the same epochs; ANFS scores after "
        f"{max(1, budget.steps // 10)} epochs and then every {max(1, budget.steps // 20)}, R = 5 permutations, "
        f"threshold {threshold:g}, at most {fraction:g} of the active set per round; random = a random subset the "
        f"size of ANFS's final set. Mean ± spread (max − min) over seeds {budget.seeds}. ANFS is a reconstruction "
        "(no code is public).",
    ]
    extra = {"per_seed_missing": {f"{m} {p:g} {meth}": runs for (m, p, meth), runs in missing.items()},
             "selection_active": {s: [f["active"].astype(int).tolist() for f in runs] for s, runs in selection.items()},
             "informative": {s: [f["informative"].tolist() for f in runs] for s, runs in selection.items()}}
    return experiment.write(
        rows, columns=COLUMNS, title="GNNmim vs mean imputation under missing features; adaptive feature selection",
        notes=notes, figures={"gnn_missing": figure(missing, anfs.get("history", []), anfs.get("informative"))},
        extra=extra)
