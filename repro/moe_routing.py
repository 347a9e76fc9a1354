"""Reproduction: expert load and diversity per router on the synthetic multimodal task, no balancing loss.

Papers: "ConfSMoE: Handling Missing and Multi-Modal Inputs with Confidence-Guided Sparse Expert Selection"
(Zheng et al., ICML 2026) and "Mahalanobis-Pruned Mixture-of-Experts" (MP-MoE, ICML 2026). See
docs/papers/confsmoe.md and docs/papers/mp_moe.md.

Claims tested at small scale:
  * ConfSMoE: weighting the selected experts by their task confidence (router "confidence") instead of the
    softmax gate keeps the expert load balanced without any load-balancing loss, where top-k softmax
    routing collapses onto few experts; the same holds for Gaussian and Laplacian gates' selection.
  * MP-MoE: greedy Mahalanobis selection over the experts' co-occurrence (router "mahalanobis") picks
    more diverse expert sets than top-k: lower co-selection (mean |phi| between experts' selection
    indicators, `zoo.moe.diagnostics`).

Every router trains the same ConfSMoE classifier (`zoo.moe.multimodal`: one fusion layer, E = 8 experts,
k = 2, d = 64) on the same task (`zoo.moe.multimodal_data`, setting II: 3 modalities, 50% of
(sample, modality) entries missing), with Adam 3e-4 in the classifier's own loop
(`zoo.moe.multimodal_train`), load-balancing and z-loss weights 0; "topk_softmax_lb" is top-k softmax
with the usual Switch balancing loss (weight 0.01) as the reference a practitioner would run. The
budget's `steps` are Adam steps of `batch_size` samples and `seq_len` is the tokens per modality. Reported
per router (mean over seeds, on the test split, imputation on): accuracy, layer 0's collapse indicator
1 − H(load)/log E, max-load ratio E·max_e f_e, co-selection, and on a fixed probe of 256 training samples
the collapse indicator during training.

Example::

    from icml26zoo.repro import moe_routing
    results = moe_routing.run("runs/moe_routing", budget=moe_routing.QUICK, **moe_routing.QUICK_ARGS)
    print(results.markdown)
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from icml26zoo.moe.layer import MoEConfig
from icml26zoo.moe.multimodal import ConfSMoEConfig
from icml26zoo.moe.multimodal_data import MultimodalTaskConfig, make_multimodal_data
from icml26zoo.moe.multimodal_train import TrainConfig, evaluate_classifier, train_classifier
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure
from icml26zoo.validation import check_int

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "ROUTERS", "run"]

QUICK = Budget(steps=30, batch_size=16, seq_len=4, seeds=(0,))
FULL = Budget(steps=600, batch_size=32, seq_len=8, seeds=(0, 1))
# The QUICK run (notebook, test): the two routers of the ConfSMoE claim on a small task and model.
QUICK_ARGS = {"routers": ("topk_softmax", "confidence"), "experts": 4, "dim": 16, "train_size": 256,
              "test_size": 64}
# Router variant -> (registered router, load-balancing weight).
ROUTERS = {
    "topk_softmax": ("topk_softmax", 0.0),
    "confidence": ("confidence", 0.0),
    "gaussian": ("gaussian", 0.0),
    "laplacian": ("laplacian", 0.0),
    "mahalanobis": ("mahalanobis", 0.0),
    "topk_softmax_lb": ("topk_softmax", 0.01),
}
COLUMNS = ("router", "balance_loss", "accuracy", "collapse", "max_load_ratio", "coselection")
PROBE_SIZE = 256


def _configs(router: str, seed: int, budget: Budget, experts: int, dim: int, train_size: int,
             test_size: int) -> tuple[MultimodalTaskConfig, ConfSMoEConfig, TrainConfig]:
    name, balance = ROUTERS[router]
    task = MultimodalTaskConfig(feature_dims=(6, 10, 4), signal=(1.0, 1.0, 1.0), tokens=budget.seq_len,
                                setting="II", missing_ratio=0.5, modality_missing_rates=(0.3, 0.3, 0.3),
                                train_size=train_size, test_size=test_size, seed=seed)
    moe = MoEConfig(num_experts=experts, top_k=2, router=name, load_balance_weight=balance, z_loss_weight=0.0)
    model = ConfSMoEConfig(feature_dims=task.feature_dims, tokens=task.tokens, dim=dim,
                           num_classes=task.num_classes, moe=moe)
    return task, model, TrainConfig(steps=budget.steps, batch_size=budget.batch_size, seed=seed)


def _cell(router: str, seed: int, budget: Budget, **sizes: int) -> dict[str, Any]:
    task, model, train = _configs(router, seed, budget, **sizes)
    data = make_multimodal_data(task)
    probe = data.train.take(np.arange(min(PROBE_SIZE, len(data.train))))
    trained = train_classifier(data, model, train, log_every=max(1, budget.steps // 10), probe=probe)
    metrics = evaluate_classifier(trained, data.test, impute=True, seed=seed)
    return {"metrics": metrics, "routing": trained.routing}


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values))


def _row(router: str, cells: list[dict[str, Any]]) -> dict[str, Any]:
    metrics = [cell["metrics"] for cell in cells]
    row: dict[str, Any] = {"router": router, "balance_loss": ROUTERS[router][1]}
    for name in COLUMNS[2:]:
        row[name] = round(_mean([m[name] for m in metrics]), 4)
    row["load"] = [round(float(v), 4) for v in np.mean([m["load"] for m in metrics], axis=0)]
    return row


def _load_figure(rows: list[dict[str, Any]]) -> Figure:
    figure = Figure(figsize=(8, 3.5))
    axes = figure.subplots()
    width = 1.0 / (len(rows) + 1)
    for offset, row in enumerate(rows):
        experts = np.arange(len(row["load"]))
        axes.bar(experts + offset * width, row["load"], width=width, label=row["router"])
    axes.axhline(1.0 / len(rows[0]["load"]), color="black", linestyle="--", linewidth=0.8, label="uniform")
    axes.set_xlabel("expert")
    axes.set_ylabel("share of routed tokens (test)")
    axes.legend(fontsize="small", ncol=2)
    figure.tight_layout()
    return figure


def _diversity_figure(rows: list[dict[str, Any]]) -> Figure:
    figure = Figure(figsize=(8, 3.2))
    collapse, coselection = figure.subplots(1, 2)
    names = [row["router"] for row in rows]
    collapse.bar(names, [row["collapse"] for row in rows])
    collapse.set_ylabel("collapse 1 - H(load)/log E")
    coselection.bar(names, [row["coselection"] for row in rows])
    coselection.set_ylabel("co-selection mean |phi|")
    for axes in (collapse, coselection):
        axes.tick_params(axis="x", labelrotation=45)
    figure.tight_layout()
    return figure


def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, routers: Sequence[str] = tuple(ROUTERS),
        experts: int = 8, dim: int = 64, train_size: int = 2048, test_size: int = 512,
        resume: bool = False) -> Results:
    """Trains every router in `routers` once per seed and writes results.md/json and the figures
    expert_load.png, collapse_during_training.png and diversity.png into `run_dir`.

    ValueError names a bad router (listing the valid ones) or size.
    """
    routers = check_names("routers", routers, ROUTERS)
    for name, value in (("experts", experts), ("dim", dim), ("train_size", train_size), ("test_size", test_size)):
        check_int(name, value, minimum=2)
    if dim % 4:
        raise ValueError(f"dim must be a multiple of 4 (the attention heads), got {dim}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    sizes = {"experts": experts, "dim": dim, "train_size": train_size, "test_size": test_size}
    cells = {router: [_cell(router, seed, budget, **sizes) for seed in budget.seeds] for router in routers}
    rows = [_row(router, cells[router]) for router in routers]
    curves = {}
    for router in routers:
        runs = [cell["routing"] for cell in cells[router]]
        steps = [step for step, _ in runs[0]]
        curves[router] = (steps, [_mean([r[i][1]["collapse"] for r in runs]) for i in range(len(steps))])
    figures = {
        "expert_load": _load_figure(rows),
        "collapse_during_training": line_figure(curves, xlabel="step", ylabel="collapse (probe, layer 0)",
                                                title="Collapse indicator during training"),
        "diversity": _diversity_figure(rows),
    }
    notes = [f"Task: setting II, 3 modalities, 50% missing, {train_size} training / {test_size} test samples; "
             f"classifier d = {dim}, E = {experts}, k = 2; no balancing loss except topk_softmax_lb (0.01).",
             "collapse = 1 - H(load)/log E (0 balanced, 1 one expert takes all); max_load_ratio = E max_e f_e; "
             "coselection = mean |phi| of two experts' selection indicators (lower = more diverse)."]
    extra = {"sizes": sizes, "curves": curves, "loads": {row["router"]: row["load"] for row in rows}}
    return experiment.write(rows, columns=COLUMNS, title="MoE routing: load balance and expert diversity",
                            notes=notes, figures=figures, extra=extra)

