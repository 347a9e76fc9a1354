"""Reproduction: ProtoT, the Prototype Transformer (Yordanov et al., arXiv 2602.11852, ICML 2026).

Claim: a language model whose attention is replaced by linear-cost mixing through learned prototypes (each
a communication channel aggregating context at several time scales) is competitive with Llama, Mamba and
DeltaNet, and its prototypes capture nameable concepts that can be edited to steer generation.

This run, at toy scale on the built-in byte corpus (`pystdlib`):
  1. trains ProtoT and the compared mixers (Llama = "attention", Mamba2, Gated DeltaNet), 2 layers of
     width 64, the baselines' SwiGLU widths matched to ProtoT's total parameter count, once per seed;
     reports eval bits per byte and the training-loss curves;
  2. reads out the trained ProtoT (seed 0): per prototype, its usage (mean write weight, share of tokens it
     wins, mean read weight) and the bytes that write to it most, on the first eval rows;
  3. edits one prototype (by default the most used one of the last layer) and shows greedy generations
     before and after: its read weights silenced ("suppress") and multiplied ("amplify").

The mixer is a RECONSTRUCTION (zoo/mixers/protot.py): the paper's method section and code were not
available. See docs/papers/protot.md.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.repro.common import Budget, Experiment, Results, check_mixers, line_figure, parameter_count
from icml26zoo.repro.protot_parts import (
    LABELS,
    PRESETS,
    edit_generations,
    match_mlp_dims,
    prototype_rows,
    show_bytes,
    usage_figure,
)
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig, apply_overrides, load_preset
from icml26zoo.train.data.pipeline import make_eval_iterator
from icml26zoo.validation import check_int

__all__ = ["FULL", "MIXERS", "QUICK", "run"]

MIXERS = tuple(PRESETS)
QUICK = Budget(steps=16, batch_size=4, seq_len=64, seeds=(0,))
FULL = Budget(steps=200, batch_size=8, seq_len=128, seeds=(0,))
COLUMNS = ("mixer", "mlp_dim", "params", "param_gap", "bits_per_byte", "bpb_per_seed", "final_train_loss")


def run(
    run_dir: str | os.PathLike,
    *,
    budget: Budget = FULL,
    mixers: Sequence[str] = MIXERS,
    eval_batches: int = 8,
    analysis_rows: int = 8,
    top_k: int = 16,
    edit_layer: int | None = None,
    edit_prototype: int | None = None,
    amplify: float = 4.0,
    prompt: str = "    def __init__(self",
    new_tokens: int = 48,
    resume: bool = False,
) -> Results:
    """Trains the parameter-matched mixers, reads out and edits the trained ProtoT; writes results.md/json.

    Args:
      run_dir: the run directory (cells, tables, figures; the byte corpus is built under it).
      budget: steps, batch size, sequence length and seeds of every cell.
      mixers: which of MIXERS to train; must include "protot" (the read-out and edits need it).
      eval_batches: eval-split batches behind each cell's bits per byte (>= 1).
      analysis_rows: eval rows (of budget.seq_len bytes) the prototype read-out runs on (>= 1).
      top_k: strongest writers per prototype in the table (1 .. real tokens in the analysis rows).
      edit_layer: the ProtoT layer to edit; None = the last one.
      edit_prototype: the base prototype to edit; None = the most used one of that layer.
      amplify: strength of the "amplify" edit: the prototype's read weights × (1 + amplify), > 0.
      prompt: the generations' prompt (non-empty; its UTF-8 bytes plus new_tokens must fit 256 positions).
      new_tokens: bytes generated greedily per variant (>= 1).
      resume: continue in an existing run_dir (FileNotFoundError if it does not exist).
    """
    mixers = check_mixers("mixers", mixers, MIXERS)
    if "protot" not in mixers:
        raise ValueError(f"mixers must include 'protot' (the prototype read-out and edits need it), got {list(mixers)}")
    for name, value in (("eval_batches", eval_batches), ("analysis_rows", analysis_rows), ("top_k", top_k),
                        ("new_tokens", new_tokens)):
        check_int(name, value)
    protot_cfg = load_preset(PRESETS["protot"]).model
    if edit_layer is not None:
        _check_index("edit_layer", edit_layer, protot_cfg.num_layers)
    if edit_prototype is not None:
        _check_index("edit_prototype", edit_prototype, dict(protot_cfg.mixer_options)["num_prototypes"])
    if isinstance(amplify, bool) or not isinstance(amplify, int | float) or not 0 < amplify < np.inf:
        raise ValueError(f"amplify must be a finite number > 0 (read weights x (1 + amplify)), got {amplify!r}")
    if not isinstance(prompt, str) or not prompt or len(prompt.encode()) + new_tokens > protot_cfg.max_seq_len:
        raise ValueError(f"prompt must be a non-empty str whose UTF-8 bytes plus new_tokens ({new_tokens}) fit "
                         f"{protot_cfg.max_seq_len} positions, got {prompt!r}")
    if top_k > analysis_rows * budget.seq_len:
        raise ValueError(f"top_k must be at most analysis_rows x seq_len = {analysis_rows * budget.seq_len}, "
                         f"got {top_k}")

    configs = _configs(mixers)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    data_dir = str(experiment.run_dir / "data")
    summaries, counts = {}, {}
    for mixer in mixers:
        base = _cell_base(configs[mixer], budget, data_dir, eval_batches)
        counts[mixer] = parameter_count(base.model)
        for seed in budget.seeds:
            cell = f"{mixer}_seed{seed}"
            # A short cell saves only at its end (each save costs about a second); a longer one also halfway.
            config = experiment.cell_config(base, seed=seed, checkpoints=2 if budget.steps >= 100 else 1)
            # One device: the tiny models gain nothing from more, and a batch need not divide their count.
            summaries[cell] = experiment.train_cell(cell, config, devices=jax.devices()[:1])

    rows = _comparison_rows(experiment, mixers, configs, counts, summaries)
    _, model, _ = load_run(experiment.cell_dir(f"protot_seed{budget.seeds[0]}"), devices=jax.devices()[:1])
    batch = next(make_eval_iterator(dataclasses.replace(configs["protot"].data, data_dir=data_dir),
                                    batch_size=analysis_rows, seq_len=budget.seq_len, max_batches=1))
    real = int((batch["segment_ids"] != 0).sum())
    tokens, segment_ids = jnp.asarray(batch["inputs"]), jnp.asarray(batch["segment_ids"])
    proto_rows = prototype_rows(model, tokens, segment_ids, top_k=min(top_k, real))
    layer = protot_cfg.num_layers - 1 if edit_layer is None else edit_layer
    if edit_prototype is None:
        edit_prototype = max((r for r in proto_rows if r["layer"] == layer), key=lambda r: r["usage"])["prototype"]
    texts, effects = edit_generations(model, prompt, layer=layer, prototype=edit_prototype,
                             edits={"suppress": 1.0, "amplify": float(amplify)}, new_tokens=new_tokens)

    curves = {LABELS[m]: _mean_curve(experiment, m, budget.seeds) for m in mixers}
    figures = {
        "loss_curves": line_figure(curves, xlabel="step", ylabel="train loss (nats/byte), mean over seeds",
                                   title=f"Byte LM on pystdlib at ~{counts['protot']:,} parameters", markers=False),
        "prototype_usage": usage_figure(proto_rows, title=f"ProtoT prototypes (seed {budget.seeds[0]}, head 0)"),
    }
    notes = _notes(proto_rows, texts, effects, prompt, layer, edit_prototype, amplify, real)
    return experiment.write(
        rows, columns=COLUMNS, title="ProtoT vs Llama, Mamba2 and GDN at equal parameters (byte corpus)",
        notes=notes, figures=figures,
        extra={"prototypes": proto_rows, "generations": texts, "edit_effects": effects, "prompt": prompt,
               "edit_layer": layer, "edit_prototype": edit_prototype, "amplify": amplify},
    )


def _check_index(name: str, value: object, size: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        raise ValueError(f"{name} must be an integer in [0, {size}) or None, got {value!r}")


def _configs(mixers: Sequence[str]) -> dict[str, TrainConfig]:
    """The mixers' tiny presets, the baselines' MLP widths matched to ProtoT's parameter count."""
    presets = {m: load_preset(PRESETS[m]) for m in mixers}
    models = match_mlp_dims({m: c.model for m, c in presets.items()}, "protot")
    return {m: dataclasses.replace(c, model=models[m]) for m, c in presets.items()}


