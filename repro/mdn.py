"""Reproduction of MDN (Huang et al., "MDN: Parallelizing Stepwise Momentum for Delta Linear Attention",
ICML 2026, arXiv 2605.05838) at toy scale.

The paper claims that adding a stepwise momentum buffer to the gated delta rule improves recall and language
modelling over Gated DeltaNet, KDA, Mamba2 and DeltaNet, and that its gate constraint keeps the momentum
dynamics stable. Here every mixer is the same 2-layer, 64-wide model (the `<mixer>_mqar` / `<mixer>_tiny`
presets) trained with the shared trainer:

- MQAR recall accuracy at an increasing number of key-value pairs (one line per mixer);
- bits per byte on the built-in byte corpus (`pystdlib`);
- the spectral radius of MDN's 2x2 input-free transition along k̂ (`zoo.mixers.mdn.transition_spectral_radius`)
  at the gates a freshly initialised and the trained MQAR MDN model actually produce.

Example::

    from icml26zoo import repro
    results = repro.run("mdn", "runs/repro/mdn", budget="quick")   # QUICK with QUICK_ARGS
    print(results.markdown)
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from icml26zoo.repro.common import Budget, Experiment, Results, check_mixers, line_figure, parameter_count
from icml26zoo.repro.mdn_parts import (
    MAX_KEYS,
    byte_config,
    fresh_model,
    gate_radii,
    mean,
    mqar_config,
    mqar_tokens,
    stability_figure,
)
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.validation import check_bool, check_choice, check_int

__all__ = ["FULL", "MIXERS", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

# MDN first, then the baselines of the paper's comparison.
MIXERS = ("mdn", "gated_deltanet", "kda", "mamba2", "deltanet")
IMPLEMENTATIONS = ("reference", "xla")

# seq_len 64 holds one MQAR example of up to 16 pairs (4P - 1 = 63 tokens); every cell compiles once.
QUICK = Budget(steps=10, batch_size=16, seq_len=64, seeds=(0,))
FULL = Budget(steps=100, batch_size=16, seq_len=64, seeds=(0, 1, 2))
# A cell costs ~25 CPU-seconds of compilation on a CPU, so QUICK (the notebook) trains MDN alone on one task.
QUICK_ARGS = {"mixers": ("mdn",), "pairs": (4,), "byte_corpus": False, "stability_at_init": False}
# SMOKE: the QUICK cell for 2 steps of 8 rows (a multiple of the devices) x 16 tokens (pairs 4 need 4P - 1 = 15),
# 8 keys, gates sampled on 2 rows.
SMOKE = Budget(steps=2, batch_size=8, seq_len=16, seeds=(0,))
SMOKE_ARGS = QUICK_ARGS | {"num_keys": 8, "stability_rows": 2}


@register_experiment("mdn", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/mdn.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, mixers: Sequence[str] = MIXERS,
        pairs: Sequence[int] = (4, 8, 16), byte_corpus: bool = True, num_keys: int = 24,
        implementation: str | None = "reference", stability_rows: int = 16, stability_at_init: bool = True,
        resume: bool = False) -> Results:
    """Trains the grid, measures the MDN gate stability and writes results.md/json and the figures.

    Args:
      run_dir: the run directory (cells, data, results).
      budget: steps, batch size, sequence length and seeds of every cell.
      mixers: some of MIXERS (QUICK_ARGS: MDN alone).
      pairs: MQAR key-value pairs per example, each >= 1, <= num_keys and with 4P - 1 <= budget.seq_len.
      byte_corpus: also train every mixer on the byte corpus.
      num_keys: distinct MQAR keys (and values), 1 .. 31 so that the vocabulary of 64 holds them.
      implementation: the mixers' `implementation` option, "reference" (the recurrence: it compiles faster
        than the chunked form at T = 64 and is equal to it, invariant 1), "xla", or None (each op's default).
      stability_rows: MQAR examples fed to the MDN models to sample their gates (>= 1).
      stability_at_init: also sample the gates of a freshly initialised MDN model (always when "mdn" is not
        among `mixers`: there is no trained one).
      resume: continue an existing run_dir (FileNotFoundError if it does not exist).
    """
    mixers = check_mixers("mixers", mixers, MIXERS)
    pairs = _check_pairs(pairs, num_keys, budget)
    for name, flag in (("byte_corpus", byte_corpus), ("stability_at_init", stability_at_init)):
        check_bool(name, flag)
    if implementation is not None:  # None: the backend's default
        check_choice("implementation", implementation, IMPLEMENTATIONS)
    check_int("stability_rows", stability_rows)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    data_dir = str(experiment.run_dir / "data")

    rows, recall = [], {}
    for mixer in mixers:
        configs = {p: mqar_config(mixer, pairs=p, num_keys=num_keys, data_dir=data_dir,
                                  implementation=implementation) for p in pairs}
        row = {"mixer": mixer, "params": parameter_count(configs[pairs[0]].model)}
        for p, config in configs.items():
            accs = [_train(experiment, f"mqar_p{p}_{mixer}_seed{s}", config, s)["eval/accuracy"] for s in budget.seeds]
            row[f"acc_p{p}"] = mean(accs)
        recall[mixer] = (list(pairs), [row[f"acc_p{p}"] for p in pairs])
        if byte_corpus:
            config = byte_config(mixer, data_dir=data_dir, implementation=implementation)
            bpb = [_train(experiment, f"bytes_{mixer}_seed{s}", config, s)["eval/bits_per_byte"] for s in budget.seeds]
            row["bits_per_byte"] = mean(bpb)
        rows.append(row)

    # The sampled radii are kept under cells/ (keyed by what they depend on), so a resumed run reuses them.
    trained, at_init = "mdn" in mixers, stability_at_init or "mdn" not in mixers
    key = {"num_keys": num_keys, "pairs": pairs[-1], "seed": budget.seeds[0], "implementation": implementation,
           "rows": stability_rows, "trained": trained, "at_init": at_init}
    stability = {label: np.asarray(radii, np.float32) for label, radii in stored(
        experiment.run_dir / "cells" / "stability.json", key,
        lambda: _stability(experiment, num_keys, pairs, implementation, stability_rows, trained=trained,
                           at_init=at_init)).items()}
    figures = {
        "recall_vs_pairs": line_figure(recall, xlabel="key-value pairs per example", ylabel="MQAR eval accuracy",
                                       title=f"MQAR recall vs pairs ({num_keys} keys, chance 1/{num_keys})",
                                       logx=len(pairs) > 1, hlines={"chance": 1.0 / num_keys}),
        "stability": stability_figure(stability),
    }
    columns = ("mixer", "params", *(f"acc_p{p}" for p in pairs), *(("bits_per_byte",) if byte_corpus else ()))
    notes = [
        f"MQAR: {num_keys} keys and {num_keys} values, eval accuracy on the answers (chance {1 / num_keys:.3f}); "
        "acc_pP = mean over seeds at P key-value pairs. bits_per_byte: eval bits per byte on pystdlib.",
        f"Mixer implementation: {implementation or 'each op default'}. Every model: d_model 64, 2 layers, "
        "4 heads (2 key/value heads); params include the embedding (vocabulary 64 on MQAR).",
        "MDN stability: spectral radius of the 2x2 input-free transition along k̂ over "
        + ", ".join(f"{label} (max {float(r.max()):.4f} over {r.size:,} gate values)" for label, r in stability.items())
        + "; stable iff < 1.",
    ]
    extra = {"pairs": list(pairs), "num_keys": num_keys, "implementation": implementation,
             "stability_max": {label: float(r.max()) for label, r in stability.items()}}
    return experiment.write(rows, columns=columns, title="MDN vs Gated DeltaNet, KDA, Mamba2 and DeltaNet",
                            notes=notes, figures=figures, extra=extra)


def _check_pairs(pairs: Sequence[int], num_keys: int, budget: Budget) -> tuple[int, ...]:
    """`pairs` as a sorted tuple after checking num_keys and each pair count against it and the sequence length."""
    check_int("num_keys", num_keys)
    if num_keys > MAX_KEYS:
        raise ValueError(f"num_keys must be an integer in 1 .. {MAX_KEYS} (vocabulary 64), got {num_keys!r}")
    pairs = tuple(pairs)
    if not pairs:
        raise ValueError("pairs must name at least one pair count, got none")
    for p in pairs:
        check_int("pairs[i]", p)
        if p > num_keys or 4 * p - 1 > budget.seq_len:
            raise ValueError(f"pairs: {p} pairs need p <= num_keys ({num_keys}) and 4p - 1 <= budget.seq_len "
                             f"({budget.seq_len})")
    if len(set(pairs)) != len(pairs):
        raise ValueError(f"pairs must not repeat a value, got {list(pairs)}")
    return tuple(sorted(pairs))


def _train(experiment: Experiment, cell: str, config, seed: int) -> dict:
    """Trains (or reuses) one cell with a single checkpoint at the end (cells are short)."""
    return experiment.train_cell(cell, experiment.cell_config(config, seed=seed, checkpoints=1))


def _stability(experiment: Experiment, num_keys: int, pairs: tuple[int, ...], implementation: str | None,
               rows: int, *, trained: bool, at_init: bool) -> dict[str, np.ndarray]:
    """Spectral radii [L, B, T, H] of the MDN model at init (`at_init`) and after MQAR training (`trained`,
    the largest P, first seed)."""
    p, seed = pairs[-1], experiment.budget.seeds[0]
    config = mqar_config("mdn", pairs=p, num_keys=num_keys, data_dir=str(experiment.run_dir / "data"),
                         implementation=implementation)
    tokens = mqar_tokens(num_keys, p, rows, seed=10_000 + seed)
    radii = {"MDN at init": gate_radii(fresh_model(config, seed), tokens)} if at_init else {}
    if trained:
        _, model, _ = load_run(experiment.cell_dir(f"mqar_p{p}_mdn_seed{seed}"))
        radii[f"MDN trained (MQAR, {p} pairs)"] = gate_radii(model, tokens)
    return radii
