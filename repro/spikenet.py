"""Reproduction: SpikeNet (spiking vector-mask attention) against its set_transformer baseline on zoo_shapes.

Paper: "SpikeNet: Sparse Spike-Driven Mask Vector Transformer ..." (ICML 2026); docs/papers/spikenet.md. The
presets `geo_spikenet_shapes` and `geo_shapes_baseline` (same data, objective and recipe) are trained by the shared
trainer on canonical clouds of 8 surfaces, once per seed. Reported: the trainer's final eval (its validation split
is randomly rotated); every trained cell's accuracy on the same fresh clouds, canonical and randomly rotated
(SpikeNet is invariant to translations and point order, not to rotations); and for the first seed's SpikeNet the
firing rate of every neuron layer (the paper's energy proxy, which must lie strictly inside (0, 1)) and its
symmetry errors (`spikenet.equivariance_errors`: permutation, translation, and a rotation as the control).

    python -m icml26zoo.repro spikenet --out runs/repro/spikenet       # FULL: 300 steps per cell, 3 seeds
    python -m icml26zoo.repro spikenet --quick                         # tiny models, 30 steps
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.geometric import spikenet
from icml26zoo.geometric.spikenet_eval import mean_firing_rates
from icml26zoo.repro import geometric
from icml26zoo.repro.common import Budget, Experiment, Results, check_names
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

FAMILY = geometric.FAMILIES["spikenet"]
# The page's runs: the presets' 300 steps of 32 clouds of 128 points, now 3 seeds; 256 fresh clouds per pose.
FULL = Budget(steps=300, batch_size=32, seq_len=128, seeds=(0, 1, 2))
QUICK = Budget(steps=30, batch_size=16, seq_len=16, seeds=(0,))
QUICK_ARGS = {"tiny": True, "eval_clouds": 64}
# One cell (the model; the baseline runs the same code) of 2 steps at the tiny size.
SMOKE = Budget(steps=2, batch_size=4, seq_len=8, seeds=(0,))
SMOKE_ARGS = {"roles": ("model",), "tiny": True, "eval_clouds": 8}
BATCH = 64


@register_experiment("spikenet", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page=FAMILY.page)
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, roles: Sequence[str] = geometric.ROLES,
        tiny: bool = False, eval_clouds: int = 256, resume: bool = False) -> Results:
    """Trains the spikenet and baseline presets per seed, measures poses, firing rates and symmetry; writes
    results.md/json, training.png and (with the model) firing_rates.png.

    Args:
      run_dir: the experiment's directory (cells, the generated dataset, results).
      budget: steps, batch size, points per cloud (seq_len) and seeds of every cell.
      roles: which of "model" (geo_spikenet_shapes) and "baseline" (geo_shapes_baseline) to train.
      tiny: shrink the models and the data (the smoke and quick runs; see repro/geometric.py).
      eval_clouds: fresh clouds of the canonical / rotated accuracy and the firing rates (>= 1).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    roles = check_names("roles", roles, geometric.ROLES)
    geometric.check_common(budget, FAMILY, tiny=tiny, eval_clouds=eval_clouds)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    trained = geometric.train_family(FAMILY, experiment, roles=roles, tiny=tiny)
    poses = geometric.shapes_accuracy(experiment, FAMILY, trained, eval_clouds=eval_clouds, batch=BATCH)
    rows, columns = geometric.family_rows(FAMILY, trained, poses)
    notes = geometric.common_notes(FAMILY, budget, trained, tiny=tiny) + [
        f"accuracy_canonical / accuracy_rotated: accuracy of each trained cell on the same {eval_clouds} fresh clouds "
        "(the dataset's generator, a seed the splits do not use), in the canonical pose and randomly rotated; "
        "chance is 1/8."]
    figures = {"training": geometric.training_figure(experiment, FAMILY, trained, rows, "accuracy_canonical",
                                                     ylabel="accuracy on canonical clouds")}
    extra = {}
    if "model" in trained:
        seed = budget.seeds[0]
        probes = stored(experiment.run_dir / "spikenet_probes.json",
                                  {"seed": seed, "eval_clouds": eval_clouds},
                                  lambda: _probes(experiment, trained, seed, eval_clouds))
        rates, symmetry = probes["firing_rates"], probes["symmetry"]
        notes += [
            "", f"## The trained SpikeNet (seed {seed}): firing rates and symmetry", "",
            f"Firing rate per neuron layer, averaged over the {eval_clouds} canonical clouds: "
            + ", ".join(f"{name} {rate:.3f}" for name, rate in rates.items())
            + f"; all in [{min(rates.values()):.3f}, {max(rates.values()):.3f}].",
            f"Max |logit change| on {probes['clouds']} canonical clouds: "
            + ", ".join(f"{name} {error:.3g}" for name, error in symmetry.items())
            + " (in-group: permutation and translation; out_of_group: a rotation, the control).",
        ]
        figures["firing_rates"] = _rates_figure(rates, seed)
        extra = {"firing_rates": rates, "symmetry": symmetry}
    return experiment.write(rows, columns=columns, notes=notes, figures=figures, extra=extra,
                            title="SpikeNet vs set_transformer on zoo_shapes (canonical training)")


def _probes(experiment: Experiment, trained: dict, seed: int, eval_clouds: int) -> dict:
    """The firing rates of the seed's trained SpikeNet on the canonical clouds and its symmetry errors."""
    model = geometric.open_model(experiment, FAMILY, "model", seed)
    clouds = geometric.shapes_eval_sets(trained["model"]["config"].data, eval_clouds)["canonical"][0]
    batch = min(BATCH, eval_clouds)
    rates = mean_firing_rates(model, clouds, batch)
    # batch / 4 clouds: equivariance_errors stacks 4 variants, so it reuses firing_rates' compiled program.
    few = clouds[: max(1, batch // 4)]
    symmetry = spikenet.equivariance_errors(model, few, np.zeros((*few.shape[:2], 0), np.float32),
                                            np.ones(few.shape[:2], np.float32), jax.random.key(geometric.EVAL_SEED))
    return {"firing_rates": rates, "symmetry": {k: float(v) for k, v in symmetry.items()}, "clouds": len(few)}


def _rates_figure(rates: dict[str, float], seed: int) -> Figure:
    figure = Figure(figsize=(9.0, 3.6), layout="constrained")
    axes = figure.add_subplot()
    axes.bar(range(len(rates)), list(rates.values()), color="tab:purple")
    axes.set_xticks(range(len(rates)), list(rates), rotation=70, fontsize=7)
    axes.set(ylabel="firing rate", ylim=(0, 1), title=f"SpikeNet firing rate per neuron layer (seed {seed})")
    return figure
