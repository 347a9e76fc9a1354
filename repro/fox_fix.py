"""Reproduction: softmax attention vs FoX vs FiX at matched parameters, and FoX's length extrapolation.

Papers: Lin et al., "Forgetting Transformer: Softmax Attention with a Forget Gate" (ICLR 2025, arXiv
2503.02130); "FiX: Introducing Fine-grained Forget Gate into Softmax Attention" (ICML 2026; the zoo's FiX is
a reconstruction from its abstract). See docs/papers/fox_fix.md.

Every variant of `fox_fix_parts.VARIANTS` (softmax+RoPE, FoX, FoX Pro, FiX, FiX+RoPE) is trained with the
same tiny shape, recipe and budget on the byte corpus (`pystdlib`, final eval bits/byte) and on MQAR (final
accuracy), with MLP widths chosen so that parameter counts agree within 3% (`matched_mlp_dims`). Each byte
cell is then reopened (`load_run`) and evaluated at the training length T and at `extrapolation` multiples
of it (FoX's claim: its loss keeps falling past T while RoPE attention's rises).

Example::

    from icml26zoo.repro import fox_fix
    results = fox_fix.run("runs/fox_fix", budget=fox_fix.QUICK)
    print(results.markdown)
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Sequence

import jax
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.repro.common import Budget, Experiment, Results, check_names, spread
from icml26zoo.repro.fox_fix_parts import (
    VARIANTS,
    length_losses,
    matched_mlp_dims,
    variant_model,
)
from icml26zoo.repro.lengths import LengthLoss, binned
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.presets import tiny_byte_lm, tiny_mqar
from icml26zoo.validation import check_int

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "TASKS", "VARIANTS", "run"]

QUICK = Budget(steps=16, batch_size=4, seq_len=32, seeds=(0,))
FULL = Budget(steps=200, batch_size=8, seq_len=128, seeds=(0, 1))
# What the QUICK run (the notebook, `--quick`) runs: a cell costs ~15 CPU-seconds of compilation alone
# (training, reopening, one eval per length), so the quick run is one FoX cell on the byte corpus, evaluated
# at T and 2T: the whole pipeline, not a comparison.
QUICK_ARGS = {"variants": ("fox",), "tasks": ("pystdlib",), "extrapolation": (2,), "eval_rows": 1}
# Every code path at the smallest size: one FoX cell of two steps, reopened and evaluated at T and 2T.
SMOKE = Budget(steps=2, batch_size=2, seq_len=16, seeds=(0,))
SMOKE_ARGS = QUICK_ARGS | {"d_model": 16}
# A cell of at most this many steps saves only its final checkpoint (an interruption retrains it, cheaply);
# longer ones save two, so an interrupted one resumes from the middle.
SHORT_CELL = 50
TASKS = ("pystdlib", "mqar")
METRIC = {"pystdlib": "eval/bits_per_byte", "mqar": "eval/accuracy"}


@register_experiment("fox_fix", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/fox_fix.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, variants: Sequence[str] = tuple(VARIANTS),
        tasks: Sequence[str] = TASKS, d_model: int = 64, extrapolation: Sequence[int] = (2, 4),
        eval_rows: int = 8, mqar_pairs: int = 8, resume: bool = False) -> Results:
    """Trains every (task, variant, seed) cell, evaluates the byte cells at longer lengths, writes the results.

    Args:
      run_dir: the experiment's directory (cells, datasets, results.md/json, loss_curves.png,
        extrapolation.png).
      budget: steps, batch size, training length T and seeds of every cell.
      variants: names from `VARIANTS` to compare.
      tasks: "pystdlib" (bits/byte, and the extrapolation) and/or "mqar" (accuracy).
      d_model: residual width of the 2-layer, 4-head (2 key/value heads) model; a multiple of 8.
      extrapolation: factors m >= 2 (increasing) at which the byte cells are also evaluated, at m·T tokens
        per row; () skips the extrapolation.
      eval_rows: rows of max(m)·T tokens in each extrapolation eval (the same tokens at every length).
      mqar_pairs: key-value pairs per MQAR example (4·pairs − 1 tokens; at most T).
      resume: require run_dir to exist (an interrupted experiment); finished cells are reused either way.
    """
    variants = check_names("variants", variants, VARIANTS)
    tasks = check_names("tasks", tasks, TASKS)
    check_int("d_model", d_model, minimum=8)
    if d_model % 8:
        raise ValueError(f"d_model must be a multiple of 8 (4 heads of an even width), got {d_model}")
    factors = _check_factors(extrapolation)
    check_int("eval_rows", eval_rows)
    check_int("mqar_pairs", mqar_pairs)
    if "mqar" in tasks and 4 * mqar_pairs - 1 > budget.seq_len:
        raise ValueError(f"mqar_pairs={mqar_pairs} needs rows of 4·pairs − 1 = {4 * mqar_pairs - 1} tokens, "
                         f"more than budget.seq_len={budget.seq_len}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    lengths = tuple(budget.seq_len * m for m in (1, *factors))
    configs = {task: _task_config(experiment, task, d_model, lengths[-1], mqar_pairs) for task in tasks}
    # One device: the models are tiny, and batches need not divide a (possibly virtual) device count.
    devices = jax.devices()[:1]
    matched = matched_mlp_dims(next(iter(configs.values())).model, variants)
    finals: dict[tuple[str, str], list[float]] = {}
    curves: dict[tuple[str, str], list[tuple[list[int], list[float]]]] = {}
    extrapolated: dict[str, list[dict[int, LengthLoss]]] = {}
    for task, base in configs.items():
        for variant in variants:
            for seed in budget.seeds:
                cell = f"{task}_{variant}_seed{seed}"
                model = variant_model(base.model, variant, matched[variant][0])
                config = experiment.cell_config(dataclasses.replace(base, model=model), seed=seed,
                                                checkpoints=1 if budget.steps <= SHORT_CELL else 2)
                summary = experiment.train_cell(cell, config, devices=devices)
                finals.setdefault((task, variant), []).append(float(summary[METRIC[task]]))
                curves.setdefault((task, variant), []).append(experiment.metrics(cell, "train/loss"))
                if task == "pystdlib" and factors:
                    _, trained, _ = load_run(experiment.cell_dir(cell), devices=devices)
                    extrapolated.setdefault(variant, []).append(
                        length_losses(trained, config, lengths, rows=eval_rows))
    rows = [_row(variant, matched[variant], finals, extrapolated, tasks, lengths) for variant in variants]
    figures = {"loss_curves": _loss_figure(curves, tasks, variants)}
    if extrapolated:
        figures["extrapolation"] = _extrapolation_figure(extrapolated, lengths)
    return experiment.write(rows, columns=_columns(tasks, factors), title="FoX and FiX vs softmax attention",
                            notes=_notes(budget, d_model, tasks, factors, eval_rows, mqar_pairs), figures=figures,
                            extra={"lengths": list(lengths), "variants": {v: list(VARIANTS[v]) for v in variants},
                                   "per_seed": {f"{t}/{v}": s for (t, v), s in finals.items()}})


def _check_factors(extrapolation: Sequence[int]) -> tuple[int, ...]:
    factors = tuple(extrapolation)
    for factor in factors:
        check_int("extrapolation[i]", factor, minimum=2)
    if list(factors) != sorted(set(factors)):
        raise ValueError(f"extrapolation must be strictly increasing factors >= 2, got {list(factors)}")
    return factors


def _task_config(experiment: Experiment, task: str, d_model: int, max_len: int, mqar_pairs: int) -> TrainConfig:
    """The shared recipe of one task (the tiny presets' schedule and learning rate), width `d_model`,
    max_seq_len covering the longest eval length, datasets under the run directory, one final eval."""
    config = tiny_byte_lm("attention") if task == "pystdlib" else tiny_mqar("attention")
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "tfds"))
    if task == "mqar":
        data = dataclasses.replace(data, mqar_num_pairs=mqar_pairs)
    model = dataclasses.replace(config.model, d_model=d_model, max_seq_len=max_len)
    budget = experiment.budget
    warmup = max(1, budget.steps // 10)
    return dataclasses.replace(config, model=model, data=data, log_every=max(1, budget.steps // 25),
                               eval_every=0, eval_batches=4,
                               optim=dataclasses.replace(config.optim, warmup_steps=warmup))


def _mean(values: list[float]) -> float:
    return statistics.fmean(values)



def _row(variant: str, matched: tuple[int, int], finals: dict, extrapolated: dict, tasks: Sequence[str],
         lengths: Sequence[int]) -> dict:
    mixer, options = VARIANTS[variant]
    row = {"variant": variant, "mixer": mixer, "options": ", ".join(f"{k}={v}" for k, v in options) or "-",
           "mlp_dim": matched[0], "params": matched[1]}
    if "pystdlib" in tasks:
        values = finals[("pystdlib", variant)]
        row |= {"bits_per_byte": _mean(values), "bpb_spread": spread(values)}
    if "mqar" in tasks:
        values = finals[("mqar", variant)]
        row |= {"mqar_accuracy": _mean(values), "acc_spread": spread(values)}
    for length in lengths if variant in extrapolated else ():
        row[f"bpb@{length // lengths[0]}T"] = _mean([r[length].bits for r in extrapolated[variant]])
    return row


def _columns(tasks: Sequence[str], factors: Sequence[int]) -> list[str]:
    columns = ["variant", "mixer", "options", "mlp_dim", "params"]
    if "pystdlib" in tasks:
        columns += ["bits_per_byte", "bpb_spread"]
    if "mqar" in tasks:
        columns += ["mqar_accuracy", "acc_spread"]
    if "pystdlib" in tasks and factors:
        columns += ["bpb@1T"] + [f"bpb@{m}T" for m in factors]
    return columns


def _notes(budget: Budget, d_model: int, tasks: Sequence[str], factors: Sequence[int], eval_rows: int,
           mqar_pairs: int) -> list[str]:
    notes = [f"Model: 2 layers, d_model {d_model}, 4 query heads / 2 key-value heads; MLP widths matched so "
             "parameter counts agree within 3% (softmax and FoX: ratio 4, FoX Pro: ratio 3.5 as in FoX's "
             "Pro block, FiX: sized to match). Values are means over seeds; *_spread = max - min over seeds."]
    if "pystdlib" in tasks:
        notes.append("bits_per_byte: the trainer's final eval on the pystdlib validation split (4 batches).")
        if factors:
            notes.append(f"bpb@mT: bits/byte of the trained model on rows of m·T tokens, T = {budget.seq_len}, "
                         f"over the same {eval_rows * max(factors) * budget.seq_len:,} validation tokens at "
                         "every length.")
    if "mqar" in tasks:
        notes.append(f"mqar_accuracy: answer accuracy on MQAR (16 keys, 16 values, {mqar_pairs} pairs).")
    return notes


def _loss_figure(curves: dict, tasks: Sequence[str], variants: Sequence[str]) -> Figure:
    """Training loss vs step per variant (mean over seeds), one axes per task."""
    figure = Figure(figsize=(6.0 * len(tasks), 4.0), layout="constrained")
    for index, task in enumerate(tasks):
        axes = figure.add_subplot(1, len(tasks), index + 1)
        for variant in variants:
            runs = curves[(task, variant)]
            length = min(len(steps) for steps, _ in runs)
            if length:
                mean = np.mean([values[:length] for _, values in runs], axis=0)
                axes.plot(runs[0][0][:length], mean, label=variant)
        axes.set(xlabel="step", ylabel="train loss (nats/token)", title=f"{task}: training loss")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    return figure


def _extrapolation_figure(extrapolated: dict[str, list[dict[int, LengthLoss]]], lengths: Sequence[int]) -> Figure:
    """Left: bits/byte vs eval length; right: bits/byte vs position in the longest rows (dashed line at T)."""
    figure = Figure(figsize=(12.0, 4.0), layout="constrained")
    by_length, by_position = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    longest = lengths[-1]
    for variant, runs in extrapolated.items():
        by_length.plot(lengths, [_mean([r[n].bits for r in runs]) for n in lengths], marker="o", label=variant)
        bits = np.nanmean([r[longest].position_bits for r in runs], axis=0)
        tokens = np.sum([r[longest].position_tokens for r in runs], axis=0)
        centres, means = binned(bits, tokens, bins=min(32, longest))
        by_position.plot(centres, means, label=variant)
    by_length.set_xscale("log", base=2)
    by_length.set(xlabel="eval length (tokens per row)", ylabel="bits/byte",
                  title=f"Length extrapolation (trained at T = {lengths[0]})")
    by_position.axvline(lengths[0], linestyle="--", color="gray", linewidth=1, label="T")
    by_position.set(xlabel="position in segment", ylabel="bits/byte", title=f"Loss by position, rows of {longest}")
    for axes in (by_length, by_position):
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    return figure

