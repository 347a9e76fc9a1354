"""Reproduction: ConfSMoE's two claims the routing comparison (`moe_routing`) cannot test by itself.

Paper: "ConfSMoE: Handling Missing and Multi-Modal Inputs with Confidence-Guided Sparse Expert Selection"
(Zheng et al., ICML 2026). See docs/papers/confsmoe.md.

  * Imputation ablation: the same ConfSMoE classifier (router "confidence") trained and evaluated with no
    imputation (a missing modality's raw input stays zero), stage 1 only (the input-level fill from training
    inputs) and stages 1 + 2 (plus the expert-level fill of the first layer), at several missing ratios of
    setting II. Objective options `fill` / `impute` of "multimodal_moe"; the evaluation of an arm without stage 1
    zeroes the test split's stored fills (`zoo.moe.multimodal.zero_missing`).
  * Collapse: a setting in which top-k softmax routing without a balancing loss collapses, so the claim "no
    balancing loss is needed" can be tested at all. The Switch/GShard form of the softmax gate (probabilities
    over all E experts taken at the chosen ones, router option normalize="all") is the one whose gradient
    feeds usage back into the scores; it is trained with and without the Switch balancing loss, against the
    softmax over the chosen logits (ConfSMoE's code's form) and ConfSMoE's router, at E = `collapse_experts`,
    k = `collapse_top_k` and a learning rate of `collapse_lr`.
    ConfSMoE's gate receives no gradient (as in the official code; tests/zoo/test_moe_routers.py), so its
    selection stays the initial projection of the drifting hidden states: its balance is that of a frozen
    random router, not a learned one.

Every cell is the `confsmoe_multimodal` preset through the shared trainer (`moe_routing.classifier_config`),
reopened after training and evaluated on the whole test split without routing noise. Rows report the mean
over seeds and the spread (max − min).

Example::

    from icml26zoo import repro
    results = repro.run("confsmoe_ablation", "runs/confsmoe_ablation", budget="quick")
    print(results.markdown)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.moe import MoEConfig
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure, mean_and_spread
from icml26zoo.repro.moe_routing import classifier_config, evaluate_cell, mean_curve
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int, check_interval, check_positive

__all__ = ["ARMS", "COLLAPSE_ROUTERS", "FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=200, batch_size=32, seq_len=4, seeds=(0, 1, 2))
FULL = Budget(steps=400, batch_size=32, seq_len=8, seeds=(0, 1, 2))
QUICK_ARGS = {"missing_ratios": (0.2, 0.6), "dim": 32, "collapse_experts": 8, "train_size": 1024, "test_size": 256}
# The new code paths at the smallest size: the arm without imputation (the stage-1 and -2 paths are moe_routing's), one
# collapse router, two steps each.
SMOKE = Budget(steps=2, batch_size=4, seq_len=2, seeds=(0,))
SMOKE_ARGS = {"missing_ratios": (0.5,), "arms": ("off",), "collapse_routers": ("topk_softmax_all",),
              "experts": 2, "collapse_experts": 2, "dim": 8, "train_size": 16, "test_size": 8}
# Imputation arm -> (stage-1 fill, stage-2 imputation), in training and evaluation alike.
ARMS = {"off": (False, False), "stage1": (True, False), "stage1_2": (True, True)}
# Collapse-setting router -> (registered router, its options, load-balancing weight).
COLLAPSE_ROUTERS = {
    "topk_softmax": ("topk_softmax", (), 0.0),
    "topk_softmax_all": ("topk_softmax", (("normalize", "all"),), 0.0),
    "topk_softmax_all_lb": ("topk_softmax", (("normalize", "all"),), 0.01),
    "confidence": ("confidence", (), 0.0),
}
# Setting II keeps one modality per sample: with M = 3 at most 2/3 of the entries can be missing.
MAX_MISSING_RATIO = 0.6
IMPUTATION_COLUMNS = ("missing_ratio", "arm", "accuracy", "accuracy_spread", "auc", "auc_spread")
COLLAPSE_COLUMNS = ("router", "balance_loss", "collapse", "collapse_spread", "max_load_ratio", "accuracy",
                    "accuracy_spread")
TRAINING_COLLAPSE = "moe/layer0/collapse"


@register_experiment("confsmoe_ablation", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/confsmoe.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, missing_ratios: Sequence[float] = (0.2, 0.4, 0.6),
        arms: Sequence[str] = tuple(ARMS), collapse_routers: Sequence[str] = tuple(COLLAPSE_ROUTERS),
        experts: int = 8, dim: int = 64, collapse_experts: int = 16, collapse_top_k: int = 2,
        collapse_lr: float = 1e-2, train_size: int = 2048, test_size: int = 512, resume: bool = False) -> Results:
    """Trains the imputation arms at every missing ratio and the collapse routers, once per seed, and writes
    results.md/json and the figures imputation.png and collapse_during_training.png into `run_dir`.

    Args:
      run_dir: the experiment's directory (cells, the datasets under tfds/, results, figures).
      budget: Adam steps, samples per step, tokens per modality and seeds of every cell.
      missing_ratios: setting II's shares of missing (sample, modality) entries, each in [0, 0.6].
      arms: imputation arms from `ARMS`; () skips the ablation.
      collapse_routers: routers from `COLLAPSE_ROUTERS`; () skips the collapse setting.
      experts: E of the imputation cells (k = 2, the preset's).
      dim: the classifier's width d (a multiple of 8: 4 attention heads of an even width).
      collapse_experts, collapse_top_k, collapse_lr: E, k and the Adam learning rate of the collapse cells.
      train_size, test_size: samples in the task's training and test split (at least 2 each).
      resume: require run_dir to exist (an interrupted experiment); finished cells are reused either way.

    ValueError names a bad arm, router, ratio or size before anything is written.
    """
    arms = check_names("arms", arms, ARMS) if arms else ()
    collapse_routers = check_names("collapse_routers", collapse_routers, COLLAPSE_ROUTERS) if collapse_routers else ()
    ratios = _check_ratios(missing_ratios) if arms else ()
    for name, value in (("experts", experts), ("dim", dim), ("collapse_experts", collapse_experts),
                        ("train_size", train_size), ("test_size", test_size)):
        check_int(name, value, minimum=2)
    check_int("collapse_top_k", collapse_top_k, minimum=1)
    if collapse_top_k > collapse_experts:
        raise ValueError(f"collapse_top_k must be <= collapse_experts = {collapse_experts}, got {collapse_top_k}")
    check_positive("collapse_lr", collapse_lr)
    if dim % 8:
        raise ValueError(f"dim must be a multiple of 8 (4 attention heads of an even width), got {dim}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    sizes = {"dim": dim, "train_size": train_size, "test_size": test_size}
    devices = jax.devices()[:1]  # tiny models; batches need not divide a (virtual) device count
    imputation = [_imputation_row(experiment, ratio, arm, experts, sizes, devices) for ratio in ratios for arm in arms]
    collapse, curves = [], {}
    for router in collapse_routers:
        moe = _collapse_moe(router, collapse_experts, collapse_top_k)
        row, curves[router] = _collapse_row(experiment, router, moe, collapse_lr, sizes, devices)
        collapse.append(row)
    rows = [{"part": "imputation", **row} for row in imputation] + [{"part": "collapse", **row} for row in collapse]
    columns = ("part", *dict.fromkeys(IMPUTATION_COLUMNS + COLLAPSE_COLUMNS))
    figures = {}
    if imputation:
        figures["imputation"] = _imputation_figure(imputation)
    if collapse:
        figures["collapse_during_training"] = line_figure(
            curves, xlabel="step", ylabel="collapse 1 - H(load)/log E (training batches)",
            title=f"Collapse during training (E = {collapse_experts}, k = {collapse_top_k}, lr {collapse_lr:g})")
    notes = [f"Imputation: setting II, 3 modalities, {train_size} training / {test_size} test samples; d = {dim}, "
             f"E = {experts}, k = 2, router 'confidence', Adam 3e-4. Arms: off (missing inputs stay zero), stage1 "
             "(input-level fill), stage1_2 (plus the expert-level fill); trained and evaluated alike.",
             f"Collapse: setting II at 50% missing, E = {collapse_experts}, k = {collapse_top_k}, Adam "
             f"{collapse_lr:g}; topk_softmax = softmax over the k chosen logits; topk_softmax_all = softmax over all "
             "E at the chosen experts (Switch/GShard); _lb adds the Switch balancing loss (0.01). collapse = "
             "1 - H(load)/log E on the test split (0 balanced).",
             "Means over seeds; *_spread = max - min over seeds. Empty cells: the column belongs to the other part."]
    for row in rows:
        for column in columns:
            row.setdefault(column, None)
    extra = {"sizes": sizes, "curves": curves}
    return experiment.write(rows, columns=columns, title="ConfSMoE ablations: imputation and collapse",
                            notes=notes, figures=figures, extra=extra)


def _check_ratios(ratios: Sequence[float]) -> tuple[float, ...]:
    ratios = tuple(ratios)
    if not ratios:
        raise ValueError("missing_ratios must name at least one ratio when arms are run, got ()")
    for ratio in ratios:
        check_interval("missing_ratios entries (setting II keeps one of 3 modalities per sample)", ratio, 0.0,
                       MAX_MISSING_RATIO)
    return ratios


def _collapse_moe(router: str, experts: int, top_k: int) -> MoEConfig:
    name, options, balance = COLLAPSE_ROUTERS[router]
    return MoEConfig(num_experts=experts, top_k=top_k, router=name, router_options=options,
                     load_balance_weight=balance, z_loss_weight=0.0)


def _imputation_row(experiment: Experiment, ratio: float, arm: str, experts: int, sizes: dict[str, int],
                    devices: list) -> dict[str, Any]:
    fill, impute = ARMS[arm]
    moe = MoEConfig(num_experts=experts, top_k=2, router="confidence", load_balance_weight=0.0, z_loss_weight=0.0)
    metrics = []
    for seed in experiment.budget.seeds:
        cell = f"impute_{arm}_missing{ratio:g}_seed{seed}"
        config = classifier_config(experiment, seed, moe, **sizes, task={"missing_ratio": ratio},
                                   objective_options={"fill": fill, "impute": impute})
        experiment.train_cell(cell, config, devices=devices, final_eval=False)
        metrics.append(evaluate_cell(experiment, cell, devices, arms={"": (fill, impute)})["metrics"])
    row: dict[str, Any] = {"missing_ratio": ratio, "arm": arm}
    for name in ("accuracy", "auc"):
        row[name], row[f"{name}_spread"] = mean_and_spread([m[name] for m in metrics])
    return row


def _collapse_row(experiment: Experiment, router: str, moe: MoEConfig, lr: float, sizes: dict[str, int],
                  devices: list) -> tuple[dict[str, Any], tuple[list[int], list[float]]]:
    metrics, series = [], []
    for seed in experiment.budget.seeds:
        cell = f"collapse_{router}_seed{seed}"
        config = classifier_config(experiment, seed, moe, **sizes, learning_rate=lr)
        experiment.train_cell(cell, config, devices=devices, final_eval=False)
        metrics.append(evaluate_cell(experiment, cell, devices, arms={"": (True, True)})["metrics"])
        series.append(experiment.metrics(cell, TRAINING_COLLAPSE))
    row: dict[str, Any] = {"router": router, "balance_loss": moe.load_balance_weight}
    for name in ("collapse", "accuracy"):
        row[name], row[f"{name}_spread"] = mean_and_spread([m[name] for m in metrics])
    row["max_load_ratio"] = round(float(np.mean([m["max_load_ratio"] for m in metrics])), 4)
    return row, mean_curve(series)


def _imputation_figure(rows: list[dict[str, Any]]) -> Figure:
    """Test accuracy (mean over seeds, spread as error bars) against the missing ratio, one line per arm."""
    figure = Figure(figsize=(5, 3.5), layout="constrained")
    axes = figure.subplots()
    for arm in dict.fromkeys(row["arm"] for row in rows):
        mine = [row for row in rows if row["arm"] == arm]
        spreads = [0.0 if row["accuracy_spread"] is None else row["accuracy_spread"] / 2 for row in mine]
        axes.errorbar([row["missing_ratio"] for row in mine], [row["accuracy"] for row in mine], yerr=spreads,
                      marker="o", capsize=3, label=arm)
    axes.set_xlabel("missing ratio (setting II)")
    axes.set_ylabel("test accuracy")
    axes.legend(title="imputation")
    return figure
