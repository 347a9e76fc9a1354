"""EDEN (ICML 2026): Llama, Mamba and Hyena scaled on nucleotides, with power-law fits and motif completion.

"Scaling Laws and Architectural Frontiers in Metagenomic Foundation Models" compares Llama-style, Mamba and
Hyena backbones for nucleotide language modelling and reports that Llama scales best at large capacity.
This reproduction trains the parameter-matched backbones of `train.presets.eden_lm` (sizes `EDEN_SHAPES`)
on the synthetic `nucleotide` dataset, every (arch, size, seed) cell with the same budget of tokens, and
reports per architecture:

* the final eval bits/base and its gap to the Bayes-optimal bits of the same eval rows (the generator is a
  known HMM, so that floor is exact);
* a power law loss − E = A · N^(−alpha) in non-embedding parameters N fitted over all cells, alpha with its
  standard error (`eden_parts.power_law_fit`);
* motif completion: greedy continuation of validation sequences cut inside a planted motif, scored against
  the motif (`eden_parts`), with the generator's own greedy completion as the ceiling.

Hyena's filter FFN trains in its own optimizer group (lr 1e-3, no weight decay: `presets.HYENA_FILTER_GROUP`).

    results = run("runs/eden", budget=FULL)             # 3 archs x 3 sizes x 3 seeds
    print(results.markdown)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import jax
import numpy as np

from icml26zoo.models import count_params
from icml26zoo.repro import eden_parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train import data as data_lib
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data import nucleotide, sources
from icml26zoo.train.presets import EDEN_ARCHS, EDEN_SHAPES, eden_lm
from icml26zoo.validation import check_int

__all__ = ["ARCHS", "FULL", "QUICK", "QUICK_ARGS", "SIZES", "SMOKE", "SMOKE_ARGS", "run"]

ARCHS = tuple(EDEN_ARCHS)
SIZES = ("tiny", "small", "medium")
# Every cell: `steps` updates of `batch_size` whole sequences of seq_len + 1 bases.
FULL = Budget(steps=150, batch_size=8, seq_len=64, seeds=(0, 1, 2))
QUICK = Budget(steps=30, batch_size=8, seq_len=64, seeds=(0,))
# The notebook's and `--quick`'s grid: one architecture at two sizes fits in its CPU budget (each
# architecture and size costs a fresh XLA compile of ~5-15 CPU-s).
QUICK_ARGS: dict[str, tuple[str, ...]] = {"archs": ("llama",), "sizes": ("tiny", "small")}
# SMOKE: one Llama cell at the tiny size, 2 steps of 8 rows (a multiple of the devices) of 32 bases (no fit:
# one size), scored and plotted.
SMOKE = Budget(steps=2, batch_size=8, seq_len=32, seeds=(0,))
SMOKE_ARGS: dict[str, tuple[str, ...]] = {"archs": ("llama",), "sizes": ("tiny",)}
MAMBA_IMPLEMENTATIONS = (None, "reference", "xla", "pallas")
COLUMNS = ("arch", "size", "params", "non_embedding", "bits_per_base", "bits_sd", "gap_to_optimum", "motif_acc",
           "motif_sd", "paired_acc")
FIT_COLUMNS = ("alpha", "alpha_se", "raw_alpha", "raw_alpha_se", "points")


@register_experiment("eden", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/eden.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, archs: tuple[str, ...] = ARCHS,
        sizes: tuple[str, ...] = SIZES, motif_prefix: int = 4, mamba_implementation: str | None = None,
        resume: bool = False) -> Results:
    """Trains every (arch, size, seed) cell, scores it, fits the power laws and writes the results.

    Args:
      run_dir: the run directory (cells, the nucleotide data, results.md/json, scaling.png, motif.png).
      budget: steps, rows per step, tokens per row and seeds of every cell.
      archs: backbones, from `ARCHS` ("llama", "mamba", "hyena").
      sizes: from `train.presets.EDEN_SHAPES` ("tiny", "small", "medium"); a fit needs two or more.
      motif_prefix: bases of a planted motif shown before the model completes the rest (1 .. L − 1, L = 10).
      mamba_implementation: the selective scan's implementation; None = "reference" (the sequential scan,
        the fastest to compile and run at these sizes) on CPU and the op's own default elsewhere.
      resume: continue the experiment in an existing run_dir (FileNotFoundError if there is none).
    """
    archs, sizes = check_names("archs", archs, ARCHS), check_names("sizes", sizes, EDEN_SHAPES)
    motif_length = nucleotide.spec(nucleotide.make_config()).motif_length
    check_int("motif_prefix", motif_prefix)
    if not 1 <= motif_prefix < motif_length:
        raise ValueError(f"motif_prefix must lie in [1, {motif_length - 1}] (a motif has {motif_length} bases), "
                         f"got {motif_prefix}")
    if mamba_implementation not in MAMBA_IMPLEMENTATIONS:
        raise ValueError(f"mamba_implementation must be one of {list(MAMBA_IMPLEMENTATIONS)}, "
                         f"got {mamba_implementation!r}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    configs = {(arch, size, seed): cell_config(experiment, arch, size, seed, mamba_implementation)
               for arch in archs for size in sizes for seed in budget.seeds}
    reference = configs[next(iter(configs))]
    data_lib.prepare(reference.data)
    generator = nucleotide.spec(sources.nucleotide_config(reference.data))
    split = nucleotide.generate_split(sources.nucleotide_config(reference.data), "validation")
    prompts = eden_parts.motif_prompts(split, generator, seq_len=budget.seq_len, prefix=motif_prefix)
    ceiling = eden_parts.completion_accuracy(
        eden_parts.greedy_completion(eden_parts.generator_predict(generator), prompts), prompts)
    optimum = bayes_bits(reference)
    cells = {key: measure_cell(experiment, key, config, prompts) for key, config in configs.items()}
    rows = summary_rows(cells, archs, sizes, optimum)
    fits = {arch: fit_arch([cells[key] for key in cells if key[0] == arch], optimum) for arch in archs}
    notes = result_notes(fits, optimum, ceiling, prompts, motif_prefix)
    figures = {"scaling": eden_parts.scaling_figure(
        {arch: ([c["non_embedding"] for k, c in cells.items() if k[0] == arch],
                [c["bits_per_base"] - optimum for k, c in cells.items() if k[0] == arch]) for arch in archs},
        fits, title=f"EDEN backbones on nucleotides ({budget.tokens_per_cell:,} tokens per cell)"),
        "motif": line_figure(
            {arch: ([r["non_embedding"] for r in rows if r["arch"] == arch],
                    [r["motif_acc"] for r in rows if r["arch"] == arch]) for arch in archs},
            xlabel="non-embedding parameters", ylabel="motif completion accuracy (per base)", logx=True,
            title=f"Greedy motif completion after {motif_prefix} bases",
            hlines={"generator's own greedy completion": ceiling["motif_acc"], "chance": 0.25})}
    extra = {"fits": fits, "bayes_bits_per_base": optimum, "generator_completion": ceiling,
             "motif_prompts": int(prompts.cut.size), "paired_prompts": int(prompts.paired.sum()),
             "cells": {"_".join(map(str, key)): value for key, value in cells.items()}}
    return experiment.write(rows, columns=COLUMNS, title="EDEN: Llama vs Mamba vs Hyena scaling on nucleotides",
                            notes=notes, figures=figures, extra=extra)


def cell_config(experiment: Experiment, arch: str, size: str, seed: int,
                mamba_implementation: str | None) -> TrainConfig:
    """The `eden_lm` preset of one cell with the experiment's budget, its data under run_dir and `seed`."""
    budget = experiment.budget
    config = eden_lm(arch, size, num_steps=budget.steps, batch_size=budget.batch_size, seq_len=budget.seq_len)
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "data"))
    model = config.model
    implementation = mamba_implementation or ("reference" if jax.default_backend() == "cpu" else None)
    if arch == "mamba" and implementation is not None:
        model = dataclasses.replace(model, mixer_options=model.mixer_options + (("implementation", implementation),))
    return experiment.cell_config(dataclasses.replace(config, data=data, model=model), seed=seed, checkpoints=1)


