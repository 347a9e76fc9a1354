"""Reproduction: GOAT, "You Need Better Attention Priors" (Litman & Guo, arXiv 2601.15380, ICML 2026).

Claim: attention is entropic optimal transport against a prior, and standard attention silently assumes a
uniform one. Learning the prior (GOAT: a relative Fourier term κ(i − j) plus a key-only "sink" term u(j)
with a BOS bump and an ALiBi-like recency slope) extrapolates to longer sequences like ALiBi, better than
RoPE, and gives attention sinks a place to go that costs no query/key content channels.

This run, at toy scale on the built-in byte corpus (`pystdlib`):
  1. trains GOAT, attention + RoPE and attention + ALiBi (2 layers of width 64, the same shape and recipe,
     parameter counts reported) at length T, once per seed;
  2. reopens every cell (`load_run`) and scores the same eval bytes with T, 2T and 4T tokens of context
     (bits per byte, and the loss at each position of the 4T rows);
  3. on the same eval rows, measures each layer's mean attention on the first token (the sink) and the
     size of the largest residual activation, with the zoo's diagnostics (`icml26zoo.diagnostics`).

Example::

    from icml26zoo import repro
    results = repro.run("goat", "runs/goat", budget="quick")   # QUICK with QUICK_ARGS
    print(results.markdown)
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence

import jax
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.configs import load_preset
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure, parameter_count
from icml26zoo.repro.goat_parts import (
    LABELS,
    MODELS,
    LengthLoss,
    binned,
    length_losses,
    model_config,
    single_segment_rows,
    sink_figure,
    sink_profile,
)
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig, apply_overrides
from icml26zoo.train.data.pipeline import make_eval_iterator
from icml26zoo.validation import check_bool, check_int

__all__ = ["FULL", "MODELS", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=16, batch_size=8, seq_len=32, seeds=(0,))
# What the notebook's QUICK run passes besides the budget: XLA's cheap compile pipeline, since compiling each
# model costs ~12 CPU-s with full optimizations and the notebook has 40 CPU-s for all three.
QUICK_ARGS = {"fast_compile": True}
# SMOKE: GOAT alone, 2 steps of 8 rows (a multiple of the devices) x 16 bytes, evaluated at 16, 32 and 64 on 8
# rows, sinks on 2 of them from query 4.
SMOKE = Budget(steps=2, batch_size=8, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"models": ("goat",), "head_dim": 16, "eval_rows": 8, "sink_rows": 2, "sink_i0": 4, "position_bins": 8,
              "fast_compile": True}
FULL = Budget(steps=300, batch_size=8, seq_len=128, seeds=(0, 1))
FACTORS = (1, 2, 4)  # evaluation lengths in multiples of the training length T
COLUMNS = ("model", "params", "param_gap", "bpb_T", "bpb_2T", "bpb_4T", "change_4T", "bpb_4T_per_seed",
           "sink_mass_T", "sink_mass_4T")


@register_experiment("goat", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/goat.md")
def run(
    run_dir: str | os.PathLike,
    *,
    budget: Budget = FULL,
    models: Sequence[str] = tuple(MODELS),
    head_dim: int = 32,
    pos_rank: int = 4,
    eval_rows: int = 16,
    sink_rows: int = 8,
    sink_i0: int = 16,
    position_bins: int = 32,
    fast_compile: bool = False,
    resume: bool = False,
) -> Results:
    """Trains each model at length T, evaluates it at T, 2T and 4T and measures its attention sinks.

    Args:
      run_dir: the run directory (cells, tables, figures; the byte corpus is built under it).
      budget: steps, batch size, training length T (budget.seq_len) and seeds of every cell.
      models: which of MODELS to train ("goat", "rope" = attention + RoPE, "alibi" = attention + ALiBi).
      head_dim: the attention head width of every model (4 query heads, 2 key/value heads). GOAT takes
        2·pos_rank + 1 of its channels for the prior, so it must exceed that.
      pos_rank: GOAT's R, the Fourier frequencies of its relative prior κ (>= 0).
      eval_rows: eval rows of 4T bytes behind every length's loss (the same bytes at every length).
      sink_rows: at most this many of those rows (the ones holding a single document) for the sink statistics.
      sink_i0: the sink statistic averages queries i >= sink_i0 (earlier queries see few keys), < T.
      position_bins: bins of the loss-vs-position plot over the 4T positions (1 .. 4T).
      fast_compile: compile with XLA's cheap pipeline (jax_disable_most_optimizations) for the whole run:
        ~3x faster compiles but slower steps, for tiny CPU runs where compiling dominates; the same maths
        (only float rounding differs). The setting is restored afterwards.
      resume: continue in an existing run_dir (FileNotFoundError if it does not exist).
    """
    models = check_names("models", models, MODELS)
    for name, value in (("eval_rows", eval_rows), ("sink_rows", sink_rows), ("head_dim", head_dim)):
        check_int(name, value)
    check_int("pos_rank", pos_rank, minimum=0)
    train_len = budget.seq_len
    lengths = tuple(f * train_len for f in FACTORS)
    longest = lengths[-1]
    if head_dim % 2 or head_dim <= 2 * pos_rank + 1:
        raise ValueError(f"head_dim must be even (RoPE) and exceed GOAT's 2·pos_rank + 1 = {2 * pos_rank + 1} "
                         f"prior channels, got head_dim={head_dim}")
    check_int("sink_i0", sink_i0, minimum=0)
    if sink_i0 >= train_len:
        raise ValueError(f"sink_i0 must be below the training length T = {train_len}, got {sink_i0}")
    check_int("position_bins", position_bins)
    if position_bins > longest:
        raise ValueError(f"position_bins must be at most 4T = {longest}, got {position_bins}")
    check_bool("fast_compile", fast_compile)
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", fast_compile or previous)
    try:
        return _run(run_dir, budget, models, head_dim, pos_rank, eval_rows, sink_rows, sink_i0, position_bins,
                    resume)
    finally:
        jax.config.update("jax_disable_most_optimizations", previous)


def _run(run_dir, budget, models, head_dim, pos_rank, eval_rows, sink_rows, sink_i0, position_bins,
         resume) -> Results:
    """`run` after its arguments are checked."""
    train_len = budget.seq_len
    lengths = tuple(f * train_len for f in FACTORS)
    longest = lengths[-1]

    experiment = Experiment(run_dir, budget=budget, resume=resume)
    data_dir = str(experiment.run_dir / "data")
    configs = {m: _cell_base(m, budget, data_dir, head_dim=head_dim, pos_rank=pos_rank) for m in models}
    counts = {m: parameter_count(configs[m].model) for m in models}
    cells = {}
    for model in models:
        for seed in budget.seeds:
            cell = cells[model, seed] = f"{model}_seed{seed}"
            experiment.train_cell(cell, experiment.cell_config(configs[model], seed=seed, checkpoints=1),
                                  final_eval=False)

    @functools.cache
    def eval_batch() -> tuple[dict, np.ndarray]:
        """The eval rows of 4T bytes and the single-document ones among them (built on first use)."""
        batch = next(make_eval_iterator(configs[models[0]].data, batch_size=eval_rows, seq_len=longest,
                                        max_batches=1))
        return batch, single_segment_rows(batch["segment_ids"], sink_rows)

    # Each cell's measures are kept in its directory (keyed by the evaluation options): a resumed run reuses them.
    key = {"eval_rows": eval_rows, "sink_rows": sink_rows, "sink_i0": sink_i0, "lengths": list(lengths)}
    losses, sinks, used_sink_rows = {}, {}, 0
    for (model, seed), cell in cells.items():
        first = seed == budget.seeds[0]
        record = stored(experiment.cell_dir(cell) / "measures.json", key | {"sinks": first},
                        lambda cell=cell, first=first: _measure(experiment.cell_dir(cell), eval_batch, lengths,
                                                                first, sink_i0))
        losses[model, seed] = {int(n): LengthLoss(int(n), r["bits"], r["tokens"], np.asarray(r["position_bits"]),
                                                  np.asarray(r["position_tokens"]))
                               for n, r in record["losses"].items()}
        if first:
            sinks[model] = {int(n): {k: np.asarray(v) for k, v in by.items()} for n, by in record["sinks"].items()}
            used_sink_rows = record["sink_rows"]

    reference = counts["goat"] if "goat" in counts else max(counts.values())
    rows = [_row(m, budget.seeds, lengths, losses, sinks[m], counts[m], reference) for m in models]
    figures = _figures(experiment, models, budget, lengths, losses, sinks, position_bins)
    notes = _notes(models, sinks, used_sink_rows, sink_i0, lengths, losses)
    extra = {
        "lengths": list(lengths),
        "bits": {f"{m}_seed{s}": {n: r.bits for n, r in by_len.items()} for (m, s), by_len in losses.items()},
        "first_token_mass": {m: {n: s["first_token_mass"] for n, s in by_len.items()} for m, by_len in sinks.items()},
        "max_ratio": {m: {n: s["max_ratio"] for n, s in by_len.items()} for m, by_len in sinks.items()},
        "params": counts,
        "eval_tokens": next(iter(losses.values()))[longest].tokens,
    }
    return experiment.write(rows, columns=COLUMNS, notes=notes, figures=figures, extra=extra,
                            title=f"GOAT vs attention (RoPE, ALiBi): train at T = {train_len}, evaluate up to 4T")


def _measure(cell_dir, eval_batch, lengths: tuple[int, ...], sinks: bool, sink_i0: int) -> dict:
    """One trained cell's loss at each length and, with `sinks`, its sink statistics at T and 4T (as JSON)."""
    batch, rows = eval_batch()
    _, trained, _ = load_run(cell_dir, devices=jax.devices()[:1])
    losses, captured = length_losses(trained, batch, lengths, capture_rows=rows)
    record = {"losses": {n: {"bits": r.bits, "tokens": r.tokens, "position_bits": r.position_bits,
                             "position_tokens": r.position_tokens} for n, r in losses.items()},
              "sinks": None, "sink_rows": len(rows)}
    if sinks:
        record["sinks"] = sink_profile(captured["probs"], captured["hidden"], batch["inputs"][rows], i0=sink_i0,
                                       lengths=(lengths[0], lengths[-1]))
    return record


