"""Reproduction: "The Spike, the Sparse and the Sink" (Sun, Canziani, LeCun, Zhu, arXiv 2603.05498, ICML 2026).

Claim: massive activations (a few huge residual-stream entries on one token) and attention sinks (heads
putting most of their weight on that token) co-occur largely because of the architecture, the pre-norm
block in particular; changing the norm placement decouples them, and each phenomenon has its own role.

This run, at toy scale on the built-in byte corpus (`pystdlib`):
  1. trains one small attention LM per variant (pre-, post-, sandwich and no norm; pre-norm with DyT in place
     of RMSNorm, with a GELU MLP, with a learnable sink, with softmax-plus-one, with an output gate; see
     `sinks_parts.VARIANTS`), all with the same shape and recipe, once per seed;
  2. on held-out single-document rows, measures per layer the top activation ratio max|h| / median|h| and the
     attention on the first token (and on the explicit sink slot where there is one);
  3. runs two ablations on each seed-0 model: zero the spike token's top channels at the block with the
     largest ratio and measure the first-token attention afterwards (I1), and mask token 0 as a key in every
     head and measure the largest ratio afterwards (I2).

Example::

    from icml26zoo import repro
    results = repro.run("sinks", "runs/sinks", budget="quick")
    print(results.markdown)

From a shell: `python -m icml26zoo.repro sinks [--smoke | --quick] --out DIR [variants=pre,gelu,plus_one]
[num_layers=4] [eval_rows=16] [i0=8] [eps=0.3] [clamp_channels=2]`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from icml26zoo.configs import load_preset
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure, parameter_count
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.sinks_parts import (
    LABELS,
    VARIANTS,
    ablation_figure,
    ablations,
    document_rows,
    profile,
    profile_figure,
    variant_config,
)
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig, apply_overrides
from icml26zoo.train.data.pipeline import make_eval_iterator
from icml26zoo.validation import check_int, check_interval

__all__ = ["DEFAULT_VARIANTS", "FULL", "QUICK", "QUICK_ARGS", "QUICK_VARIANTS", "SMOKE", "SMOKE_ARGS", "VARIANTS",
           "run"]

QUICK = Budget(steps=12, batch_size=8, seq_len=32, seeds=(0,))
FULL = Budget(steps=300, batch_size=8, seq_len=64, seeds=(0, 1))
# The study's variants; every cell costs a training compile (~10 CPU-seconds), so the notebook's QUICK run
# compares only the two norm placements the paper contrasts.
DEFAULT_VARIANTS = ("pre", "post", "sandwich", "none", "dyt", "sink", "gate")
QUICK_VARIANTS = ("pre", "post")
QUICK_ARGS = {"variants": QUICK_VARIANTS}
# Every stage at the smallest size: one pre-norm cell of 2 layers, 2 steps of 8 rows of 16 bytes, measured on 4
# eval rows (queries i >= 4).
SMOKE = Budget(steps=2, batch_size=8, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"variants": ("pre",), "num_layers": 2, "eval_rows": 4, "i0": 4}
COLUMNS = ("variant", "params", "bpb", "max_ratio", "ratio_layer", "spike_on_tok0", "sink_mass", "sink_rate",
           "slot_mass", "clamp_dloss", "clamp_mass_before", "clamp_mass_after", "remove_dloss",
           "remove_ratio_before", "remove_ratio_after")


@register_experiment("sinks", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/sinks.md")
def run(
    run_dir: str | os.PathLike,
    *,
    budget: Budget = FULL,
    variants: Sequence[str] = DEFAULT_VARIANTS,
    num_layers: int = 4,
    eval_rows: int = 16,
    i0: int = 8,
    eps: float = 0.3,
    clamp_channels: int = 2,
    resume: bool = False,
) -> Results:
    """Trains each variant, then measures massive activations, sinks and the two ablations.

    Args:
      run_dir: the run directory (cells, tables, figures; the byte corpus is built under it).
      budget: steps, batch size, sequence length T and seeds of every cell.
      variants: names from VARIANTS (pre, post, sandwich, none, dyt, gelu, sink, plus_one, gate).
      num_layers: decoder layers of every model (d_model 64, 4 query / 2 key-value heads; >= 2 so that a
        clamped block has later layers to affect).
      eval_rows: eval rows of T bytes; those holding a single document feed the measurements.
      i0: sink statistics average queries i >= i0 (earlier queries see few keys); 0 <= i0 < T.
      eps: a head is a sink head when its first-token mass exceeds eps, in (0, 1).
      clamp_channels: channels of the spike token zeroed by the I1 ablation (>= 1, at most 64).
      resume: continue in an existing run_dir (FileNotFoundError if it does not exist).
    """
    variants = check_names("variants", variants, VARIANTS)
    check_int("num_layers", num_layers, minimum=2)
    check_int("eval_rows", eval_rows)
    check_int("i0", i0, minimum=0)
    if i0 >= budget.seq_len:
        raise ValueError(f"i0 must be below the sequence length T = {budget.seq_len}, got {i0}")
    check_interval("eps", eps, 0, 1, closed="neither")
    check_int("clamp_channels", clamp_channels)
    if clamp_channels > 64:
        raise ValueError(f"clamp_channels must be at most d_model = 64, got {clamp_channels}")

    experiment = Experiment(run_dir, budget=budget, resume=resume)
    configs = {v: _cell_base(v, budget, str(experiment.run_dir / "data"), num_layers) for v in variants}
    devices = jax.devices()[:1]  # tiny models; batches need not divide a (possibly simulated) device count
    for variant in variants:
        for seed in budget.seeds:
            experiment.train_cell(f"{variant}_seed{seed}", _cell_config(experiment, configs[variant], seed),
                                  devices=devices)

    batch = next(make_eval_iterator(configs[variants[0]].data, batch_size=eval_rows, seq_len=budget.seq_len,
                                    max_batches=1))
    tokens = document_rows(batch, eval_rows)
    profiles, rows = {}, []
    for variant in variants:
        per_seed, ablation = [], None
        for seed in budget.seeds:
            measured = _measure(experiment, f"{variant}_seed{seed}", tokens, first=ablation is None, i0=i0, eps=eps,
                                channels=clamp_channels, devices=devices)
            per_seed.append(measured["profile"])
            ablation = measured.get("ablation", ablation)
        profiles[variant] = {key: np.mean([p[key] for p in per_seed], axis=0) for key in per_seed[0]}
        rows.append(_row(experiment, variant, budget.seeds, configs[variant], profiles[variant], ablation, devices))

    title = f"Massive activations and attention sinks by architecture ({num_layers} layers, T = {budget.seq_len})"
    figures = {
        "profiles": profile_figure({LABELS[v]: profiles[v] for v in variants}, title=title),
        "ablations": ablation_figure(rows, title="ablations on the seed-0 models"),
        "loss_curves": line_figure({LABELS[v]: experiment.metrics(f"{v}_seed{budget.seeds[0]}", "train/loss")
                                    for v in variants}, xlabel="step", ylabel="train loss (nats per byte)",
                                   title="training (seed 0)", markers=False),
    }
    notes = _notes(budget, i0, eps, clamp_channels, len(tokens))
    extra = {"profiles": {v: {k: np.asarray(val).tolist() for k, val in p.items()} for v, p in profiles.items()},
             "eval_rows_used": len(tokens)}
    return experiment.write(rows, columns=COLUMNS, title=title, notes=notes, figures=figures, extra=extra)


def _measure(experiment: Experiment, cell: str, tokens: np.ndarray, *, first: bool, i0: int, eps: float,
             channels: int, devices: list) -> dict[str, dict[str, Any]]:
    """{"profile": ..., "ablation": ... (when `first`)} of a trained cell on `tokens`, stored in the cell
    (measurements.json, per measurement setting, arrays with their dtypes) and read back on a rerun."""
    path = experiment.cell_dir(cell) / "measurements.json"
    key = f"rows{len(tokens)}x{tokens.shape[1]}_i0{i0}_eps{eps}_channels{channels}"
    stored = json.loads(path.read_text()) if path.is_file() else {}
    entry = stored.get(key, {})
    if "profile" not in entry or (first and "ablation" not in entry):
        _, model, _ = load_run(experiment.cell_dir(cell), devices=devices)
        entry = {"profile": _encode(profile(model, tokens, i0=i0, eps=eps))}
        if first:
            entry["ablation"] = _encode(ablations(model, tokens, i0=i0, eps=eps, channels=channels))
        path.write_text(json.dumps(stored | {key: entry}) + "\n")
    return {name: _decode(values) for name, values in entry.items()}


def _encode(values: dict[str, Any]) -> dict[str, Any]:
    return {k: {"dtype": str(np.asarray(v).dtype), "value": np.asarray(v).tolist()} for k, v in values.items()}


def _decode(values: dict[str, Any]) -> dict[str, Any]:
    """`_encode`'s input back, each value as a numpy array (or scalar) of its stored dtype."""
    return {k: np.asarray(v["value"], dtype=v["dtype"])[()] for k, v in values.items()}