def cell_name(key: tuple[str, str, int]) -> str:
    arch, size, seed = key
    return f"{arch}_{size}_seed{seed}"


def measure_cell(experiment: Experiment, key: tuple[str, str, int], config: TrainConfig,
                 prompts: eden_parts.MotifPrompts) -> dict[str, Any]:
    """Trains (or reuses) one cell and returns its parameter counts, eval bits/base and motif scores.
    The motif scores are stored next to the cell (motif.json) so a rerun does not decode again."""
    name = cell_name(key)
    summary = experiment.train_cell(name, config)
    stored = experiment.cell_dir(name) / "motif.json"
    if stored.is_file():
        return json.loads(stored.read_text())
    _, model, _ = load_run(experiment.cell_dir(name), devices=jax.devices()[:1])
    total = count_params(model)
    embedding = int(np.size(model.embed.embedding[...]))
    scores = eden_parts.completion_accuracy(
        eden_parts.greedy_completion(eden_parts.model_predict(model), prompts), prompts)
    cell = {"params": total, "non_embedding": total - embedding,
            "bits_per_base": summary["eval/loss"] / math.log(2), **scores}
    stored.write_text(json.dumps(cell, indent=2) + "\n")
    return cell


def bayes_bits(config: TrainConfig) -> float:
    """The generator's Bayes-optimal bits/base on exactly the eval rows the models are scored on."""
    iterator = data_lib.make_eval_iterator(config.data, batch_size=config.batch_size, seq_len=config.seq_len,
                                           max_batches=config.eval_batches, process_index=0, process_count=1)
    pieces = []
    for batch in iterator:
        for inputs, targets, segments in zip(batch["inputs"], batch["targets"], batch["segment_ids"], strict=True):
            for segment in np.unique(segments[segments > 0]):
                mask = segments == segment
                pieces.append(nucleotide.to_codes(np.concatenate([inputs[mask], targets[mask][-1:]])))
    total, count = nucleotide.optimal_bits(sources.nucleotide_config(config.data).seed, pieces)
    return total / count


