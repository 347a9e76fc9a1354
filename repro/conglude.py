"""Reproduction: ConGLUDe (contrastive geometric learning for unified computational drug design) on synthetic
proteins with planted pockets, against a non-geometric baseline.

Paper: ConGLUDe (ICML 2026; official code ml-jku/conglude); see docs/papers/conglude.md. The claim tested at toy
scale: one contrastively trained geometric model serves pocket prediction (DCC success), virtual screening (AUROC,
EF1%), target fishing (rank of the true protein) and ligand-conditioned pocket selection. Both presets (`conglude`,
VN-EGNN; `conglude_baseline`, the same model with message passing removed) are trained by the shared trainer on
zoo_pockets complexes, once per seed, and evaluated on the same fresh proteins and ligand library.

    python -m icml26zoo.repro conglude --out runs/conglude     # FULL: 3 seeds
    python -m icml26zoo.repro conglude --quick

Budget fields: steps, batch_size and seeds of every cell; seq_len is the largest protein.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax

from icml26zoo.repro.common import Budget, Experiment, Results, check_names, parameter_count
from icml26zoo.repro.conglude_parts import (
    ROLES,
    cell_base,
    cell_name,
    eval_set,
    evaluate_cell,
    metric_figure,
    role_rows,
)
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_bool, check_int

__all__ = ["FULL", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=150, batch_size=8, seq_len=72, seeds=(0, 1, 2))
QUICK = Budget(steps=60, batch_size=8, seq_len=60, seeds=(0,))
# One role (the baseline differs only in its encoder's layers), 2 steps of a width-8 one-layer model, 4 proteins, a
# 28-ligand library: every code path of the experiment.
SMOKE = Budget(steps=2, batch_size=2, seq_len=30, seeds=(0,))
SMOKE_ARGS = {"roles": ("conglude",), "tiny": True, "proteins": 4, "actives_per_type": 2, "decoys": 20}


@register_experiment("conglude", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/conglude.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, roles: Sequence[str] = ROLES, proteins: int = 32,
        actives_per_type: int = 10, decoys: int = 460, tiny: bool = False, resume: bool = False) -> Results:
    """Trains both models per seed, evaluates them on fresh proteins and a ligand library, writes
    results.md/json and tasks.png.

    Args:
      run_dir: the experiment's directory (cells, data, results).
      budget: steps, batch size, largest protein (seq_len) and seeds of every cell.
      roles: which of "conglude" and "baseline" to train.
      proteins: fresh evaluation proteins (>= 2; every second one has two pockets).
      actives_per_type: library ligands per pocket type (the actives of a protein with that pocket type).
      decoys: library decoys (background fingerprints, no pocket type).
      tiny: shrink the model and the data (the smoke run; a check of the pipeline, not a result).
      resume: require run_dir to exist; finished cells and measurements are reused either way.
    """
    roles = check_names("roles", roles, ROLES)
    check_int("proteins", proteins, minimum=2)
    check_int("actives_per_type", actives_per_type)
    check_int("decoys", decoys, minimum=0)
    check_bool("tiny", tiny)
    check_int("budget.seq_len (the largest protein)", budget.seq_len, minimum=24)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    sizes = {"proteins": proteins, "actives_per_type": actives_per_type, "decoys": decoys}
    measured, params, evaluation = {}, {}, None
    for role in roles:
        base = cell_base(role, experiment, tiny=tiny)
        evaluation = evaluation or eval_set(base, proteins, actives_per_type, decoys)
        params[role] = parameter_count(base.model)
        measured[role] = []
        for seed in budget.seeds:
            config = experiment.cell_config(base, seed=seed, checkpoints=1)
            experiment.train_cell(cell_name(role, seed), config, devices=jax.devices()[:1], final_eval=False)
            measured[role].append(evaluate_cell(experiment, role, seed, evaluation, sizes))
    rows, columns = role_rows(measured)
    return experiment.write(rows, columns=columns, notes=_notes(budget, params, sizes, tiny),
                            figures={"tasks": metric_figure(rows)},
                            title="ConGLUDe: pocket prediction, virtual screening, target fishing, pocket selection",
                            extra={"params": params, **sizes})


def _notes(budget: Budget, params: dict[str, int], sizes: dict[str, int], tiny: bool) -> list[str]:
    size = "tiny=True: width 8, one layer, a handful of proteins; a check of the pipeline, not a result" if tiny \
        else "the presets' sizes"
    models = ", ".join(f"{role} {count:,} parameters" for role, count in params.items())
    library = 4 * sizes["actives_per_type"] + sizes["decoys"]
    return [f"Presets conglude (VN-EGNN) and conglude_baseline (no message passing); {models}; {size}. Trained by the "
            f"shared trainer on zoo_pockets complexes of {max(24, 2 * budget.seq_len // 3)}-{budget.seq_len} residues "
            f"({budget.steps} steps of {budget.batch_size} complexes, seeds {list(budget.seeds)}).",
            f"Evaluated on {sizes['proteins']} fresh proteins (every second with two pockets) and a library of "
            f"{library} ligands ({sizes['actives_per_type']} per pocket type, {sizes['decoys']} decoys). "
            "dcc_success: fraction of true pockets with one of the top-n merged VN clusters (n true pockets) within "
            "4 Å; vs_auroc / vs_ef1: per-protein AUROC and EF1% of ⟨P, ℓ_p⟩ over the library (actives: its pocket "
            "types), mean over proteins; fishing_rank / fishing_top1: rank (1 best) of the true protein among it "
            f"and up to {15} proteins without a pocket of the ligand's type, per active ligand; selection: "
            "two-pocket proteins, fraction of (pocket, ligand) pairs whose argmax_k ⟨b_k, ℓ_b⟩ cluster lies within "
            "4 Å of the ligand's pocket. Mean over seeds; *_spread = max - min over seeds; *_per_seed the values."]