def _cell_base(variant: str, budget: Budget, data_dir: str, num_layers: int) -> TrainConfig:
    """The tiny byte-LM recipe (learning rate 3e-3) as `variant` with `num_layers` layers, corpus under the run."""
    steps = budget.steps
    config = apply_overrides(load_preset("llama_tiny"), [
        f"data.data_dir={data_dir}", f"optim.warmup_steps={max(1, steps // 10)}",
        f"log_every={max(1, steps // 25)}", f"model.num_layers={num_layers}",
        f"model.max_seq_len={max(budget.seq_len, 64)}",
    ])
    return dataclasses.replace(config, model=variant_config(config.model, variant))


def _cell_config(experiment: Experiment, config: TrainConfig, seed: int) -> TrainConfig:
    """The budgeted cell config; one checkpoint (at the end), since the measurements reopen only that one."""
    return experiment.cell_config(config, seed=seed, checkpoints=1)


def _row(experiment: Experiment, variant: str, seeds: Sequence[int], config: TrainConfig,
         prof: dict[str, Any], ablation: dict[str, Any], devices: list) -> dict[str, Any]:
    """One table row: seed-averaged eval bits per byte and profile, the seed-0 ablations."""
    bpb = [experiment.train_cell(f"{variant}_seed{s}", _cell_config(experiment, config, s),
                                 devices=devices)["eval/bits_per_byte"] for s in seeds]
    ratio = np.asarray(prof["ratio"])
    top = int(np.argmax(ratio[1:])) + 1
    params = parameter_count(config.model)
    return {
        "variant": variant, "params": params, "bpb": float(np.mean(bpb)), "max_ratio": float(ratio[top]),
        "ratio_layer": top, "spike_on_tok0": float(np.asarray(prof["spike_first"])[1:].mean()),
        "sink_mass": float(np.mean(prof["first_mass"])), "sink_rate": float(prof["sink_rate"]),
        "slot_mass": float(np.mean(prof["slot_mass"])),
        **{k: v for k, v in ablation.items() if k != "clamp_layer"},
    }


def _notes(budget: Budget, i0: int, eps: float, channels: int, n_rows: int) -> list[str]:
    return [
        f"Measured on {n_rows} held-out single-document rows of {budget.seq_len} bytes; bpb = eval bits per byte "
        f"(mean over seeds {budget.seeds}).",
        "max_ratio = the largest max|h| / median|h| over the residual streams after each block (ratio_layer = "
        "which stream); spike_on_tok0 = fraction of (stream, row) whose largest |h| sits on token 0.",
        f"sink_mass = attention on token 0 from queries i >= {i0}, mean over layers and heads; sink_rate = fraction "
        f"of heads above {eps}; slot_mass = weight on the explicit sink slot (sink variant only).",
        f"clamp_* (I1, seed 0): zero the {channels} largest channels of each row's spike token after the block "
        "with the largest ratio; first-token mass of the later layers before / after, and the loss change.",
        "remove_* (I2, seed 0): mask token 0 as a key in every head; largest ratio of streams 1..L before / after.",
    ]
