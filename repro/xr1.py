"""XR-1 stage 1 ("XR-1: Towards Versatile Vision-Language-Action Models via Learning Unified Vision-Motion
Representations", ICML 2026): the dual-branch VQ-VAE on moving-sprite scenes, with and without the KL alignment.

For each seed, the small stage-1 model (`icml26zoo.robotics.XR1`, structure from the official code at small
sizes) is trained twice by the shared trainer from preset `xr1` (model `xr1`, objective `xr1_stage1`, dataset
`zoo_sprites`, whose training split is the seed's scenes: robot, second-embodiment and human/vision-only samples):
`kl` (alignment weight kl_weight = 10, the official 10·kl_loss_w) and `no_kl` (weight 0). Each is scored on
held-out scenes (`repro/xr1_parts.py`). Rows aggregate the seeds (mean ± standard deviation). The `Budget` fields
name the sizes: `steps` = optimiser steps, `batch_size` = scenes per step, `seq_len` = the model width, `seeds` =
seeds. Each cell is a trainer workdir under `run_dir`; `resume` reuses finished cells and their scores.

    from icml26zoo import repro
    results = repro.run("xr1", "runs/xr1", budget="quick")

From a shell: `python -m icml26zoo.repro xr1 [--smoke | --quick] --out DIR [variants=kl,no_kl]
[train_size=2048] [test_size=256] [layers=2] [shared_codebook=False]`.
"""

from __future__ import annotations

import dataclasses
import os

import jax
from matplotlib.figure import Figure

from icml26zoo.configs import load_preset
from icml26zoo.repro import xr1_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, mean_std_text
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.robotics import XR1Config
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.validation import check_bool, check_int

__all__ = ["FULL", "QUICK", "SMOKE", "SMOKE_ARGS", "VARIANTS", "run"]

FULL = Budget(steps=400, batch_size=16, seq_len=32, seeds=(0, 1, 2))
QUICK = Budget(steps=40, batch_size=16, seq_len=32, seeds=(0, 1, 2))
# The KL variant (no_kl differs in a model option only), 3 steps of 8 scenes through a width-16 model with one
# block per stack, one seed.
SMOKE = Budget(steps=3, batch_size=8, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"variants": ("kl",), "train_size": 32, "test_size": 16, "layers": 1}

VARIANTS = {"kl": 10.0, "no_kl": 0.0}  # variant -> kl_weight
SCORES = ("image_mse", "copy_mse", "action_mse", "mean_action_mse", "vision_codes", "action_codes", "agreement",
          "kl")
COLUMNS = ("variant", *SCORES)


