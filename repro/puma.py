"""Reproduction: PUMA's progressive unmasking against random masking for masked-diffusion training.

Paper: Kim, Geuter, Alvarez-Melis, Kakade, Chen, "Stop Training for the Worst: Progressive Unmasking Accelerates
Masked Diffusion Training" (ICML 2026, arXiv 2602.10314). See docs/papers/puma.md.

The claim tested: training a masked diffusion model on the masks its own confidence-ordered sampler would make
(PUMA's pool of progressively unmasked sequences, K phases) reaches a given validation loss in fewer steps than
random masking (≈2.3× at 125M parameters in the paper). Here: a tiny bidirectional byte-level denoiser on the
zoo's stdlib corpus, both methods through one loop (`repro.puma_parts`) differing only in the forward process.
Every `eval_every` steps both are scored on the same fixed eval windows by (1) the random-masking negative ELBO
in bits per byte (fixed mask draws; the standard MDLM validation loss, which is what the random baseline
optimizes) and (2) the greedy confidence-ordered sampler's byte accuracy when it fills the second half of each
window from the first (the inference procedure PUMA aligns training with). steps_to_match: the first
evaluation at which a method's seed-mean bpb is at or below the random baseline's final seed-mean bpb.

Example::

    from icml26zoo import repro
    results = repro.run("puma", "runs/puma", budget="quick")
    print(results.markdown)

From a shell: `python -m icml26zoo.repro puma [--smoke | --quick] --out DIR [num_phases=4]
[mode=confidence_collapse] [methods=random,puma] [eval_every=50] ...` (`--help` lists every option).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections.abc import Sequence

from matplotlib.figure import Figure

from icml26zoo.losses.progressive_unmasking import check_settings
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, markdown_table
from icml26zoo.repro.puma_parts import METHODS, Setup, model_config, train_method
from icml26zoo.repro.puma_parts import eval_rows as eval_rows_of
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int, check_positive

__all__ = ["FULL", "METHODS", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "Setup", "run"]

QUICK = Budget(steps=8, batch_size=8, seq_len=32, seeds=(0,))
FULL = Budget(steps=400, batch_size=32, seq_len=64, seeds=(0, 1))
QUICK_ARGS = {"num_phases": 4, "eval_every": 4, "eval_rows": 8, "eval_mask_draws": 1, "sampler_steps": 4}
# The smallest run: one PUMA cell (each method compiles its own training step; tests/repro/test_repro_puma.py
# trains both), 2 steps of 4 windows of 16 bytes, a 1-layer 16-wide model, K = 2 phases, evaluated once at the
# end on 4 windows.
SMOKE = Budget(steps=2, batch_size=4, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"methods": ("puma",), "d_model": 16, "num_layers": 1, "num_phases": 2, "eval_every": 2, "eval_rows": 4,
              "eval_mask_draws": 1, "sampler_steps": 2}
LABELS = {"random": "random masking (MDLM)", "puma": "PUMA (progressive unmasking)"}


@register_experiment("puma", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/puma.md", volatile=("seconds",))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, methods: Sequence[str] = METHODS, d_model: int = 64,
        num_layers: int = 2, learning_rate: float = 3e-3, num_phases: int = 8, mode: str = "standard",
        eval_every: int = 50, eval_rows: int = 32, eval_mask_draws: int = 4, sampler_steps: int = 16,
        resume: bool = False) -> Results:
    """Trains every method once per seed and writes the comparison (results.md/json, curves.png).

    Args:
      run_dir: the experiment's directory; each cell's curve is stored under cells/<method>_seed<s>/ and
        reused when the experiment runs again with the same settings.
      budget: steps, batch size B, window length T and seeds of every cell.
      methods: from METHODS ("random", "puma").
      d_model, num_layers: the denoiser's width and depth.
      learning_rate: AdamW's peak learning rate (> 0).
      num_phases: PUMA's K; mode: PUMA's mode ("standard" or "confidence_collapse").
      eval_every: steps between evaluations; eval_rows: eval windows; eval_mask_draws: fixed random-mask draws
        per eval window for the bpb; sampler_steps: steps of the greedy infilling sampler (at most T - T // 2).
      resume: require run_dir to exist.
    """
    methods = check_names("methods", methods, METHODS)
    setup = Setup(d_model=d_model, num_layers=num_layers, learning_rate=learning_rate, num_phases=num_phases,
                  mode=mode, eval_every=eval_every, eval_rows=eval_rows, eval_mask_draws=eval_mask_draws,
                  sampler_steps=sampler_steps)
    _check_setup(setup, budget)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    eval_x0 = eval_rows_of(setup.eval_rows, budget.seq_len)
    outcomes = {method: [_cell(experiment, method, setup, seed, eval_x0) for seed in budget.seeds]
                for method in methods}
    curves = {method: _mean_curve(cells) for method, cells in outcomes.items()}
    target = curves["random"]["bpb"][-1] if "random" in curves else None
    rows = [_row(method, cells, curves[method], target, setup) for method, cells in outcomes.items()]
    notes = _notes(budget, setup) + ["", "Eval bpb (seed mean) against steps:", ""] + _step_table(curves)
    return experiment.write(
        rows, columns=("method", "K", "bpb_final", "bpb_spread", "infill_acc_final", "steps_to_match",
                       "speedup", "fresh_rows", "seconds"),
        title="PUMA vs random masking: masked diffusion on stdlib bytes", notes=notes,
        figures={"curves": _figure(curves)}, extra={"curves": curves, "setup": dataclasses.asdict(setup),
                                                    "per_seed": outcomes})


def _check_setup(setup: Setup, budget: Budget) -> None:
    for name in ("d_model", "num_layers", "eval_every", "eval_rows", "eval_mask_draws", "sampler_steps"):
        check_int(name, getattr(setup, name))
    check_settings(setup.num_phases, setup.mode)
    check_positive("learning_rate", setup.learning_rate, finite=True)
    if setup.sampler_steps > budget.seq_len - budget.seq_len // 2:
        raise ValueError(f"sampler_steps must be at most the {budget.seq_len - budget.seq_len // 2} "
                         f"positions the sampler fills, got {setup.sampler_steps}")
    model_config(setup, budget.seq_len)


def _cell(experiment: Experiment, method: str, setup: Setup, seed: int, eval_x0) -> dict:
    """One trained cell's record, read back when it already ran with the same settings."""
    budget = experiment.budget
    settings = {"method": method, "setup": dataclasses.asdict(setup), "steps": budget.steps,
                "batch_size": budget.batch_size, "seq_len": budget.seq_len, "seed": seed}
    path = experiment.cell_dir(f"{method}_seed{seed}") / "curve.json"
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored["settings"] != settings:
            raise ValueError(f"cell {path.parent.name!r} in {str(experiment.run_dir)!r} ran with other settings; "
                             f"use a new run_dir, or delete the cell to retrain it")
        return stored
    record = {"settings": settings, **train_method(method, setup, steps=budget.steps,
                                                   batch_size=budget.batch_size, seq_len=budget.seq_len,
                                                   seed=seed, eval_x0=eval_x0)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    return record


def _mean_curve(cells: list[dict]) -> dict[str, list]:
    """The seed-mean curves (every cell evaluates at the same steps), with the spread of the final bpb."""
    keys = ("bpb", "infill_accuracy", "train_loss", "fresh_rows")
    curve = {"step": cells[0]["curve"]["step"]}
    for key in keys:
        curve[key] = [statistics.fmean(v) for v in zip(*(c["curve"][key] for c in cells), strict=True)]
    finals = [c["curve"]["bpb"][-1] for c in cells]
    curve["bpb_spread"] = (max(finals) - min(finals)) / 2 if len(finals) > 1 else None
    return curve


def steps_to_reach(curve: dict, target: float) -> int | None:
    """The first evaluated step whose bpb is <= target, or None when the curve never gets there."""
    return next((s for s, v in zip(curve["step"], curve["bpb"], strict=True) if v <= target), None)


def _row(method: str, cells: list[dict], curve: dict, target: float | None, setup: Setup) -> dict:
    reached = None if target is None else steps_to_reach(curve, target)
    baseline_steps = curve["step"][-1]
    return {
        "method": LABELS[method], "K": setup.num_phases if method == "puma" else None,
        "bpb_final": curve["bpb"][-1], "bpb_spread": curve["bpb_spread"],
        "infill_acc_final": curve["infill_accuracy"][-1], "steps_to_match": reached,
        "speedup": None if reached is None else baseline_steps / reached,
        "fresh_rows": int(curve["fresh_rows"][-1]),
        "seconds": statistics.fmean(c["seconds"] for c in cells),
    }


def _step_table(curves: dict) -> list[str]:
    methods = list(curves)
    steps = curves[methods[0]]["step"]
    rows = [{"step": s, **{LABELS[m]: curves[m]["bpb"][i] for m in methods}} for i, s in enumerate(steps)]
    return markdown_table(rows, ("step", *(LABELS[m] for m in methods)))


def _figure(curves: dict) -> Figure:
    figure = Figure(figsize=(10, 4), layout="constrained")
    left, right = figure.subplots(1, 2)
    for method, curve in curves.items():
        left.plot(curve["step"], curve["bpb"], marker="o", markersize=3, label=LABELS[method])
        right.plot(curve["step"], curve["infill_accuracy"], marker="o", markersize=3, label=LABELS[method])
    left.set(xlabel="step", ylabel="eval negative ELBO (bits per byte)", title="Validation loss (random masks)")
    right.set(xlabel="step", ylabel="byte accuracy", title="Greedy infilling of the second half")
    for axes in (left, right):
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    return figure


def _notes(budget: Budget, setup: Setup) -> list[str]:
    return [
        f"Model: bidirectional circulation attention at alpha = beta = 1 (softmax attention, no causal mask), "
        f"{setup.num_layers} layers, d_model {setup.d_model}, sinusoidal positions, 257-token vocabulary (bytes "
        f"+ [MASK]). AdamW lr {setup.learning_rate:g}, wd 0.01, 10% warmup, cosine to 10%, clip 1.",
        f"PUMA: K = {setup.num_phases}, mode {setup.mode}, a pool of B = {budget.batch_size} windows; random: "
        f"n ~ U{{1..T}} masked per fresh window. Both: the 1/n-weighted masked cross-entropy.",
        f"Eval every {setup.eval_every} steps on {setup.eval_rows} eval windows: bpb = random-masking negative "
        f"ELBO / ln 2 (mean of {setup.eval_mask_draws} fixed mask draws); infill accuracy = greedy sampler, "
        f"{setup.sampler_steps} steps, second half from the first. bpb_spread: half the range over seeds; "
        "steps_to_match: first eval step at or below random masking's final bpb; speedup = final step / that; "
        "fresh_rows: training windows drawn from the data (PUMA draws ~B/K per step).",
    ]