def _cell_base(config: TrainConfig, budget: Budget, data_dir: str, eval_batches: int) -> TrainConfig:
    """The cell's config before the budget: corpus under the run dir, warmup 10% of the steps, ~25 logs."""
    steps = budget.steps
    return apply_overrides(config, [
        f"data.data_dir={data_dir}", f"optim.warmup_steps={max(1, steps // 10)}",
        f"log_every={max(1, steps // 25)}", "eval_every=0", f"eval_batches={eval_batches}",
    ])


def _comparison_rows(experiment, mixers, configs, counts, summaries) -> list[dict]:
    rows = []
    for mixer in mixers:
        cells = [c for c in summaries if c.startswith(f"{mixer}_seed")]
        bpb = [float(summaries[c]["eval/bits_per_byte"]) for c in cells]
        final = [experiment.metrics(c, "train/loss")[1][-1] for c in cells]
        rows.append({
            "mixer": LABELS[mixer], "mlp_dim": configs[mixer].model.resolved_mlp_dim, "params": counts[mixer],
            "param_gap": f"{100 * (counts[mixer] / counts['protot'] - 1):+.2f}%",
            "bits_per_byte": float(np.mean(bpb)), "bpb_per_seed": ", ".join(f"{b:.4f}" for b in bpb),
            "final_train_loss": float(np.mean(final)),
        })
    return rows


