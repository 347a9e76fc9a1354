"""Reproduction: fine-tuning an AdamW-pretrained model with Muon vs AdamW, full and with LoRA.

Paper: "Can Muon Fine-tune Adam-Pretrained Models?" (ICML 2026, arXiv 2605.10468). See docs/papers/muon_lora.md.

The claim tested: switching from AdamW (pretraining) to Muon (fine-tuning) disrupts pretrained knowledge more
than staying with AdamW, the disruption grows with the update's strength (Muon's orthogonalised updates have
a high stable rank), and LoRA, which constrains the update, shrinks the AdamW–Muon gap.

Design: one pretraining cell per seed (the zoo's tiny 2-layer Llama, `d_model` wide, on the Python byte corpus
`pystdlib`, AdamW, `PRETRAIN_FACTOR` x the budget's steps), then per seed, optimizer in {adamw, muon} and
LoRA rank in `ranks` (0 = full fine-tuning) one fine-tuning cell on MQAR (a synthetic recall task that
shares nothing with Python source) started from the pretrained cell (`TrainConfig.init_from`, LoRA via
`TrainConfig.lora_rank`, α = 2r, every linear layer). Per cell: the task's eval loss and accuracy; forgetting
= the pretraining eval loss after fine-tuning minus before (nats per byte, same eval batches); and the mean
stable rank ‖ΔW‖_F² / ‖ΔW‖_2² of the fine-tuning deltas of the linear kernels (per layer, LoRA merged).
One learning rate per optimizer (no sweep; see the doc page). With `ablation`, Muon full fine-tuning is also
run with each (ns_coeffs, ns_dtype) in NS_VARIANTS, and each variant's orthogonalisation error is measured on
a fixed ill-conditioned matrix (`muon_lora_parts.orthogonality_error`).

Example::

    from icml26zoo import repro
    results = repro.run("muon_lora", "runs/muon_lora", budget="quick")   # QUICK with QUICK_ARGS
    print(results.markdown)
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import statistics
from collections.abc import Sequence

import jax

from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.muon_lora_parts import (
    DEFAULT_NS,
    OPTIMIZERS,
    PRETRAIN_FACTOR,
    base_params,
    check_rank_fits,
    eval_run,
    finetune_config,
    finetune_data,
    mean_update_strength,
    orthogonality_error,
    pretrain_config,
    pretraining_loss,
)
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.validation import check_bool, check_int, check_positive

__all__ = ["D_MODEL", "FULL", "LEARNING_RATES", "NS_VARIANTS", "QUICK", "QUICK_ARGS", "RANKS", "SMOKE", "SMOKE_ARGS",
           "cell_name", "run"]

QUICK = Budget(steps=6, batch_size=8, seq_len=32, seeds=(0,))
FULL = Budget(steps=100, batch_size=16, seq_len=64, seeds=(0, 1, 2))
# 128 wide: the narrowest adapted layers (k_proj / v_proj, grouped-query attention) are 128 -> 64, so the
# spec's largest rank r = 64 adapts every linear layer.
D_MODEL = 128
# 0 = full fine-tuning.
RANKS = (0, 4, 16, 64)
# (ns_coeffs, ns_dtype) of the Muon full-fine-tuning ablation; the first is every other cell's setting.
NS_VARIANTS = (DEFAULT_NS, ("polar_express", "float32"), ("standard", "bfloat16"), ("polar_express", "bfloat16"))
# The notebook's QUICK run: the 64-wide model, full fine-tuning only, no ablation (three trainings in all),
# compiled with XLA's cheap pipeline.
QUICK_ARGS = {"ranks": (0,), "d_model": 64, "ablation": False, "fast_compile": True}
# SMOKE: the QUICK cells (pretraining, AdamW and Muon full fine-tuning) at width 16, 2 fine-tuning steps of
# 8 rows (a multiple of the devices) x 16 tokens.
SMOKE = Budget(steps=2, batch_size=8, seq_len=16, seeds=(0,))
SMOKE_ARGS = QUICK_ARGS | {"optimizers": ("muon",), "d_model": 16}
LEARNING_RATES = {"adamw": 1e-3, "muon": 1e-2}  # mid-grid values of the spec's AdamW / Muon grids, not tuned


def _check_ranks(ranks: Sequence[int]) -> tuple[int, ...]:
    ranks = tuple(ranks)
    if not ranks:
        raise ValueError("ranks must hold at least one rank (0 = full fine-tuning), got none")
    for rank in ranks:
        check_int("ranks[i] (0 = full fine-tuning)", rank, minimum=0)
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks must not repeat a rank, got {list(ranks)}")
    return ranks


def _check_learning_rates(learning_rates: dict[str, float], optimizers: tuple[str, ...]) -> dict[str, float]:
    """{optimizer: rate} for `optimizers`, each rate (the option `<optimizer>_lr`) a finite number > 0."""
    return {name: check_positive(f"{name}_lr", learning_rates[name], finite=True) for name in optimizers}


def cell_name(optimizer: str, rank: int, seed: int, ns: tuple[str, str] = DEFAULT_NS) -> str:
    variant = "" if tuple(ns) == DEFAULT_NS else f"_{ns[0]}_{ns[1]}"
    return f"{optimizer}_{'full' if rank == 0 else f'r{rank}'}{variant}_s{seed}"


@register_experiment("muon_lora", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/muon_lora.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, optimizers: Sequence[str] = OPTIMIZERS,
        ranks: Sequence[int] = RANKS, adamw_lr: float = LEARNING_RATES["adamw"],
        muon_lr: float = LEARNING_RATES["muon"], d_model: int = D_MODEL, ablation: bool = True,
        fast_compile: bool = False, resume: bool = False) -> Results:
    """Pretrains per seed, fine-tunes every (optimizer, rank) cell and writes the table and figures.

    Args:
      run_dir: the experiment's directory (cells, data, results).
      budget: steps per fine-tuning cell (pretraining runs PRETRAIN_FACTOR x as many), rows, tokens, seeds.
      optimizers: fine-tuning optimizers, a subset of ("adamw", "muon").
      ranks: LoRA ranks, 0 = full fine-tuning; each at most the narrowest adapted layer's width (d_model / 2).
      adamw_lr, muon_lr: each optimizer's peak fine-tuning learning rate (defaults LEARNING_RATES; muon_lr also
        serves the ablation).
      d_model: the model's width (a multiple of 8; K/V projections are d_model -> d_model / 2).
      ablation: also fine-tune fully with Muon under each (ns_coeffs, ns_dtype) of NS_VARIANTS (at muon_lr), and
        measure each variant's orthogonality error.
      fast_compile: compile with XLA's cheap pipeline (jax_disable_most_optimizations) for the whole run:
        faster compiles, slower steps, for tiny CPU runs where compiling dominates (restored afterwards).
      resume: require run_dir to exist (finished cells and their measures are reused).
    Raises:
      ValueError: an unknown optimizer, a bad rank, width or learning rate (names the argument), before
        anything is written; FileNotFoundError: resume=True without run_dir.
    """
    optimizers = check_names("optimizers", optimizers, OPTIMIZERS)
    ranks = _check_ranks(ranks)
    for name, flag in (("ablation", ablation), ("fast_compile", fast_compile)):
        check_bool(name, flag)
    needed = (*optimizers, "muon") if ablation and "muon" not in optimizers else optimizers
    rates = _check_learning_rates({"adamw": adamw_lr, "muon": muon_lr}, needed)
    data_dir = pathlib.Path(run_dir) / "data"
    base = pretrain_config(data_dir, d_model)
    check_rank_fits(base, ranks)
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", fast_compile or previous)
    try:
        return _run(run_dir, budget, optimizers, ranks, rates, base, ablation, resume)
    finally:
        jax.config.update("jax_disable_most_optimizations", previous)


def _run(run_dir, budget: Budget, optimizers: tuple[str, ...], ranks: tuple[int, ...], rates: dict[str, float],
         base, ablation: bool, resume: bool) -> Results:
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    data_dir = experiment.run_dir / "data"
    d_model = base.model.d_model
    modes = [(optimizer, rank, DEFAULT_NS) for optimizer in optimizers for rank in ranks]
    if ablation:
        modes += [("muon", 0, ns) for ns in NS_VARIANTS if ("muon", 0, ns) not in modes]
    rows = []
    for seed in budget.seeds:
        rows.extend(_seed_rows(experiment, base, data_dir, seed, modes, rates))
    variants = list(dict.fromkeys(ns for optimizer, _, ns in modes if optimizer == "muon"))
    measured = stored(experiment.run_dir / "cells" / "orthogonality.json",
                      {"variants": ["/".join(v) for v in variants]},
                      lambda: [orthogonality_error(ns) for ns in variants])
    errors = dict(zip(variants, measured, strict=True))
    summary = _summary_rows(rows, modes, errors)
    columns = ["optimizer", "finetune", "ns", "task_loss", "task_accuracy", "forgetting", "stable_rank", "delta_fro",
               "ns_orth_error"]
    notes = [
        f"Pretraining: tiny Llama (2 layers, d_model {d_model}) with AdamW on pystdlib bytes, "
        f"{PRETRAIN_FACTOR * budget.steps} steps; fine-tuning on MQAR (16 keys/values, 4 pairs) for {budget.steps} "
        f"steps from it; lr {rates}, no sweep.",
        "task_loss / task_accuracy: MQAR eval after fine-tuning. forgetting: pretraining eval loss (nats/byte) "
        "after fine-tuning minus before. stable_rank: mean ||dW||_F^2/||dW||_2^2 over the linear kernels "
        "(per layer, LoRA merged); delta_fro: mean ||dW||_F. Mean ± spread over seeds.",
        "ns: Muon's Newton-Schulz (ns_coeffs/ns_dtype). ns_orth_error: max |sigma_i - 1| of the zoo Muon's "
        "orthogonalised first update of a fixed 384 x 128 matrix with singular values log-spaced over [1e-3, 1].",
    ]
    figures = _figures(rows, optimizers, ranks)
    if ablation:
        figures["ns_ablation"] = _ablation_figure(rows, NS_VARIANTS)
    return experiment.write(summary, columns=columns, title="Muon vs AdamW fine-tuning of an AdamW-pretrained model",
                            notes=notes, figures=figures,
                            extra={"cells": rows, "d_model": d_model,
                                   "orthogonality": [{"ns": "/".join(ns), **e} for ns, e in errors.items()]})


def _seed_rows(experiment: Experiment, base, data_dir, seed: int, modes, rates) -> list[dict]:
    """The fine-tuning cells of one seed, each measured against its pretrained start. A cell's measures are kept
    in its directory (measures.json), so a resumed run reuses them without reopening any model."""
    pre_cell = f"pretrain_s{seed}"
    pre_config = dataclasses.replace(experiment.cell_config(base, seed=seed),
                                     num_steps=PRETRAIN_FACTOR * experiment.budget.steps)
    experiment.train_cell(pre_cell, pre_config)

    @functools.cache
    def pretrained() -> tuple:
        """(evaluator, the pretrained parameters, their pretraining eval loss), built on first use."""
        evaluator = eval_run(pre_config)
        _, pre_model, _ = load_run(experiment.cell_dir(pre_cell), devices=jax.devices()[:1])
        before = base_params(pre_model)
        return evaluator, before, pretraining_loss(evaluator, before)

    def measure(name: str, optimizer: str, rank: int, ns: tuple[str, str], summary: dict) -> dict:
        evaluator, before, loss_before = pretrained()
        _, model, _ = load_run(experiment.cell_dir(name), devices=jax.devices()[:1])
        after = base_params(model)
        strength = mean_update_strength(before, after)
        return {"cell": name, "optimizer": optimizer, "rank": rank, "ns": "/".join(ns), "seed": seed,
                "task_loss": summary["eval/loss"], "task_accuracy": summary.get("eval/accuracy"),
                "pretrain_loss_before": loss_before,
                "forgetting": pretraining_loss(evaluator, after) - loss_before,
                "stable_rank": strength["stable_rank"], "delta_fro": strength["frobenius_norm"],
                "spectral_entropy": strength["spectral_entropy"]}

    rows = []
    for optimizer, rank, ns in modes:
        name = cell_name(optimizer, rank, seed, ns)
        config = experiment.cell_config(
            finetune_config(pre_config, experiment.cell_dir(pre_cell), finetune_data(data_dir),
                            optimizer=optimizer, rank=rank, learning_rate=rates[optimizer], ns=ns), seed=seed)
        config = dataclasses.replace(config, optim=dataclasses.replace(
            config.optim, warmup_steps=max(1, config.num_steps // 10)))
        summary = experiment.train_cell(name, config)
        rows.append(stored(experiment.cell_dir(name) / "measures.json", {"pretrained": pre_cell},
                           lambda name=name, optimizer=optimizer, rank=rank, ns=ns, summary=summary:
                           measure(name, optimizer, rank, ns, summary)))
    return rows


def _mean_spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{statistics.mean(values):.4g} ± {statistics.stdev(values):.2g}"


def _summary_rows(rows: list[dict], modes, errors: dict) -> list[dict]:
    out = []
    for optimizer, rank, ns in modes:
        cells = [r for r in rows if r["optimizer"] == optimizer and r["rank"] == rank and r["ns"] == "/".join(ns)]
        entry = {"optimizer": optimizer, "finetune": "full" if rank == 0 else f"LoRA r={rank}",
                 "ns": "/".join(ns) if optimizer == "muon" else None,
                 "ns_orth_error": errors[ns]["orth_error"] if optimizer == "muon" else None}
        for key in ("task_loss", "task_accuracy", "forgetting", "stable_rank", "delta_fro"):
            entry[key] = _mean_spread([float(c[key]) for c in cells if c[key] is not None])
        out.append(entry)
    return out


def _figures(rows: list[dict], optimizers, ranks) -> dict:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 3.6), layout="constrained")
    labels = ["full" if r == 0 else f"r{r}" for r in ranks]
    for index, (key, title) in enumerate((("forgetting", "forgetting (nats/byte)"), ("task_loss", "MQAR eval loss"),
                                          ("stable_rank", "mean stable rank of dW"))):
        axes = figure.add_subplot(1, 3, index + 1)
        width = 0.8 / len(optimizers)
        for k, optimizer in enumerate(optimizers):
            means = [statistics.mean(float(r[key]) for r in rows if r["optimizer"] == optimizer and r["rank"] == rank
                                     and r["ns"] == "/".join(DEFAULT_NS)) for rank in ranks]
            axes.bar([i + k * width for i in range(len(ranks))], means, width, label=optimizer)
        axes.set_xticks([i + width * (len(optimizers) - 1) / 2 for i in range(len(ranks))], labels)
        axes.set_title(title)
        axes.axhline(0.0, color="k", linewidth=0.5)
    figure.axes[0].legend()
    return {"finetune_bars": figure}


def _ablation_figure(rows: list[dict], variants):
    """Muon full fine-tuning per (ns_coeffs, ns_dtype): forgetting, task loss and stable rank, one dot per seed."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 3.4), layout="constrained")
    labels = ["/".join(ns).replace("polar_express", "PE").replace("standard", "std") for ns in variants]
    for index, (key, title) in enumerate((("forgetting", "forgetting (nats/byte)"), ("task_loss", "MQAR eval loss"),
                                          ("stable_rank", "mean stable rank of dW"))):
        axes = figure.add_subplot(1, 3, index + 1)
        for position, ns in enumerate(variants):
            values = [float(r[key]) for r in rows if r["optimizer"] == "muon" and r["rank"] == 0
                      and r["ns"] == "/".join(ns)]
            axes.bar(position, statistics.mean(values), 0.6, color="C1")
            axes.plot([position] * len(values), values, "k.")
        axes.set_xticks(range(len(variants)), labels, fontsize=8)
        axes.set_title(f"Muon full FT: {title}", fontsize=9)
    return figure
