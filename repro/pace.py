"""Reproduction: PACENet (PACE attention, compression-expansion from MCR²) against its set_transformer baseline.

Paper: "PACE" (ICML 2026); docs/papers/pace_attention.md. The presets `geo_pacenet_digits` and
`geo_digits_baseline` (same data, objective and recipe) are trained by the shared trainer on zoo_digit_patches
(scikit-learn's 8x8 digits as 16 tokens of 2x2 patches; the `sklearn` extra), once per seed. Reported: the
trainer's final test accuracy and loss on the 360 held-out images.

    python -m icml26zoo.repro pace --out runs/repro/pace               # FULL: 300 steps per cell, 3 seeds
    python -m icml26zoo.repro pace --quick                             # tiny models, 30 steps

Besides the two presets, FULL trains the MCR² comparisons of the page as `variants` of the PACENet preset (its
shapes and recipe, one model option changed): "exact" (PACE expanding with the exact covariance instead of the
sketch), "mssa" (CRATE's subspace self-attention) and "tssa" (ToST's token statistics self-attention).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import jax

from icml26zoo.geometric.pace import pacenet_options
from icml26zoo.models import ModelConfig
from icml26zoo.repro import geometric
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, parameter_count
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train.config import TrainConfig

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "VARIANTS", "run", "variant_config"]

FAMILY = geometric.FAMILIES["pace"]
# The page's runs: the presets' 300 steps of 64 images of 16 patches, now 3 seeds.
FULL = Budget(steps=300, batch_size=64, seq_len=16, seeds=(0, 1, 2))
QUICK = Budget(steps=30, batch_size=32, seq_len=16, seeds=(0,))
QUICK_ARGS = {"tiny": True, "variants": ()}
# One cell (the model; the baseline and the variants run the same code) of 2 steps at the tiny size.
SMOKE = Budget(steps=2, batch_size=4, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"roles": ("model",), "tiny": True, "variants": ()}
# The PACENet preset with one model option changed: the page's MCR² comparisons.
VARIANTS = {"exact": (("expand", "exact"),), "mssa": (("attention", "mssa"),), "tssa": (("attention", "tssa"),)}
# Tokens per digit (2x2 patches of the 8x8 image): PACE sketches the covariance only when they exceed its rank.
NUM_PATCHES = 16


def check_sketch_exercised(model: ModelConfig, num_tokens: int = NUM_PATCHES) -> int:
    """The sketch rank r of a pacenet ModelConfig whose PACE expansion is sketched on `num_tokens` tokens;
    ValueError when it is not (another mixer or expansion, or r >= N, where the model uses the exact
    covariance: the randomized sketch the paper's method rests on would then never run)."""
    options = pacenet_options(model)
    if options.attention != "pace" or options.expand != "sketch" or options.sketch_rank >= num_tokens:
        raise ValueError(f"the pace experiment must exercise the sketched expansion: attention 'pace', expand "
                         f"'sketch' and sketch_rank < N = {num_tokens} tokens, got attention={options.attention!r}, "
                         f"expand={options.expand!r}, sketch_rank={options.sketch_rank}")
    return options.sketch_rank


@register_experiment("pace", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page=FAMILY.page, extras=("sklearn",))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, roles: Sequence[str] = geometric.ROLES,
        variants: Sequence[str] = tuple(VARIANTS), tiny: bool = False, resume: bool = False) -> Results:
    """Trains the pacenet and baseline presets and the pacenet variants per seed; writes results.md/json and
    training.png.

    Args:
      run_dir: the experiment's directory (cells, the generated dataset, results).
      budget: steps, batch size, points per row (seq_len, >= the 16 patches) and seeds of every cell.
      roles: which of "model" (geo_pacenet_digits) and "baseline" (geo_digits_baseline) to train.
      variants: which of VARIANTS ("exact", "mssa", "tssa": the pacenet preset with the exact covariance, or
        CRATE's or ToST's attention) to train as well; () for none.
      tiny: shrink the models (the smoke and quick runs; see repro/geometric.py; the digits split is fixed).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    roles = check_names("roles", roles, geometric.ROLES)
    variants = check_names("variants", variants, VARIANTS) if tuple(variants) else ()
    geometric.check_common(budget, FAMILY, tiny=tiny)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    rank = check_sketch_exercised(geometric.cell_base(FAMILY, "model", experiment, tiny=tiny).model)
    trained = geometric.train_family(FAMILY, experiment, roles=roles, tiny=tiny)
    trained |= {variant: _train_variant(experiment, variant, tiny=tiny) for variant in variants}
    rows, columns = geometric.family_rows(FAMILY, trained)
    for row in rows:
        if row["role"] in VARIANTS:
            row["preset"] = f"{FAMILY.model} ({', '.join(f'{k}={v}' for k, v in VARIANTS[row['role']])})"
    figure = geometric.training_figure(experiment, FAMILY, trained, rows, "accuracy", ylabel="test accuracy")
    notes = geometric.common_notes(FAMILY, budget, trained, tiny=tiny)
    notes.append(f"PACE's expansion uses a Gaussian sketch of rank {rank} < N = {NUM_PATCHES} tokens, drawn "
                 "afresh every training step (evaluation: the objective's fixed key).")
    return experiment.write(rows, columns=columns, notes=notes,
                            figures={"training": figure},
                            title="PACENet vs set_transformer on zoo_digit_patches (360 held-out digits)")


def variant_config(experiment: Experiment, variant: str, *, tiny: bool = False) -> TrainConfig:
    """The pacenet preset's cell base (`geometric.cell_base`) with the variant's model option changed."""
    base = geometric.cell_base(FAMILY, "model", experiment, tiny=tiny)
    options = dict(base.model.model_options) | dict(VARIANTS[variant])
    return dataclasses.replace(base, model=dataclasses.replace(base.model, model_options=tuple(options.items())))


def _train_variant(experiment: Experiment, variant: str, *, tiny: bool) -> dict:
    """Trains (or reads back) the variant's cell per seed: {"config", "params", "summaries"} as train_family."""
    base = variant_config(experiment, variant, tiny=tiny)
    summaries = [experiment.train_cell(geometric.cell_name(FAMILY, variant, seed),
                                       experiment.cell_config(base, seed=seed, checkpoints=1),
                                       devices=jax.devices()[:1])
                 for seed in experiment.budget.seeds]
    return {"config": base, "params": parameter_count(base.model), "summaries": summaries}