def summary_rows(cells: dict[tuple[str, str, int], dict], archs: tuple[str, ...], sizes: tuple[str, ...],
                 optimum: float) -> list[dict[str, Any]]:
    """One row per (arch, size): means (and standard deviations) over the seeds."""
    rows = []
    for arch in archs:
        for size in sizes:
            group = [cell for (a, s, _), cell in cells.items() if (a, s) == (arch, size)]
            bits = np.array([cell["bits_per_base"] for cell in group])
            motif = np.array([cell["motif_acc"] for cell in group])
            paired = [cell["paired_acc"] for cell in group if cell["paired_acc"] is not None]
            rows.append({"arch": arch, "size": size, "params": group[0]["params"],
                         "non_embedding": group[0]["non_embedding"], "bits_per_base": float(bits.mean()),
                         "bits_sd": _sd(bits), "gap_to_optimum": float(bits.mean() - optimum),
                         "motif_acc": float(motif.mean()), "motif_sd": _sd(motif),
                         "paired_acc": float(np.mean(paired)) if paired else None})
    return rows


def _sd(values: np.ndarray) -> float | None:
    return float(values.std(ddof=1)) if values.size > 1 else None


def fit_arch(cells: list[dict], optimum: float) -> dict[str, Any]:
    """The power laws of one arch over its cells: reducible loss (floor = Bayes optimum) and raw loss."""
    params = [cell["non_embedding"] for cell in cells]
    bits = [cell["bits_per_base"] for cell in cells]
    reducible, raw = eden_parts.power_law_fit(params, bits, optimum), eden_parts.power_law_fit(params, bits)
    return {"alpha": reducible["alpha"], "alpha_se": reducible["alpha_se"], "coefficient": reducible["coefficient"],
            "raw_alpha": raw["alpha"], "raw_alpha_se": raw["alpha_se"], "points": reducible["points"]}


def result_notes(fits: dict[str, dict], optimum: float, ceiling: dict[str, float | None],
                 prompts: eden_parts.MotifPrompts, prefix: int) -> list[str]:
    """The lines above the table: the floor, the fits (a small table of their own) and the motif reference."""
    paired = ceiling["paired_acc"]
    lines = [f"Bayes-optimal loss of the eval rows (the floor E of the fit): {optimum:.4f} bits/base. "
             f"Power law per arch over all (size, seed) cells: bits − E = A · N^(−alpha), N = non-embedding "
             f"parameters (raw_alpha: the same fit with E = 0); ± is the least-squares standard error.", "",
             "| arch | " + " | ".join(FIT_COLUMNS) + " |", "|" + "---|" * (len(FIT_COLUMNS) + 1)]
    for arch, fit in fits.items():
        cells = [f"{fit[c]:.3g}" if isinstance(fit[c], float) else ("-" if fit[c] is None else str(fit[c]))
                 for c in FIT_COLUMNS]
        lines.append(f"| {arch} | " + " | ".join(cells) + " |")
    lines += ["", f"Motif completion: {prompts.cut.size} validation prompts cut {prefix} bases into a planted motif "
              f"({int(prompts.paired.sum())} of them second arms whose first arm is in the row: paired_acc); "
              f"per-base accuracy of the greedy completion against the motif. The generator's own greedy "
              f"completion scores {ceiling['motif_acc']:.3f}" + (f" ({paired:.3f} paired)" if paired else "")
              + "; chance is 0.25."]
    return lines
