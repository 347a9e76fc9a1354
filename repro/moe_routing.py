"""Reproduction: expert load and diversity per router on the synthetic multimodal task, no balancing loss.

Papers: "ConfSMoE: Handling Missing and Multi-Modal Inputs with Confidence-Guided Sparse Expert Selection"
(Zheng et al., ICML 2026) and "Mahalanobis-Pruned Mixture-of-Experts" (MP-MoE, ICML 2026). See
docs/papers/confsmoe.md and docs/papers/mp_moe.md.

What it measures, per router, at small scale:
  * ConfSMoE's claim: weighting the selected experts by their task confidence (router "confidence") instead of
    the softmax gate keeps the expert load balanced without any load-balancing loss, where top-k softmax routing
    collapses; the same for Gaussian and Laplacian gates' selection. ConfSMoE's gate gets no gradient (as in the
    official code), so its load is that of a fixed random projection; the setting here does not make top-k
    softmax collapse either, so the claim is tested in `confsmoe_ablation`, whose collapse setting does.
  * MP-MoE's question: does greedy Mahalanobis-pruned selection over the experts' co-occurrence (router
    "mahalanobis") pick pairs less predictably than top-k? Co-selection (mean |phi| between experts' selection
    indicators, `zoo.moe.diagnostics`) depends on the load, so each row reports it beside the floor 1/(E − 1)
    (uniformly random k-of-E routing, for every k) and a load-matched reference (`coselection_reference`):
    only co-selection below the matched reference is diversity beyond the load.

Every router trains the same ConfSMoE classifier (model "confsmoe", `zoo.moe.multimodal`: one fusion layer,
E = 8 experts, k = 2, d = 64) on the same task (dataset `zoo_multimodal`, setting II: 3 modalities, 50% of
(sample, modality) entries missing, stage-1 filled from the training split) with the shared trainer
(`Experiment.train_cell`; preset `confsmoe_multimodal`: objective "multimodal_moe", Adam at a constant 3e-4),
load-balancing and z-loss weights 0; "topk_softmax_lb" is top-k softmax with the usual Switch balancing loss
(weight 0.01) as the reference a practitioner would run. The mahalanobis router estimates its co-occurrence
from each batch (the model carries only parameters). The budget's `steps` are Adam steps of `batch_size`
samples and `seq_len` is the tokens per modality. Each trained cell is reopened (`train.load_run`) and
evaluated on the whole test split without routing noise, with and without stage-2 imputation: accuracy, macro
F1, one-vs-rest macro AUC, and layer 0's expert load, collapse indicator 1 − H(load)/log E, max-load ratio
E·max_e f_e, co-selection with its floor and load-matched reference (mean over seeds). During training the
trainer logs layer 0's collapse indicator on the training batches (the objective's train diagnostics, averaged
over each logging window).

Example::

    from icml26zoo import repro
    results = repro.run("moe_routing", "runs/moe_routing", budget="quick")
    print(results.markdown)
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import statistics
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.configs import confsmoe_multimodal
from icml26zoo.moe import MoEConfig
from icml26zoo.moe.diagnostics import phi_correlation, routing_diagnostics
from icml26zoo.moe.multimodal import zero_missing
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data.features import open_rows
from icml26zoo.validation import check_int

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "ROUTERS", "ROUTING_ARMS", "SMOKE", "SMOKE_ARGS", "cell_config",
           "classifier_config", "classification_scores", "coselection_reference", "evaluate_cell",
           "matched_cooccurrence", "mean_curve", "run"]

QUICK = Budget(steps=30, batch_size=16, seq_len=4, seeds=(0,))
FULL = Budget(steps=600, batch_size=32, seq_len=8, seeds=(0, 1, 2))
# The QUICK run (notebook): the two routers of the ConfSMoE claim on a small task and model.
QUICK_ARGS = {"routers": ("topk_softmax", "confidence"), "experts": 4, "dim": 16, "train_size": 256,
              "test_size": 64}
# Every code path at the smallest size: one confidence-router cell of two steps, reopened and evaluated.
SMOKE = Budget(steps=2, batch_size=4, seq_len=2, seeds=(0,))
SMOKE_ARGS = {"routers": ("confidence",), "experts": 2, "dim": 8, "train_size": 16, "test_size": 8}
# Router variant -> (registered router, load-balancing weight).
ROUTERS = {
    "topk_softmax": ("topk_softmax", 0.0),
    "confidence": ("confidence", 0.0),
    "gaussian": ("gaussian", 0.0),
    "laplacian": ("laplacian", 0.0),
    "mahalanobis": ("mahalanobis", 0.0),
    "topk_softmax_lb": ("topk_softmax", 0.01),
}
COLUMNS = ("router", "balance_loss", "accuracy", "f1", "auc", "accuracy_no_impute", "auc_no_impute", "collapse",
           "max_load_ratio", "coselection", "coselection_matched", "coselection_floor")
# Averaged over seeds into the row (evaluation with stage-2 imputation unless suffixed "_no_impute").
AVERAGED = COLUMNS[2:-2]
# Experts chosen per token in every cell.
TOP_K = 2
# Multiplicative updates fitting the load-matched reference's subset weights to a load.
FIT_ITERATIONS = 500
# Where a cell's evaluation is kept (its directory).
EVALUATION = "evaluation.json"
# The training-time diagnostic drawn per router.
TRAINING_COLLAPSE = "moe/layer0/collapse"


@register_experiment("moe_routing", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/confsmoe.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, routers: Sequence[str] = tuple(ROUTERS),
        experts: int = 8, dim: int = 64, train_size: int = 2048, test_size: int = 512,
        resume: bool = False) -> Results:
    """Trains every router in `routers` once per seed, evaluates each trained cell, and writes results.md/json
    and the figures expert_load.png, collapse_during_training.png and diversity.png into `run_dir`.

    Args:
      run_dir: the experiment's directory (cells, the dataset under tfds/, results, figures).
      budget: Adam steps, samples per step, tokens per modality and seeds of every cell.
      routers: names from `ROUTERS`.
      experts: experts E per layer (k = 2).
      dim: the classifier's width d (4 attention heads of an even width: a multiple of 8).
      train_size, test_size: samples in the task's training and test split (at least 2 each).
      resume: require run_dir to exist (an interrupted experiment); finished cells are reused either way.

    ValueError names a bad router (listing the valid ones) or size, before anything is written.
    """
    routers = check_names("routers", routers, ROUTERS)
    for name, value in (("experts", experts), ("dim", dim), ("train_size", train_size), ("test_size", test_size)):
        check_int(name, value, minimum=2)
    if dim % 8:
        raise ValueError(f"dim must be a multiple of 4 (the attention heads) of an even quotient (the model's "
                         f"head width), i.e. a multiple of 8; got {dim}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    sizes = {"experts": experts, "dim": dim, "train_size": train_size, "test_size": test_size}
    # One device: the models are tiny, and batches need not divide a (possibly virtual) device count.
    devices = jax.devices()[:1]
    cells: dict[str, list[dict[str, Any]]] = {}
    curves: dict[str, tuple[list[int], list[float]]] = {}
    for router in routers:
        for seed in budget.seeds:
            cell = f"{router}_seed{seed}"
            config = cell_config(experiment, router, seed, **sizes)
            experiment.train_cell(cell, config, devices=devices, final_eval=False)
            cells.setdefault(router, []).append(evaluate_cell(experiment, cell, devices))
        curves[router] = mean_curve([experiment.metrics(f"{router}_seed{seed}", TRAINING_COLLAPSE)
                                      for seed in budget.seeds])
    rows = [_row(router, [cell["metrics"] for cell in cells[router]]) for router in routers]
    figures = {
        "expert_load": _load_figure(rows),
        "collapse_during_training": line_figure(curves, xlabel="step", ylabel="collapse (training batches, layer 0)",
                                                title="Collapse indicator during training"),
        "diversity": _diversity_figure(rows),
    }
    notes = [f"Task: setting II, 3 modalities, 50% missing, {train_size} training / {test_size} test samples; "
             f"classifier d = {dim}, E = {experts}, k = 2; no balancing loss except topk_softmax_lb (0.01).",
             "Test split, layer 0, no routing noise, mean over seeds; accuracy, f1 (macro), auc (one-vs-rest macro) "
             "with stage-2 imputation, *_no_impute without it.",
             "collapse = 1 - H(load)/log E (0 balanced, 1 one expert takes all); max_load_ratio = E max_e f_e; "
             "coselection = mean |phi| of two experts' selection indicators (lower = more predictable pairs "
             "avoided); coselection_floor = 1/(E - 1), its value under uniformly random k-of-E routing; "
             "coselection_matched = its value under load-blind routing at the router's own test load "
             "(coselection_reference): coselection below coselection_matched is diversity beyond the load."]
    extra = {"sizes": sizes, "curves": curves, "loads": {row["router"]: row["load"] for row in rows},
             "per_seed": {router: [cell["metrics"] for cell in cells[router]] for router in routers}}
    return experiment.write(rows, columns=COLUMNS, title="MoE routing: load balance and expert diversity",
                            notes=notes, figures=figures, extra=extra)


def cell_config(experiment: Experiment, router: str, seed: int, *, experts: int, dim: int, train_size: int,
                test_size: int) -> TrainConfig:
    """The TrainConfig of one cell: `router` (a `ROUTERS` variant, with its balancing weight) with E = `experts`
    in `classifier_config`."""
    name, balance = ROUTERS[router]
    moe = MoEConfig(num_experts=experts, top_k=TOP_K, router=name, load_balance_weight=balance, z_loss_weight=0.0)
    return classifier_config(experiment, seed, moe, dim=dim, train_size=train_size, test_size=test_size)


def classifier_config(experiment: Experiment, seed: int, moe: MoEConfig, *, dim: int, train_size: int,
                      test_size: int, task: dict[str, Any] | None = None, learning_rate: float | None = None,
                      objective_options: dict[str, Any] | None = None) -> TrainConfig:
    """The `confsmoe_multimodal` preset with the budget's steps, batch and tokens per modality, the MoE `moe`,
    d = `dim`, the task (its options updated by `task`) and the run seeded by `seed`, the dataset under the run
    directory, a final checkpoint for `load_run`; `learning_rate` and `objective_options` (of "multimodal_moe")
    replace the preset's."""
    base = confsmoe_multimodal.get_config()
    budget = experiment.budget
    tokens = budget.seq_len
    options = dict(base.data.task_options) | {"tokens": tokens, "train_examples": train_size,
                                              "eval_examples": test_size, "seed": seed} | (task or {})
    data = dataclasses.replace(base.data, data_dir=str(experiment.run_dir / "tfds"),
                               task_options=tuple(options.items()))
    model_options = dict(base.model.model_options) | {"tokens": tokens}
    model = dataclasses.replace(base.model, d_model=dim, moe=moe, model_options=tuple(model_options.items()))
    optim = base.optim if learning_rate is None else dataclasses.replace(base.optim, learning_rate=learning_rate)
    objective = dict(base.objective_options) | (objective_options or {})
    config = dataclasses.replace(base, model=model, data=data, optim=optim, log_every=max(1, budget.steps // 10),
                                 objective_options=tuple(objective.items()))
    config = experiment.cell_config(config, seed=seed, checkpoints=1)
    # Points per row: the M modalities' tokens (budget.seq_len counts one modality's).
    return dataclasses.replace(config, seq_len=len(dict(model_options)["feature_dims"]) * tokens)


# Evaluation arms: metric-name suffix -> (stage-1 fill kept, stage-2 imputation run).
ROUTING_ARMS = {"": (True, True), "_no_impute": (True, False)}


def evaluate_cell(experiment: Experiment, cell: str, devices: list,
                  arms: dict[str, tuple[bool, bool]] | None = None) -> dict[str, Any]:
    """The trained cell reopened (`load_run`) and evaluated on the whole test split, without routing noise,
    once per arm of `arms` (default `ROUTING_ARMS`: with stage-2 imputation and without; an arm without stage 1
    zeroes the missing modalities' stored fills, `zero_missing`): {"metrics": {accuracy, f1, auc, load, collapse,
    ... each with the arm's suffix}}.

    The result is kept in the cell's directory (evaluation.json) and read back when the cell is evaluated again
    with the same arms (a resumed experiment); retraining a cell (deleting its directory) deletes it too.
    """
    arms = ROUTING_ARMS if arms is None else arms
    path = experiment.cell_dir(cell) / EVALUATION
    key = {suffix: list(arm) for suffix, arm in arms.items()}
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored.get("arms", {suffix: list(arm) for suffix, arm in ROUTING_ARMS.items()}) == key:
            return stored
    config, model, _ = load_run(experiment.cell_dir(cell), devices=devices)
    rows = open_rows(config.data, config.data.eval_split, config.seq_len)
    batch = rows.batch(list(range(len(rows))), config.seq_len)

    @nnx.jit
    def classify(model: nnx.Module, batch: dict[str, jax.Array]) -> dict[str, Any]:
        inputs, present, _ = model.unpack(batch["points"], batch["features"], batch["weights"])
        outputs = {}
        for suffix, (fill, impute) in arms.items():
            arm_inputs = inputs if fill else zero_missing(inputs, present)
            outputs[suffix] = model.classifier(arm_inputs, present, impute=impute)
        return outputs

    metrics: dict[str, Any] = {}
    for suffix, (logits, auxes) in classify(model, batch).items():
        scores = classification_scores(np.asarray(jax.nn.softmax(logits, axis=-1), np.float64), batch["labels"])
        metrics.update({f"{name}{suffix}": value for name, value in scores.items()})
        diagnostics = jax.device_get(routing_diagnostics(auxes[0]))
        metrics[f"load{suffix}"] = [float(share) for share in diagnostics["load"]]
        for name in ("collapse", "max_load_ratio", "coselection", "router_entropy"):
            metrics[f"{name}{suffix}"] = float(diagnostics[name])
    result = {"metrics": metrics, "arms": key}
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def classification_scores(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy, macro F1 and one-vs-rest macro AUC of class probabilities [N, C] against labels [N].

    F1 averages over the classes that occur in `labels` or in the predictions (a class never predicted and
    never true is left out; one with no correct prediction scores 0). The AUC averages the binary AUC
    P(score of a positive > score of a negative) + P(tie) / 2 of every class that occurs in `labels` but not
    everywhere. Both equal scikit-learn's macro f1_score and "ovr" macro roc_auc_score when every class occurs.
    """
    labels = np.asarray(labels)
    predictions = probs.argmax(axis=-1)
    f1s, aucs = [], []
    for c in range(probs.shape[1]):
        true, predicted = labels == c, predictions == c
        if true.any() or predicted.any():
            f1s.append(2.0 * np.sum(true & predicted) / (np.sum(true) + np.sum(predicted)))
        if 0 < true.sum() < len(labels):
            positive, negative = probs[true, c][:, None], probs[~true, c][None, :]
            aucs.append(np.mean((positive > negative) + 0.5 * (positive == negative)))
    return {"accuracy": float(np.mean(predictions == labels)), "f1": float(np.mean(f1s)),
            "auc": float(np.mean(aucs)) if aucs else float("nan")}


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values))


def mean_curve(series: list[tuple[list[int], list[float]]]) -> tuple[list[int], list[float]]:
    """The mean over seeds of a metric logged at the same steps by every seed."""
    steps = series[0][0]
    return steps, [_mean([values[i] for _, values in series]) for i in range(len(steps))]


def matched_cooccurrence(load: Sequence[float], top_k: int = TOP_K) -> np.ndarray:
    """Co-occurrence shares C [E, E] (diagonal = usage) of load-blind k-of-E routing at `load` [E].

    Every token draws a k-subset S with probability P(S) ∝ Π_{i∈S} w_i (conditional Poisson sampling), the
    weights w fitted by `FIT_ITERATIONS` multiplicative updates w_i ← w_i q_i / P(i ∈ S) so that expert i is
    chosen with probability q_i = k · load_i (load: shares of assignments, summing to 1; q clipped to
    [0, 1 − 1e-6]). Then C_ii = P(i ∈ S) and C_ij = P(i, j ∈ S). At balanced load w is uniform and every pair
    equally likely. Enumerates the C(E, k) subsets (a few hundred at most for this experiment's E and k).
    """
    load = np.asarray(load, np.float64)
    experts = load.shape[0]
    target = np.clip(top_k * load / max(float(load.sum()), 1e-30), 0.0, 1.0 - 1e-6)
    members = np.stack([np.isin(np.arange(experts), subset).astype(np.float64)
                        for subset in itertools.combinations(range(experts), top_k)])  # [M, E]
    weights = np.where(target > 0, 1.0, 0.0)
    for _ in range(FIT_ITERATIONS):
        marginal = _subset_probabilities(members, weights) @ members
        weights = weights * np.where(target > 0, target / np.maximum(marginal, 1e-300), 0.0)
        weights /= weights.max()
    chances = _subset_probabilities(members, weights)
    return np.einsum("m,me,mf->ef", chances, members, members)


def _subset_probabilities(members: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """P(S) ∝ Π_{i∈S} w_i [M] of the subsets with indicators members [M, E]."""
    products = np.prod(np.where(members > 0, weights[None, :], 1.0), axis=1)
    return products / max(float(products.sum()), 1e-300)


def coselection_reference(load: Sequence[float], top_k: int = TOP_K) -> float:
    """The co-selection (mean |phi| over expert pairs, as `routing_diagnostics`) of load-blind k-of-E routing at
    `load` [E] (`matched_cooccurrence`): what a router with this load but no preference among pairs would
    show. Equals the floor 1/(E − 1) at balanced load (phi = −1/(E − 1) for every pair)."""
    experts = len(load)
    phi = np.asarray(phi_correlation(np.asarray(matched_cooccurrence(load, top_k), np.float32)), np.float64)
    return float(np.sum(np.abs(phi) * (1.0 - np.eye(experts))) / max(experts * (experts - 1), 1))


def _row(router: str, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"router": router, "balance_loss": ROUTERS[router][1]}
    for name in AVERAGED:
        row[name] = round(_mean([m[name] for m in metrics]), 4)
    row["coselection_matched"] = round(_mean([coselection_reference(m["load"]) for m in metrics]), 4)
    experts = len(metrics[0]["load"])
    row["coselection_floor"] = round(1.0 / max(experts - 1, 1), 4)
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
    coselection.bar(names, [row["coselection"] for row in rows], label="measured")
    coselection.scatter(names, [row["coselection_matched"] for row in rows], color="black", marker="_", s=200,
                        zorder=3, label="load-matched reference")
    coselection.axhline(rows[0]["coselection_floor"], color="black", linestyle="--", linewidth=0.8,
                        label="floor 1/(E-1)")
    coselection.set_ylabel("co-selection mean |phi|")
    coselection.legend(fontsize="small")
    for axes in (collapse, coselection):
        axes.tick_params(axis="x", labelrotation=45)
    figure.tight_layout()
    return figure
