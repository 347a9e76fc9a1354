"""Reproduction: SoLA (SO(3)-invariant local attention on the sphere) against its set_transformer baseline.

Paper: "SoLA" (ICML 2026); docs/papers/sola.md. The presets `geo_sola_sphere` and `geo_sphere_baseline` (same
data, objective and recipe) are trained by the shared trainer on zoo_sphere (per-point regression of a smoothed
spherical field, canonical lattice in training, rotated lattices in the validation split), once per seed.
Reported: the trainer's final eval relative L2 error on the rotated split (SoLA reads directions only through
their inner products, so its error should not depend on the pose; the baseline reads absolute positions).

    python -m icml26zoo.repro sola --out runs/repro/sola               # FULL: 300 steps per cell, 3 seeds
    python -m icml26zoo.repro sola --quick                             # tiny models, 30 steps
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from icml26zoo.repro import geometric
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

FAMILY = geometric.FAMILIES["sola"]
# The page's runs: the presets' 300 steps of 16 examples of 162 directions, now 3 seeds.
FULL = Budget(steps=300, batch_size=16, seq_len=162, seeds=(0, 1, 2))
QUICK = Budget(steps=30, batch_size=8, seq_len=32, seeds=(0,))
QUICK_ARGS = {"tiny": True}
# One cell (the model; the baseline runs the same code) of 2 steps at the tiny size.
SMOKE = Budget(steps=2, batch_size=4, seq_len=8, seeds=(0,))
SMOKE_ARGS = {"roles": ("model",), "tiny": True}


@register_experiment("sola", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page=FAMILY.page)
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, roles: Sequence[str] = geometric.ROLES,
        tiny: bool = False, resume: bool = False) -> Results:
    """Trains the sola and baseline presets per seed; writes results.md/json and training.png.

    Args:
      run_dir: the experiment's directory (cells, the generated dataset, results).
      budget: steps, batch size, directions per example (seq_len) and seeds of every cell.
      roles: which of "model" (geo_sola_sphere) and "baseline" (geo_sphere_baseline) to train.
      tiny: shrink the models and the data (the smoke and quick runs; see repro/geometric.py).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    roles = check_names("roles", roles, geometric.ROLES)
    geometric.check_common(budget, FAMILY, tiny=tiny)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    trained = geometric.train_family(FAMILY, experiment, roles=roles, tiny=tiny)
    rows, columns = geometric.family_rows(FAMILY, trained)
    figure = geometric.training_figure(experiment, FAMILY, trained, rows, "relative_l2",
                                       ylabel="eval relative L2 (rotated lattices)")
    return experiment.write(rows, columns=columns, notes=geometric.common_notes(FAMILY, budget, trained, tiny=tiny),
                            figures={"training": figure},
                            title="SoLA vs set_transformer on zoo_sphere (canonical training, rotated evaluation)")
