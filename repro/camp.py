"""Reproduction: CAMP (Coherent Alignment of Multimodal Prototypes; a RECONSTRUCTION) against late fusion.

Paper: "CAMP" (ICML 2026; no code or paper text available, the model is rebuilt from the abstract, see
docs/papers/camp.md). The claim tested at toy scale: an explainable prototype classifier with fewer than 1 M
parameters that aligns the modalities' class prototypes by optimal transport does well on complementary
multimodal classification, and is robust to missing modalities. Four classifiers (CAMP, CAMP without the OT
term, a concatenation MLP and a concatenation linear classifier) are trained by the shared trainer on two
two-modality tasks (synthetic class (z1 + z2) mod 3 with frozen random-MLP encoders; the digits' left / right
halves), with 30% of the modalities missing in training, once per seed; each trained cell is evaluated on test
data with each missing rate of `missing_rates`.

    python -m icml26zoo.repro camp --out runs/camp     # FULL: 3 seeds
    python -m icml26zoo.repro camp --quick

Budget fields: steps, batch_size and seeds of every cell; seq_len is the points per row (2, the modalities).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax

from icml26zoo.extras import require_extras
from icml26zoo.repro.camp_parts import ROLES, TASKS, accuracy_figure, cell_base, cell_name, evaluate_cell, rows_of
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_bool, check_probability

__all__ = ["FULL", "MISSING_RATES", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

MISSING_RATES = (0.0, 0.3, 0.6)
FULL = Budget(steps=300, batch_size=64, seq_len=2, seeds=(0, 1, 2))
QUICK = Budget(steps=150, batch_size=64, seq_len=2, seeds=(0,))
# CAMP with its OT term (every CAMP code path, ott included) on the tiny synthetic task: 2 steps, 1 seed.
SMOKE = Budget(steps=2, batch_size=8, seq_len=2, seeds=(0,))
SMOKE_ARGS = {"tasks": ("complementary",), "roles": ("camp",), "missing_rates": (0.0, 0.5), "tiny": True}


@register_experiment("camp", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     page="docs/papers/camp.md", extras=("ot", "sklearn"))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, tasks: Sequence[str] = TASKS,
        roles: Sequence[str] = ROLES, missing_rates: Sequence[float] = MISSING_RATES, tiny: bool = False,
        resume: bool = False) -> Results:
    """Trains every (task, role) per seed, evaluates each at every test missing rate, writes results.md/json and
    accuracy.png.

    Args:
      run_dir: the experiment's directory (cells, data, results).
      budget: steps, batch size and seeds of every cell; seq_len must be 2 (the modalities per row).
      tasks: which of "complementary" and "digits".
      roles: which of "camp", "camp_no_ot", "concat_mlp", "concat_linear" (repro/camp_parts.py).
      missing_rates: per-modality missing probabilities of the test data, each in [0, 1].
      tiny: shrink the model and the data (the smoke run; a check of the pipeline, not a result).
      resume: require run_dir to exist; finished cells and measurements are reused either way.
    """
    tasks = check_names("tasks", tasks, TASKS)
    roles = check_names("roles", roles, ROLES)
    missing_rates = tuple(check_probability("missing_rates[i]", rate) for rate in missing_rates)
    if not missing_rates:
        raise ValueError("missing_rates must hold at least one rate, got none")
    check_bool("tiny", tiny)
    if budget.seq_len != 2:
        raise ValueError(f"budget.seq_len must be 2 (one point per modality), got {budget.seq_len}")
    require_extras("train", "ot", *(("sklearn",) if "digits" in tasks else ()), what="experiment 'camp'")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    measured, configs = {}, {}
    for task in tasks:
        for role in roles:
            base = configs[task, role] = cell_base(task, role, experiment, tiny=tiny)
            measured[task, role] = []
            for seed in budget.seeds:
                name = cell_name(task, role, seed)
                experiment.train_cell(name, experiment.cell_config(base, seed=seed, checkpoints=1),
                                      devices=jax.devices()[:1], final_eval=False)
                measured[task, role].append(evaluate_cell(experiment, name, base, missing_rates, tiny=tiny))
    rows, columns = rows_of(measured, missing_rates, configs)
    return experiment.write(rows, columns=columns, notes=_notes(budget, tiny),
                            figures={"accuracy": accuracy_figure(rows, len(budget.seeds))},
                            title="CAMP (reconstruction) against late fusion: test accuracy against missingness",
                            extra={"missing_rates": list(missing_rates),
                                   "camp": {f"{t}/{r}": cells for (t, r), cells in measured.items()
                                            if r.startswith("camp")}})


def _notes(budget: Budget, tiny: bool) -> list[str]:
    size = ("tiny=True: D = 16, J = 2, 64 training samples; a check of the pipeline, not a result" if tiny
            else "presets camp / camp_digits (D = 64, J = 5, τ = 0.1) and the camp_concat baselines")
    return [f"{size}. Trained by the shared trainer with 30% of the modalities missing ({budget.steps} steps of "
            f"{budget.batch_size} samples, Adam 3e-3, seeds {list(budget.seeds)}).",
            "accuracy: test accuracy with each modality missing with probability test_missing (complementary: "
            "1,024 fresh samples; digits: the 360 held-out images); mean over seeds, *_spread = max - min over "
            "seeds, *_per_seed: the values.",
            "agreement (CAMP): fraction of a row's present modalities whose most similar prototype belongs to the "
            "predicted class (the explanation points at the decision); L_OT: the trained prototypes' class-wise "
            "Sinkhorn cost, summed over classes (mean over seeds); params: trainable parameters."]
