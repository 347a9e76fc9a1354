"""Reproduction: the Platonic Transformer (octahedral frames) against its set_transformer baseline on zoo_shapes.

Paper: "Platonic Transformers" (ICML 2026); docs/papers/platonic_transformer.md. The presets
`geo_platonic_shapes` (equivariant to the 24 rotations of the octahedron) and `geo_shapes_baseline` (same data,
objective and recipe) are trained by the shared trainer on canonical clouds of 8 surfaces, once per seed. Reported:
the trainer's final eval (its validation split is randomly rotated) and the accuracy of every trained cell on the
same fresh clouds, canonical and randomly rotated (a rotation-invariant model scores the same on both).

    python -m icml26zoo.repro platonic --out runs/repro/platonic         # FULL: 150 steps per cell, 3 seeds
    python -m icml26zoo.repro platonic --quick                          # tiny models, 30 steps
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from icml26zoo.repro import geometric
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

FAMILY = geometric.FAMILIES["platonic"]
# The page's runs: the preset's batch of 32 clouds of 128 points, 150 steps (its reported table), now 3 seeds.
FULL = Budget(steps=150, batch_size=32, seq_len=128, seeds=(0, 1, 2))
QUICK = Budget(steps=30, batch_size=16, seq_len=16, seeds=(0,))
QUICK_ARGS = {"tiny": True, "eval_clouds": 64}
# One cell (the model; the baseline runs the same code) of 2 steps at the tiny size.
SMOKE = Budget(steps=2, batch_size=4, seq_len=8, seeds=(0,))
SMOKE_ARGS = {"roles": ("model",), "tiny": True, "eval_clouds": 8}


@register_experiment("platonic", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page=FAMILY.page)
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, roles: Sequence[str] = geometric.ROLES,
        tiny: bool = False, eval_clouds: int = 256, resume: bool = False) -> Results:
    """Trains the platonic and baseline presets per seed; writes results.md/json and training.png.

    Args:
      run_dir: the experiment's directory (cells, the generated dataset, results).
      budget: steps, batch size, points per cloud (seq_len) and seeds of every cell.
      roles: which of "model" (geo_platonic_shapes) and "baseline" (geo_shapes_baseline) to train.
      tiny: shrink the models and the data (the smoke and quick runs; see repro/geometric.py).
      eval_clouds: fresh clouds of the canonical / rotated accuracy (>= 1).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    roles = check_names("roles", roles, geometric.ROLES)
    geometric.check_common(budget, FAMILY, tiny=tiny, eval_clouds=eval_clouds)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    trained = geometric.train_family(FAMILY, experiment, roles=roles, tiny=tiny)
    poses = geometric.shapes_accuracy(experiment, FAMILY, trained, eval_clouds=eval_clouds, batch=64)
    rows, columns = geometric.family_rows(FAMILY, trained, poses)
    notes = geometric.common_notes(FAMILY, budget, trained, tiny=tiny) + [
        f"accuracy_canonical / accuracy_rotated: accuracy of each trained cell on the same {eval_clouds} fresh clouds "
        "(the dataset's generator, a seed the splits do not use), in the canonical pose and randomly rotated; "
        "chance is 1/8."]
    figure = geometric.training_figure(experiment, FAMILY, trained, rows, "accuracy_rotated",
                                       ylabel="accuracy on rotated clouds")
    return experiment.write(rows, columns=columns, notes=notes, figures={"training": figure},
                            title="Platonic Transformer vs set_transformer on zoo_shapes (canonical training)")