def _cell_base(model: str, budget: Budget, data_dir: str, *, head_dim: int, pos_rank: int) -> TrainConfig:
    """The tiny preset's recipe for `model`: its corpus under the run dir, warmup 10% of the steps, ~25 logs,
    max_seq_len 4T so the trained model can be evaluated at 4T."""
    preset = load_preset("goat_tiny" if model == "goat" else "llama_tiny")
    steps, length = budget.steps, budget.seq_len
    config = apply_overrides(preset, [
        f"data.data_dir={data_dir}", f"optim.warmup_steps={max(1, steps // 10)}",
        f"log_every={max(1, steps // 25)}", "eval_every=0",
    ])
    cfg = model_config(config.model, model, train_len=length, max_len=FACTORS[-1] * length, head_dim=head_dim,
                       pos_rank=pos_rank)
    return dataclasses.replace(config, model=cfg)


def _row(model, seeds, lengths, losses, sinks, params, reference) -> dict:
    """The table row of `model`: bits per byte at each length (mean over seeds) and its first-token mass."""
    bits = {n: [losses[model, s][n].bits for s in seeds] for n in lengths}
    first, longest = lengths[0], lengths[-1]
    return {
        "model": LABELS[model], "params": params, "param_gap": f"{100 * (params / reference - 1):+.2f}%",
        "bpb_T": float(np.mean(bits[first])), "bpb_2T": float(np.mean(bits[lengths[1]])),
        "bpb_4T": float(np.mean(bits[longest])),
        "change_4T": f"{float(np.mean(bits[longest]) - np.mean(bits[first])):+.4f}",
        "bpb_4T_per_seed": ", ".join(f"{b:.4f}" for b in bits[longest]),
        "sink_mass_T": float(sinks[first]["layer_mass"].mean()),
        "sink_mass_4T": float(sinks[longest]["layer_mass"].mean()),
    }