def _mean_curve(experiment: Experiment, mixer: str, seeds: Sequence[int]) -> tuple[list[int], list[float]]:
    """Training loss averaged over the seeds at the steps every seed logged."""
    series = [dict(zip(*experiment.metrics(f"{mixer}_seed{s}", "train/loss"), strict=True)) for s in seeds]
    steps = sorted(set.intersection(*(set(s) for s in series)))
    return steps, [float(np.mean([s[step] for s in series])) for step in steps]


def _notes(proto_rows, texts, effects, prompt, layer, prototype, amplify, real) -> list[str]:
    """The prototype table and the edited generations, as markdown lines before the comparison table."""
    lines = [f"## Prototypes of the trained ProtoT (head 0, {real:,} eval bytes)", "",
             "usage = mean write weight; argmax = share of bytes it wins; read = mean read weight over its "
             "scales; top bytes = the strongest writers with counts; context = the strongest writer in [ ].", "",
             "| layer | prototype | usage | argmax | read | top bytes | context |", "|---|---|---|---|---|---|---|"]
    for r in proto_rows:
        lines.append(f"| {r['layer']} | {r['prototype']} | {r['usage']:.3f} | {r['argmax_share']:.3f} | "
                     f"{r['read_share']:.3f} | {r['top_bytes']} | {r['context']} |")
    lines += ["", f"## Editing prototype {prototype} of layer {layer} (greedy, {len(next(iter(texts.values())))} "
                  f"characters after `{show_bytes(prompt.encode())}`)", "",
              "mean TV = mean total-variation distance of the next-byte distribution from the unedited model's; "
              "argmax changed = share of positions whose most likely byte changes (both over the prompt and the "
              "unedited continuation).", "",
              "| edit | generation | differs from none | mean TV | argmax changed |", "|---|---|---|---|---|"]
    meaning = {"none": "none", "suppress": "suppress (reads x 0)", "amplify": f"amplify (reads x {1 + amplify:g})"}
    for name, text in texts.items():
        differs = "-" if name == "none" else str(text != texts["none"])
        effect = effects.get(name)
        shift = "- | -" if effect is None else f"{effect['mean_tv']:.4f} | {effect['argmax_changed']:.3f}"
        lines.append(f"| {meaning[name]} | `{show_bytes(text.encode())}` | {differs} | {shift} |")
    lines += ["", "## Equal-parameter comparison (eval bits per byte, mean over seeds)"]
    return lines
