"""Reproduction: adaptive topology (ATL) and FiLM-guided distillation (FGD) for 3-D RNA inverse folding, on toys.

Paper: "Learning Adaptive Topology with FiLM-Guided Distillation for Tertiary Structure-Based RNA Design" (ICML
2026; abstract only; see docs/papers/atl_fgd.md). ATL and FGD are reconstructions (icml26zoo.bio.rna_design).
The claim tested (a claim that can fail): on synthetic hairpins, whose base-pair partners (P-P ≈ 17-18
Å) lie outside a small static kNN graph, ATL (k_max = 24 candidates, target density 8/24) beats a static kNN with
k = 8 (RDesign-style) by >= 10 points of pair complementarity, its last-layer gates rank true pair edges with
AUROC > 0.8, and FGD (context teacher) does not lower recovery against ATL alone. Each role's preset is trained by
the shared trainer once per seed; each trained cell then designs fresh hairpins (argmax, evaluation mode).

    python -m icml26zoo.repro atl_fgd --out runs/atl_fgd     # FULL: 3 seeds
    python -m icml26zoo.repro atl_fgd --quick

Budget fields: steps, batch_size and seeds of every cell; seq_len is the longest structure (>= 24).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax

from icml26zoo.repro.atl_fgd_parts import (
    DEFAULT_ROLES,
    ROLES,
    cell_base,
    cell_name,
    evaluate_cell,
    metric_figure,
    native_fold_f1,
    role_rows,
)
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, parameter_count
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_bool, check_int

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=150, batch_size=16, seq_len=32, seeds=(0, 1, 2))
QUICK = Budget(steps=60, batch_size=16, seq_len=32, seeds=(0,))
QUICK_ARGS = {"structures": 32, "train_examples": 256}
# One role (atl: the gates; the teacher path is covered by tests/zoo/test_rna_design.py), 2 steps of the tiny
# model, 4 structures.
SMOKE = Budget(steps=2, batch_size=2, seq_len=24, seeds=(0,))
SMOKE_ARGS = {"roles": ("atl",), "tiny": True, "structures": 4}


@register_experiment("atl_fgd", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/atl_fgd.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, roles: Sequence[str] = DEFAULT_ROLES,
        structures: int = 64, train_examples: int | None = None, tiny: bool = False, resume: bool = False) -> Results:
    """Trains every role per seed, designs fresh hairpins, writes results.md/json and metrics.png.

    Args:
      run_dir: the experiment's directory (cells, the generated data, results).
      budget: steps, batch size, longest structure (seq_len, >= 24) and seeds of every cell.
      roles: which of "knn" (static kNN, k = 8), "atl" (learned gates), "fgd" (ATL + FiLM teacher) and
        "fgd_plain" (the leak check: the teacher sees the base it should predict) and "fgd_annealed" (fgd with
        the spec's λ_T and gate-temperature schedules); the last two are not defaults.
      structures: fresh hairpins every cell designs (>= 1).
      train_examples: training structures (None: the presets' 1,024).
      tiny: shrink the model and the data (the smoke run; a check of the pipeline, not a result).
      resume: require run_dir to exist; finished cells and measurements are reused either way.
    """
    roles = check_names("roles", roles, ROLES)
    check_int("structures", structures)
    if train_examples is not None:
        check_int("train_examples", train_examples)
    check_bool("tiny", tiny)
    check_int("budget.seq_len (the longest structure)", budget.seq_len, minimum=24)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    bases = {role: cell_base(role, experiment, tiny=tiny, train_examples=train_examples) for role in roles}
    params = {role: parameter_count(base.model) for role, base in bases.items()}
    measured: dict[str, list] = {role: [] for role in roles}
    # Seed-major: an interrupted run has every role at its first seeds (finished cells are reused on --resume).
    for seed in budget.seeds:
        for role, base in bases.items():
            config = experiment.cell_config(base, seed=seed, checkpoints=1)
            summary = experiment.train_cell(cell_name(role, seed), config, devices=jax.devices()[:1])
            design = evaluate_cell(experiment, role, seed, base, structures=structures)
            # The teacher path's recovery on the eval split (the trainer's summary; none without a teacher).
            measured[role].append(design | {"teacher_recovery": summary.get("eval/teacher_correct", float("nan"))})
    rows, columns = role_rows(measured)
    ceiling = native_fold_f1(bases[roles[-1]], structures)
    return experiment.write(rows, columns=columns, notes=_notes(budget, params, structures, tiny, ceiling),
                            figures={"metrics": metric_figure(rows, len(budget.seeds))},
                            title="ATL-FGD: static kNN vs ATL vs ATL + FGD on synthetic RNA hairpins",
                            extra={"params": params, "native_fold_f1": ceiling})


def _notes(budget: Budget, params: dict[str, int], structures: int, tiny: bool, ceiling: float) -> list[str]:
    size = ("tiny=True: width 8, one layer each side, a few structures; a check of the pipeline, not a result"
            if tiny else "the presets' sizes (width 32, 2 + 2 layers)")
    models = ", ".join(f"{role} {count:,} parameters" for role, count in params.items())
    return [f"Presets atl_fgd_knn (static kNN, k = 8), atl_fgd_atl (concrete gates over 24 candidates, ρ = 8/24), "
            f"atl_fgd_distill (ATL + context-masked TinyRNALM teacher); {models}; {size}. Trained by the shared "
            f"trainer on rna_hairpins of 24-{budget.seq_len} nucleotides ({budget.steps} steps of "
            f"{budget.batch_size} structures, seeds {list(budget.seeds)}).",
            f"Measured on {structures} fresh hairpins, argmax designs in evaluation mode (no gate noise, no "
            "teacher): recovery, pair_complementarity (target pairs with WC/GU bases), bp_f1 (base-pair F1 of the "
            f"Nussinov fold of the design; the native sequences' own fold scores {ceiling:.3f}), gate_auroc (last "
            "layer's gates ranking true pair edges among the learnable candidates; - for the static kNN), "
            "teacher_recovery (the teacher path's recovery on the eval split, training mode; - without a "
            "teacher). Mean over seeds, *_spread = max - min over seeds, *_per_seed: the values."]