def _figures(experiment, models, budget, lengths, losses, sinks, bins) -> dict[str, Figure]:
    seeds, longest, train_len = budget.seeds, lengths[-1], budget.seq_len
    by_length = {LABELS[m]: (lengths, [float(np.mean([losses[m, s][n].bits for s in seeds])) for n in lengths])
                 for m in models}
    extrapolation = line_figure(by_length, xlabel="evaluation length (tokens)", logx=True,
                                ylabel="eval bits per byte (same bytes, mean over seeds)",
                                title=f"Trained at T = {train_len}: loss at T, 2T, 4T")
    # Only the evaluated lengths are labelled: the log axis's minor labels (e.g. 3x10^2) overlapped them.
    extrapolation.axes[0].set_xticks(lengths, [str(n) for n in lengths])
    extrapolation.axes[0].minorticks_off()
    by_position = {}
    for m in models:
        bits = np.nanmean([losses[m, s][longest].position_bits for s in seeds], axis=0)
        by_position[LABELS[m]] = binned(np.nan_to_num(bits), losses[m, seeds[0]][longest].position_tokens, bins)
    position = line_figure(by_position, xlabel="position in the 4T context", markers=False,
                           ylabel="bits per byte (mean over seeds)",
                           title=f"Loss by position, context {longest} (dashed: trained length T)")
    position.axes[0].axvline(train_len, linestyle="--", color="gray", linewidth=1)
    curves = {LABELS[m]: experiment.metrics(f"{m}_seed{seeds[0]}", "train/loss") for m in models}
    return {
        "extrapolation": extrapolation,
        "loss_by_position": position,
        "sinks": sink_figure({LABELS[m]: {n: s["layer_mass"] for n, s in sinks[m].items()} for m in models},
                             title=f"Attention on the first token, per layer (seed {seeds[0]})"),
        "loss_curves": line_figure(curves, xlabel="step", ylabel="train loss (nats/byte)", markers=False,
                                   title=f"Training at T = {train_len} (seed {seeds[0]})"),
    }


