"""PMDO ("Parameter-Masked Decoupled Optimization for Cross-Domain Class-Incremental Learning", ICML 2026):
masked, regulated updates against fine-tuning, EWC, an SPG-like mask and GPM on a five-task cross-domain
class-incremental benchmark of 8×8 images. Experimental: the method is the zoo's RECONSTRUCTION
(`icml26zoo.optim.pmdo`; docs/papers/pmdo.md).

Benchmark (`icml26zoo.optim.pmdo_cdcil`): 5 tasks × 2 new classes ({0,1}, {2,3}, …), each in its own domain
(identity, inversion, rotation 90°, blur + noise, flip + contrast 0.5), 70/30 split per class; one expanding head,
no task id at test. Sources: scikit-learn's digits ("digits", the `sklearn` extra) and a seeded synthetic
prototype set ("synthetic", 180 images per class). Methods (`repro/pmdo_parts.py`), all AdamW on a bias-free
MLP 64 → H → H → 10 with fresh optimiser state per task:

- `finetune`: no protection; `ewc`: online EWC at each λ of `ewc_lambdas`;
- `mask_only`: PMDO's decoupler alone (SPG-like importance, top-ρ relevance mask; old head columns frozen);
- `gpm`: GPM projection alone (ε = gpm_threshold); `regulation_only`: projection + slow weights (no mask);
- `pmdo`: mask + projection + slow weights (+ masked SAM when sam_rho > 0).

Methods in `ce_all_methods` run a second time with the cross-entropy over all seen classes (ce "all") instead of
the current task's (ce "current", the default). Rows: mean ± std over seeds of Ā, A_T, forgetting F, BWT and the
newest task's accuracy a[T, T]. Nothing is checkpointed, so `resume` only requires `run_dir` and recomputes.
Budget fields: `steps` = epochs per task, `batch_size` = batch, `seq_len` = hidden width H, `seeds` = seeds.

    from icml26zoo import repro
    results = repro.run("pmdo", "runs/pmdo", budget="quick")

From a shell: `python -m icml26zoo.repro pmdo [--smoke | --quick] --out DIR [sources=digits,synthetic]
[methods=finetune,ewc,mask_only,gpm,regulation_only,pmdo] [ewc_lambdas=100,10000,1000000] [rho_mask=0.2] ...`.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo.optim.pmdo_cdcil import DOMAINS, make_tasks, synthetic_images
from icml26zoo.repro import pmdo_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, mean_std_text
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int, check_interval, check_non_negative, check_positive

__all__ = ["FULL", "METHODS", "QUICK", "SMOKE", "SMOKE_ARGS", "SOURCES", "run"]

FULL = Budget(steps=30, batch_size=32, seq_len=256, seeds=(0, 1, 2))
QUICK = Budget(steps=10, batch_size=32, seq_len=128, seeds=(0, 1, 2))
# Synthetic source, the first two tasks, fine-tuning and full PMDO (every part but SAM: mask, projection, slow
# weights, both task hooks), 2 epochs per task, width 16, one seed.
SMOKE = Budget(steps=2, batch_size=16, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"sources": ("synthetic",), "methods": ("finetune", "pmdo"), "ce_all_methods": (), "tasks": 2}

METHODS = parts.METHODS
SOURCES = ("digits", "synthetic")
SYNTHETIC_PER_CLASS = 180
SCORES = ("A_bar", "A_T", "F", "BWT", "newest")
COLUMNS = ("source", "method", "setting", *SCORES)


def load_source(source: str) -> tuple[np.ndarray, np.ndarray]:
    """(images [N, 8, 8] in 0 .. 16, labels [N]) of a source."""
    if source == "synthetic":
        return synthetic_images(SYNTHETIC_PER_CLASS, seed=0)
    from sklearn.datasets import load_digits  # the sklearn extra (declared at registration)

    bunch = load_digits()
    return bunch.images.astype(np.float32), bunch.target.astype(np.int32)


def _spread(values: list[float]) -> str:
    return mean_std_text(values, ".3f", ".3f")


def _settings(methods: tuple[str, ...], ewc_lambdas: tuple[float, ...], ce_all_methods: tuple[str, ...],
              overrides: dict) -> list[tuple[str, str, parts.Method]]:
    """(method, setting label, Method) for every run of a seed."""
    runs = []
    for name in methods:
        base = parts.METHOD_CONFIGS[name]
        if name in ("mask_only", "regulation_only", "gpm", "pmdo"):
            base = dataclasses.replace(base, cfg=dataclasses.replace(base.cfg, **{
                k: v for k, v in overrides.items() if k != "ema_alpha" or base.cfg.ema_alpha < 1}))
        lambdas = ewc_lambdas if name == "ewc" else (0.0,)
        for lam in lambdas:
            method = dataclasses.replace(base, ewc_lambda=lam)
            label = f"λ={lam:g}" if name == "ewc" else ""
            scopes = ("current", "all") if name in ce_all_methods else ("current",)
            for scope in scopes:
                cfg = dataclasses.replace(method.cfg, ce_scope=scope)
                runs.append((name, " ".join(filter(None, [label, f"ce {scope}"])),
                             dataclasses.replace(method, cfg=cfg)))
    return runs


def matrix_figure(matrices: dict[str, np.ndarray]) -> Figure:
    """The seed-mean accuracy matrix a[t, j] of each run (first source), one panel each."""
    count = len(matrices)
    cols = min(count, 4)
    figure = Figure(figsize=(3.2 * cols, 3.0 * -(-count // cols)), layout="constrained")
    panels = np.atleast_1d(figure.subplots(-(-count // cols), cols, squeeze=False)).ravel()
    for panel, (label, acc) in zip(panels, matrices.items(), strict=False):
        shown = np.where(np.tril(np.ones_like(acc, bool)), acc, np.nan)
        panel.imshow(shown, vmin=0, vmax=1, cmap="viridis")
        for (t, j), value in np.ndenumerate(acc):
            if j <= t:
                panel.text(j, t, f"{value:.2f}", ha="center", va="center", fontsize=7,
                           color="white" if value < 0.6 else "black")
        panel.set(title=label, xlabel="task j (tested)", ylabel="after task t", xticks=range(acc.shape[0]),
                  yticks=range(acc.shape[0]))
        panel.title.set_fontsize(8)
    for panel in panels[count:]:
        panel.set_visible(False)
    return figure


@register_experiment("pmdo", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/pmdo.md",
                     extras=("sklearn",))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, sources: tuple[str, ...] = SOURCES,
        methods: tuple[str, ...] = METHODS, ewc_lambdas: tuple[float, ...] = (1e2, 1e4, 1e6),
        ce_all_methods: tuple[str, ...] = ("finetune", "pmdo"), learning_rate: float = 1e-3,
        weight_decay: float = 1e-4, rho_mask: float = 0.2, ema_alpha: float = 0.1, sam_rho: float = 0.0,
        gpm_threshold: float = 0.97, tasks: int = 5, resume: bool = False) -> Results:
    """Trains every method task by task per source and seed; writes results.md/json and the figure `matrices`.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      sources: a subset of SOURCES ("digits", "synthetic").
      methods: a subset of METHODS.
      ewc_lambdas: EWC's λ grid (each a row; λ > 0).
      ce_all_methods: methods also run with the cross-entropy over all seen classes (a subset of `methods`).
      learning_rate, weight_decay: AdamW's.
      rho_mask, ema_alpha, sam_rho, gpm_threshold: PMDO's ρ, slow-weight α (methods with slow weights), masked-SAM
        radius and GPM energy threshold ε, for the PMDO-family methods.
      tasks: how many of the five tasks to run (2 .. 5, in order).
      resume: require `run_dir` to exist (everything is recomputed).
    """
    sources = check_names("sources", sources, SOURCES)
    methods = check_names("methods", methods, METHODS)
    ce_all_methods = tuple(ce_all_methods)
    if ce_all_methods:
        check_names("ce_all_methods", ce_all_methods, methods)
    if "ewc" in methods and not ewc_lambdas:
        raise ValueError("ewc_lambdas must name at least one λ > 0 when methods include 'ewc', got none")
    for lam in ewc_lambdas:
        check_positive("ewc_lambdas[i]", lam, finite=True)
    check_positive("learning_rate", learning_rate, finite=True)
    check_non_negative("weight_decay", weight_decay, finite=True)
    check_interval("rho_mask", rho_mask, 0.0, 1.0, closed="right")
    check_interval("ema_alpha", ema_alpha, 0.0, 1.0, closed="right")
    check_non_negative("sam_rho", sam_rho, finite=True)
    check_interval("gpm_threshold", gpm_threshold, 0.0, 1.0, closed="right")
    check_int("tasks", tasks, minimum=2, maximum=len(DOMAINS))
    overrides = {"rho_mask": rho_mask, "ema_alpha": ema_alpha, "sam_rho": sam_rho, "gpm_threshold": gpm_threshold}
    runs = _settings(methods, ewc_lambdas, ce_all_methods, overrides)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    found: dict[tuple[str, str, str], list[parts.RunResult]] = {}
    for source in sources:
        images, labels = load_source(source)
        for seed in budget.seeds:
            task_list = make_tasks(images, labels, domains=DOMAINS[:tasks], seed=seed)
            for name, label, method in runs:
                result = parts.run_method(method, task_list, seed=seed, hidden=budget.seq_len, epochs=budget.steps,
                                          batch_size=budget.batch_size, learning_rate=learning_rate,
                                          weight_decay=weight_decay)
                found.setdefault((source, name, label), []).append(result)
    rows = []
    for (source, name, label), results in found.items():
        scores = {s: [r.metrics[s] for r in results] for s in SCORES if s != "newest"}
        scores["newest"] = [r.acc[-1, -1] for r in results]
        rows.append({"source": source, "method": name, "setting": label,
                     **{s: _spread(v) for s, v in scores.items()}})
    mean_acc = {" ".join(key): np.mean([r.acc for r in results], axis=0) for key, results in found.items()}
    first = sources[0]
    figures = {"matrices": matrix_figure({f"{k[1]} {k[2]}": v for k, v in zip(found, mean_acc.values(), strict=True)
                                          if k[0] == first})}
    notes = [
        f"{tasks} tasks of two new classes, each in its own domain ({', '.join(DOMAINS[:tasks])}); "
        f"bias-free MLP 64 → {budget.seq_len} → {budget.seq_len} → 10, AdamW lr {learning_rate:g} (weight decay "
        f"{weight_decay:g}), {budget.steps} epochs per task, batch {budget.batch_size}; mean ± std over seeds "
        f"{budget.seeds}. A_bar: mean over tasks of the pooled accuracy on all seen tasks; A_T: that accuracy after "
        "the last task; F: mean over old tasks of (best earlier accuracy − final accuracy); BWT: mean of "
        "(final − just-learned accuracy); newest: the last task's accuracy after training on it (plasticity). "
        f"PMDO: ρ = {rho_mask:g}, hard mask, saliency relevance, α = {ema_alpha:g}, ε = {gpm_threshold:g}, "
        f"sam_rho = {sam_rho:g}. PMDO is the zoo's reconstruction (no official code).",
    ]
    extra = {
        "per_seed": {" | ".join(k): [dict(r.metrics, A_t=list(r.metrics["A_t"])) for r in v] for k, v in found.items()},
        "mean_accuracy_matrix": {k: np.round(v, 4).tolist() for k, v in mean_acc.items()},
        "capacity_mean_1_minus_A": {" | ".join(k): [r.capacity for r in v] for k, v in found.items() if v[0].capacity},
        "gpm_basis_sizes": {" | ".join(k): [r.basis_sizes for r in v] for k, v in found.items() if v[0].basis_sizes},
    }
    return experiment.write(rows, columns=COLUMNS, title="PMDO (reconstruction) on cross-domain class-incremental "
                            "8×8 images: accuracy, forgetting, backward transfer", notes=notes, figures=figures,
                            extra=extra)
