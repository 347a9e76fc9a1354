"""Reproduction: learned (GeoCoupling) against synchronous and random time coupling on the fold-and-label toy.

Paper: K. Qiu et al., "Demystifying Multimodal Biomolecular Co-design with Intrinsic Geodesic Coupling" (ICML
2026, arXiv 2606.01628); see docs/papers/geocoupling.md. The claim tested (which can fail):
at an equal training budget the learned coupling beats synchronous coupling on consistency (the generated
sequence agrees with the generated structure) beyond the seed spread, and the learned curve is structure-leading
(γ_x ≥ γ_s on at least 80% of τ). Every cell is trained by the shared trainer (preset `geocoupling`); the learned
cell in segments with a curve update between them (repro/geocoupling_parts.py). Each trained cell then generates
`samples` structure-sequence pairs with `sample_steps` steps (sync and random along the diagonal, learned along its
final curve) and reports consistency, validity (Kabsch RMSD to the nearest template < 0.3), diversity (template
coverage entropy / log 4) and the mean RMSD.

    python -m icml26zoo.repro geocoupling --out runs/geocoupling     # FULL: 3 seeds
    python -m icml26zoo.repro geocoupling --quick

Budget fields: steps, batch_size and seeds of every cell (all cells train `steps` steps); seq_len is the residues
(12).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax
import numpy as np

from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.geocoupling_parts import (
    ROLES,
    cell_base,
    cell_name,
    curve_figure,
    evaluate_cell,
    role_rows,
    train_learned,
)
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_bool, check_int

__all__ = ["FULL", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=400, batch_size=64, seq_len=12, seeds=(0, 1, 2))
QUICK = Budget(steps=200, batch_size=64, seq_len=12, seeds=(0,))
QUICK_ARGS = {"update_every": 100, "samples": 128}
# The learned role only (the baselines run the same trainer path), 2 steps of a tiny model, one curve update.
SMOKE = Budget(steps=2, batch_size=4, seq_len=12, seeds=(0,))
SMOKE_ARGS = {"roles": ("learned",), "tiny": True, "update_every": 1, "samples": 4, "sample_steps": 4,
              "design": 3, "surface_batch": 4}


@register_experiment("geocoupling", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/geocoupling.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, roles: Sequence[str] = ROLES,
        update_every: int = 200, design: int = 5, surface_batch: int = 64, samples: int = 256,
        sample_steps: int = 100, tiny: bool = False, resume: bool = False) -> Results:
    """Trains each role per seed, generates and scores samples, writes results.md/json and curves.png.

    Args:
      run_dir: the experiment's directory (cells, data, results).
      budget: steps, batch size (seq_len must be 12, the residues) and seeds of every cell.
      roles: which of "sync", "random" and "learned" to train.
      update_every: E_c, the learned cell's steps between curve updates.
      design: the upper level measures the loss at design × design points (t_x, t_s).
      surface_batch: examples the upper level's loss surface averages over.
      samples: structure-sequence pairs each cell generates.
      sample_steps: generation steps S.
      tiny: shrink the model and the data (the smoke run; a check of the pipeline, not a result).
      resume: require run_dir to exist; finished cells and measurements are reused either way.
    """
    roles = check_names("roles", roles, ROLES)
    for name, value, low in (("update_every", update_every, 1), ("design", design, 2),
                             ("surface_batch", surface_batch, 1), ("samples", samples, 1),
                             ("sample_steps", sample_steps, 1)):
        check_int(name, value, minimum=low)
    check_bool("tiny", tiny)
    if budget.seq_len != 12:
        raise ValueError(f"budget.seq_len must be 12 (the fold-and-label residues), got {budget.seq_len}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    measured, curves = {}, []
    for role in roles:
        base = cell_base(role, experiment, tiny=tiny)
        knots = dict(base.objective_options)["knots"]
        measured[role] = []
        for seed in budget.seeds:
            config = experiment.cell_config(base, seed=seed, checkpoints=1)
            if role == "learned":
                logits = np.asarray(train_learned(experiment, config, seed, update_every=update_every,
                                                  design=design, surface_batch=surface_batch)[-1])
                curves.append(logits)
            else:
                experiment.train_cell(cell_name(role, seed), config, devices=jax.devices()[:1], final_eval=False)
                logits = np.zeros((2, knots))
            measured[role].append(evaluate_cell(experiment, role, seed, logits, samples=samples,
                                                steps=sample_steps))
    rows, columns = role_rows(measured)
    figures = {"curves": curve_figure(curves if curves else [np.zeros((2, 2))])}
    return experiment.write(rows, columns=columns, notes=_notes(budget, update_every, design, samples,
                                                                 sample_steps, tiny),
                            figures=figures, title="GeoCoupling: learned vs synchronous vs random time coupling",
                            extra={"curves": [c.tolist() for c in curves]})


def _notes(budget: Budget, update_every: int, design: int, samples: int, sample_steps: int, tiny: bool
           ) -> list[str]:
    size = ("tiny=True: one block of width 16, 64 training examples; a check of the pipeline, not a result"
            if tiny else "preset geocoupling (width 64, 2 blocks, 4 heads)")
    return [f"Every cell: {size}, trained by the shared trainer for {budget.steps} steps of {budget.batch_size} "
            f"examples, seeds {list(budget.seeds)}. learned: band training around the curve (band 0.05, 20% "
            f"random-coupling times), curve updated every {update_every} steps from a {design}x{design} loss "
            "design (GP per modality, DP geodesic on a 16x16 grid, 16 knots).",
            f"Metrics on {samples} samples generated with {sample_steps} steps (sync, random: along the diagonal; "
            "learned: along its final curve): consistency = fraction of residues whose token equals the label of "
            "the generated structure; validity = fraction with Kabsch RMSD < 0.3 to the nearest template; "
            "diversity = entropy of the nearest-template distribution of the valid samples / log 4; rmsd = mean "
            "RMSD to the nearest template; structure_leading = fraction of τ with γ_x ≥ γ_s (1 on the diagonal); "
            "lead = mean of γ_x − γ_s over τ (0 on the diagonal, > 0 when structure leads). "
            "Means over seeds, *_spread = max - min, *_per_seed the values."]