def _notes(models, sinks, sink_rows, i0, lengths, losses) -> list[str]:
    """The per-layer sink table (first-token mass, massive-activation ratio) before the main table."""
    first, longest = lengths[0], lengths[-1]
    eval_tokens = next(iter(losses.values()))[longest].tokens
    lines = [f"Every length scores the same {eval_tokens:,} eval bytes; only the context differs (rows of 4T "
             f"cut into chunks). change_4T = bpb at 4T minus bpb at T (negative: longer context helps).", "",
             f"## Sinks (seed 0): mean attention on the first token over queries i >= {i0}, per layer "
             f"(mean over heads; the same {sink_rows} single-document rows at both lengths), and "
             "max |h| / median |h| of each layer's input stream", "",
             "| model | layer | sink mass T | sink mass 4T | per-head mass T | max ratio T |",
             "|---|---|---|---|---|---|"]
    for m in models:
        at_t, at_4t = sinks[m][first], sinks[m][longest]
        for layer, mass in enumerate(at_t["layer_mass"]):
            heads = ", ".join(f"{v:.3f}" for v in at_t["first_token_mass"][layer])
            lines.append(f"| {LABELS[m]} | {layer} | {mass:.4f} | {at_4t['layer_mass'][layer]:.4f} | {heads} | "
                         f"{at_t['max_ratio'][layer]:.1f} |")
    lines += ["", "## Length extrapolation (bits per byte, mean over seeds)"]
    return lines