def cell_config(experiment: Experiment, variant: str, seed: int, *, train_size: int, test_size: int, layers: int,
                shared_codebook: bool) -> TrainConfig:
    """Preset `xr1` at the budget's width with `layers` blocks in the M-Former, the image decoder, the action
    encoder and the flow head, layers − 1 in the patch-ViT (the SigLIP stand-in; the spec's 4 did not fit the CPU
    budget), heads = width / 32 (at least 1), the variant's KL weight and the seed's training scenes."""
    config = load_preset("xr1")
    width = experiment.budget.seq_len
    options = dict(config.model.model_options) | {
        "vit_layers": layers - 1, "mformer_layers": layers, "decoder_layers": layers, "action_layers": layers,
        "head_layers": layers, "kl_weight": VARIANTS[variant], "shared_codebook": shared_codebook}
    heads = max(width // 32, 1)
    model = dataclasses.replace(config.model, d_model=width, num_heads=heads, num_kv_heads=heads,
                                model_options=tuple(options.items()))
    data_options = dict(config.data.task_options) | {"train_examples": train_size, "eval_examples": test_size,
                                                     "seed": seed}
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "data"),
                               task_options=tuple(data_options.items()))
    steps = experiment.budget.steps
    # warm-up at most a fifth of the run, so the cosine part always has steps left
    optim = dataclasses.replace(config.optim, warmup_steps=min(config.optim.warmup_steps, steps // 5))
    config = dataclasses.replace(config, model=model, data=data, optim=optim, log_every=max(1, steps // 100))
    cell = experiment.cell_config(config, seed=seed, checkpoints=1)
    return dataclasses.replace(cell, seq_len=config.seq_len)  # the budget's seq_len is the width, not the points


def loss_figure(histories: dict[str, dict[str, tuple[list[int], list[float]]]]) -> Figure:
    """Training losses against the step (first seed; the trainer's logged window means): image MSE, action flow
    loss, KL."""
    figure = Figure(figsize=(12, 3.5), layout="constrained")
    panels = figure.subplots(1, 3)
    for variant, history in histories.items():
        for panel, name in zip(panels, ("image_mse", "action_flow", "kl"), strict=True):
            panel.plot(*history[name], label=variant)
            panel.set(title=name, xlabel="step", yscale="log")
    for panel in panels:
        panel.grid(True, alpha=0.3)
        panel.legend(fontsize=8)
    return figure


@register_experiment("xr1", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/xr1.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, variants: tuple[str, ...] = tuple(VARIANTS),
        train_size: int = 2048, test_size: int = 256, layers: int = 2, shared_codebook: bool = False,
        resume: bool = False) -> Results:
    """Trains each variant on each seed's sprite scenes and scores it on held-out scenes; writes results.md/json
    and the figure `losses`.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      variants: a subset of ("kl", "no_kl").
      train_size, test_size: scenes per seed for training and for scoring.
      layers: blocks per transformer stack (the patch-ViT gets layers − 1).
      shared_codebook: one codebook for both branches (the official `combine_codebook` option).
      resume: require `run_dir` to exist; finished cells and their scores are reused.
    """
    variants = check_names("variants", variants, VARIANTS)
    check_int("train_size", train_size, minimum=budget.batch_size)
    check_int("test_size", test_size, minimum=2)
    check_int("layers", layers)
    check_bool("shared_codebook", shared_codebook)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    per_seed: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    histories: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    sizes = {"train_size": train_size, "test_size": test_size, "layers": layers, "shared_codebook": shared_codebook}
    for seed in budget.seeds:
        for variant in variants:
            name = f"{variant}_seed{seed}"
            experiment.train_cell(name, cell_config(experiment, variant, seed, **sizes), devices=jax.devices()[:1],
                                  final_eval=False)

            def measure(name: str = name, seed: int = seed) -> dict[str, float]:
                model = load_run(experiment.cell_dir(name), devices=jax.devices()[:1])[1].xr1
                return parts.evaluate(model, parts.test_scenes(seed, test_size), seed=seed)

            per_seed[variant].append(stored(experiment.cell_dir(name) / "test_scores.json", {"test_size": test_size},
                                            measure))
            if seed == budget.seeds[0]:
                histories[variant] = {key: experiment.metrics(name, f"xr1/{key}")
                                      for key in ("image_mse", "action_flow", "kl")}
    rows = [{"variant": v, **{s: mean_std_text([r[s] for r in per_seed[v]]) for s in SCORES}} for v in variants]
    notes = [
        f"Moving-sprite scenes (32×32, action chunk 16×4; about half robot, a quarter second embodiment, a quarter "
        f"human/vision-only), {train_size} training and {test_size} held-out scenes per seed; mean ± std over seeds "
        f"{budget.seeds}. Codebooks of {XR1Config.codebook_size} codes (dim {XR1Config.code_dim}), "
        f"{XR1Config.num_queries} tokens per branch, shared codebook: {shared_codebook}. image_mse: held-out "
        "target-frame MSE; copy_mse: copying the condition frame; action_mse: the flow head's sampled chunk "
        "(10 Euler steps from noise, given the action tokens) on robot scenes; mean_action_mse: predicting the "
        "mean chunk; *_codes: codes used on the test set; agreement: fraction of robot-scene tokens whose action "
        "vector's nearest vision code is the vision code; kl: the alignment KL on the test set.",
    ]
    return experiment.write(rows, columns=COLUMNS, title="XR-1 stage 1: dual-branch VQ-VAE with and without "
                            "KL alignment", notes=notes, figures={"losses": loss_figure(histories)},
                            extra={"per_seed": per_seed, "train_size": train_size, "test_size": test_size,
                                   "layers": layers, "shared_codebook": shared_codebook})
