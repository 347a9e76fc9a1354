"""Reproduction: NTCE and NONL (learned hypersphere prototypes) against cross-entropy on scikit-learn's digits.

Paper: Koromilas, Giannakopoulos, Nicolaou, Panagakis, "Neural Collapse by Design: Learning Class Prototypes
on the Hypersphere" (ICML 2026, arXiv 2605.20302). See docs/papers/nc_losses.md.

The claims tested at small scale: the normalised prototype losses drive the features to neural collapse (NC1,
the instance–prototype alignment and the within-class effective rank fall during training, the prototype
covariance reaches effective rank K − 1) at least as fast as cross-entropy, at comparable test accuracy; and
the class-mean prototype classifier (no linear probe) classifies as well as the trained head. Each cell
trains the zoo's attention classifier (`nc_losses_parts`) with one registered objective (`classification`
for CE, `nc_<loss>_k10` otherwise); NC metrics are measured on the whole train split (L2-normalised features
and classifier rows) at `eval_points` evenly spaced steps, and the accuracy on the 360 test images.

Example::

    from icml26zoo import repro
    results = repro.run("nc_losses", "runs/nc_losses", budget="quick")
    print(results.markdown)

From a shell: `python -m icml26zoo.repro nc_losses [--smoke | --quick] --out DIR [methods=ce,nonl] [eval_points=6]`.
Each (method, seed) cell's evaluation records are stored under ``<run_dir>/cells/<method>_seed<seed>/records.json``
and reused when the experiment runs again with the same settings (`--resume`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections.abc import Sequence

from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure
from icml26zoo.repro.nc_losses_parts import METHODS, SEQ_LEN, CellSettings, objective_for, train_cell
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train.config import DataConfig
from icml26zoo.validation import check_int, check_non_negative, check_positive

__all__ = ["DEFAULT_METHODS", "FULL", "METHODS", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=30, batch_size=32, seq_len=SEQ_LEN, seeds=(0,))
# The page's run: three seeds (29 minutes of wall time for the 9 cells on the shared 2-core machine, 2026-12-06).
FULL = Budget(steps=600, batch_size=64, seq_len=SEQ_LEN, seeds=(0, 1, 2))
DEFAULT_METHODS = ("ce", "ntce", "nonl")
# What the QUICK run (the notebook, `--quick`) runs: CE against NONL only, two evaluations (each cell compiles
# its own training step, several CPU-seconds).
QUICK_ARGS = {"methods": ("ce", "nonl"), "eval_points": 2}
# Every code path at the smallest size: one NONL cell (the paper's loss), two steps of 8 images on a 16-wide
# model, evaluated at steps 0 and 2 on the first 128 train and test images.
SMOKE = Budget(steps=2, batch_size=8, seq_len=SEQ_LEN, seeds=(0,))
SMOKE_ARGS = {"methods": ("nonl",), "eval_points": 1, "d_model": 16, "readout_rows": 128}
COLUMNS = ("method", "objective", "test_accuracy", "test_accuracy_spread", "class_mean_test_accuracy", "nc1_start",
           "nc1", "nc1_spread", "nc2_equiangular", "nc3", "nc4", "instance_alignment", "prototype_erank", "er_intra",
           "er_inter", "mir", "hdr")
# The metrics whose spread over seeds (max - min of the final evaluation; 0 with one seed) the table gives.
SPREAD = ("test_accuracy", "nc1")
AVERAGED = tuple(column for column in COLUMNS[2:] if not column.endswith("_spread"))


@register_experiment("nc_losses", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/nc_losses.md", extras=("sklearn",))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, methods: Sequence[str] = DEFAULT_METHODS,
        eval_points: int = 6, d_model: int = 32, num_layers: int = 1, learning_rate: float = 1e-2,
        weight_decay: float = 1e-4, readout_rows: int | None = None, resume: bool = False) -> Results:
    """Trains every method per seed on digits and writes the table (final step, seed mean) and NC1-vs-step plot.

    Args:
      run_dir: the experiment's directory (the digits dataset under data/, the cells' records under cells/,
        results.md/json, nc_curves.png, accuracy_curves.png).
      budget: steps, batch size (rows of 64 pixel tokens) and seeds; budget.seq_len must be 64.
      methods: from METHODS: ce, normface, ntce, nonl, ntce_etf, nonl_etf (fixed simplex ETF), scl.
      eval_points: evaluations after step 0 (>= 1), evenly spaced, the last at the final step.
      d_model: the attention classifier's width (a multiple of 8: 4 heads of an even width).
      num_layers: its decoder layers (>= 1).
      learning_rate: AdamW's peak learning rate (> 0, warmup-cosine).
      weight_decay: AdamW's weight decay (>= 0).
      readout_rows: the NC metrics and accuracies use the first readout_rows images of each split (>= 32);
        None (the default): all of them, 1,437 train and 360 test.
      resume: require run_dir to exist; finished cells are reused either way.
    """
    methods = check_names("methods", methods, METHODS)
    check_int("eval_points", eval_points)
    check_int("d_model", d_model, minimum=8)
    if d_model % 8:
        raise ValueError(f"d_model must be a multiple of 8 (4 attention heads of an even width), got {d_model}")
    check_int("num_layers", num_layers)
    check_positive("learning_rate", learning_rate, finite=True)
    check_non_negative("weight_decay", weight_decay, finite=True)
    if readout_rows is not None:
        check_int("readout_rows", readout_rows, minimum=32)
    if budget.seq_len != SEQ_LEN:
        raise ValueError(f"budget.seq_len must be {SEQ_LEN} (one digit of 64 pixel tokens per row), "
                         f"got {budget.seq_len}")
    settings = CellSettings(d_model=d_model, num_layers=num_layers, learning_rate=float(learning_rate),
                            weight_decay=float(weight_decay))
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    data = DataConfig(name="digits", data_dir=str(experiment.run_dir / "data"), eval_split="test")
    eval_steps = sorted({0} | {round(budget.steps * (i + 1) / eval_points) for i in range(eval_points)})
    curves = {method: [_cell(experiment, method, data=data, settings=settings, seed=seed, eval_steps=eval_steps,
                             readout_rows=readout_rows) for seed in budget.seeds] for method in methods}
    rows = [_row(method, per_seed) for method, per_seed in curves.items()]
    figures = {"nc_curves": _figure(curves, "nc1", "NC1 = tr(Σ_W Σ_B⁺)/K (train features)", log=True),
               "accuracy_curves": _figure(curves, "test_accuracy", "test accuracy", log=False)}
    return experiment.write(rows, columns=COLUMNS, title="NTCE / NONL vs cross-entropy on digits: accuracy and "
                            "neural collapse", notes=_notes(settings, eval_steps, readout_rows), figures=figures,
                            extra={"curves": curves, "settings": dataclasses.asdict(settings)})


def _cell(experiment: Experiment, method: str, *, data: DataConfig, settings: CellSettings, seed: int,
          eval_steps: list[int], readout_rows: int | None) -> list[dict]:
    """One (method, seed) cell's evaluation records: trained, or read back when it already ran with these
    settings (a stored cell with other settings is a ValueError: use another run directory)."""
    budget = experiment.budget
    key = {"method": method, "settings": dataclasses.asdict(settings), "steps": budget.steps,
           "batch_size": budget.batch_size, "seed": seed, "eval_steps": eval_steps, "readout_rows": readout_rows}
    path = experiment.cell_dir(f"{method}_seed{seed}") / "records.json"
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored["settings"] != key:
            raise ValueError(f"cell {path.parent.name!r} in {str(experiment.run_dir)!r} ran with other settings "
                             f"({stored['settings']}); use a new run_dir, or delete the cell to retrain it")
        return stored["records"]
    records = train_cell(method, data=data, settings=settings, steps=budget.steps, batch_size=budget.batch_size,
                         seed=seed, eval_steps=eval_steps, readout_rows=readout_rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": key, "records": records}))
    return records


def _mean(per_seed: list[list[dict]], key: str, index: int = -1) -> float:
    return statistics.fmean(records[index][key] for records in per_seed)


def _row(method: str, per_seed: list[list[dict]]) -> dict:
    row = {"method": method, "objective": objective_for(method)}
    row |= {key: _mean(per_seed, key) for key in AVERAGED if key != "nc1_start"}
    row["nc1_start"] = _mean(per_seed, "nc1", index=0)
    for key in SPREAD:
        finals = [records[-1][key] for records in per_seed]
        row[f"{key}_spread"] = max(finals) - min(finals)
    return row


def _figure(curves: dict[str, list[list[dict]]], key: str, label: str, *, log: bool):
    series = {}
    for method, per_seed in curves.items():
        steps = [record["step"] for record in per_seed[0]]
        values = [statistics.fmean(records[i][key] for records in per_seed) for i in range(len(steps))]
        series[method] = (steps, values)
    return line_figure(series, xlabel="training step", ylabel=label, title=f"{label} during training on digits",
                       logy=log)


def _notes(settings: CellSettings, eval_steps: list[int], readout_rows: int | None) -> list[str]:
    notes = [
        f"Model: 1 attention classifier per cell (d_model {settings.d_model}, {settings.num_layers} layer(s), "
        f"4 heads), AdamW lr {settings.learning_rate:g}, weight decay {settings.weight_decay:g}, warmup-cosine; "
        "normalised losses at τ = 0.1, prototypes = the L2-normalised output-head columns 0..9 (no bias).",
        "Metrics are the final evaluation's, averaged over seeds (*_spread: max - min over seeds); nc1_start is "
        "NC1 at initialisation. NC metrics "
        "use the L2-normalised train features (1,437 images) and classifier rows (CE: its raw head columns, "
        "normalised); test_accuracy is the cell's own classifier on the 360 test images (CE: raw head logits; "
        "others: cosine to the prototypes), class_mean_test_accuracy the class-mean prototype classifier "
        "fit on the train features.",
        f"Evaluations at steps {eval_steps}.",
    ]
    if readout_rows is not None:
        notes.append(f"readout_rows = {readout_rows}: the metrics read only the first {readout_rows} images of "
                     "each split (a smoke run, not a measurement).")
    return notes
