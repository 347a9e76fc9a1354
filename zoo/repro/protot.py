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
  3. edits prototypes of the last layer, chosen before any edit is evaluated: the one the prompt's bytes
     write to most, and the one whose strongest writers are most often whitespace (a concept from the
     table). Each is edited by silencing its read weights ("suppress") and by multiplying them ("amplify");
     reported: greedy generations from the prompt, whether they change, and on the held-out table bytes the
     mean total variation of the next-byte distribution, the share of changed argmax bytes and the
     predicted probability of whitespace.

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

from icml26zoo.mixers import protot_hooks as hooks
from icml26zoo.repro.common import Budget, Experiment, Results, check_mixers, line_figure, parameter_count
from icml26zoo.repro.protot_parts import (
    LABELS,
    PRESETS,
    WHITESPACE,
    class_share,
    concept_prototype,
    edit_effects,
    match_mlp_dims,
    prompt_usage,
    prototype_edit,
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
FULL = Budget(steps=1000, batch_size=8, seq_len=128, seeds=(0,))
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
      edit_prototype: the base prototype to edit; None = two chosen by rule: the one the prompt's bytes write
        to most in that layer, and the one whose strongest writers are most often whitespace.
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
    summaries, counts = train_cells(experiment, configs, eval_batches)
    rows = _comparison_rows(experiment, mixers, configs, counts, summaries)
    _, model, _ = load_run(experiment.cell_dir(f"protot_seed{budget.seeds[0]}"), devices=jax.devices()[:1])
    batch = next(make_eval_iterator(dataclasses.replace(configs["protot"].data, data_dir=data_dir),
                                    batch_size=analysis_rows, seq_len=budget.seq_len, max_batches=1))
    real = int((batch["segment_ids"] != 0).sum())
    tokens, segment_ids = jnp.asarray(batch["inputs"]), jnp.asarray(batch["segment_ids"])
    proto_rows = prototype_rows(model, tokens, segment_ids, top_k=min(top_k, real))
    layer = protot_cfg.num_layers - 1 if edit_layer is None else edit_layer
    targets = _edit_targets(model, proto_rows, prompt, layer, edit_prototype)
    mixer = hooks.layer_mixer(model, layer)
    edits = {f"{rule} {kind}": (layer, prototype_edit(mixer, prototype, kind, strength))
             for rule, prototype in targets.items()
             for kind, strength in (("suppress", 1.0), ("amplify", float(amplify)))}
    texts, effects = edit_effects(model, prompt, edits, new_tokens=new_tokens, tokens=tokens,
                                  segment_ids=segment_ids)
    text_share = class_share(np.asarray(tokens)[np.asarray(segment_ids) != 0], WHITESPACE)

    curves = {LABELS[m]: _mean_curve(experiment, m, budget.seeds) for m in mixers}
    figures = {
        "loss_curves": line_figure(curves, xlabel="step", ylabel="train loss (nats/byte), mean over seeds",
                                   title=f"Byte LM on pystdlib at ~{counts['protot']:,} parameters", markers=False),
        "prototype_usage": usage_figure(proto_rows, title=f"ProtoT prototypes (seed {budget.seeds[0]}, head 0)"),
    }
    notes = _notes(proto_rows, real) + _edit_notes(texts, effects, targets, prompt, layer, amplify, text_share)
    return experiment.write(
        rows, columns=COLUMNS, title="ProtoT vs Llama, Mamba2 and GDN at equal parameters (byte corpus)",
        notes=notes, figures=figures,
        extra={"prototypes": proto_rows, "generations": texts, "edit_effects": effects, "prompt": prompt,
               "edit_layer": layer, "edit_targets": targets, "amplify": amplify,
               "held_out_whitespace_share": text_share},
    )


def train_cells(experiment: Experiment, configs: dict[str, TrainConfig], eval_batches: int) -> tuple[dict, dict]:
    """Trains (or reads back) every (mixer, seed) cell of `configs`; returns ({cell: summary}, {mixer: params}).

    Separate from `run` so cells of different mixers can be trained by separate processes into one run
    directory (each cell is its own workdir) and then reported together with `run(..., resume=True)`.
    """
    budget, data_dir = experiment.budget, str(experiment.run_dir / "data")
    summaries, counts = {}, {}
    for mixer, mixer_config in configs.items():
        base = _cell_base(mixer_config, budget, data_dir, eval_batches)
        counts[mixer] = parameter_count(base.model)
        for seed in budget.seeds:
            cell = f"{mixer}_seed{seed}"
            # A short cell saves only at its end (each save costs about a second); a longer one also halfway.
            config = experiment.cell_config(base, seed=seed, checkpoints=2 if budget.steps >= 100 else 1)
            # One device: the tiny models gain nothing from more, and a batch need not divide their count.
            summaries[cell] = experiment.train_cell(cell, config, devices=jax.devices()[:1])
    return summaries, counts


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


def _edit_targets(model, proto_rows, prompt, layer, edit_prototype) -> dict[str, int]:
    """{rule: base prototype} of the edits: the one given, or the two chosen without looking at any edit's
    effect: the prototype the prompt's bytes write to most ("prompt") and the one whose strongest writers are
    most often whitespace ("whitespace")."""
    if edit_prototype is not None:
        return {"given": edit_prototype}
    return {"prompt": int(np.argmax(prompt_usage(model, prompt, layer))),
            "whitespace": concept_prototype(proto_rows, layer)}


def _notes(proto_rows, real) -> list[str]:
    """The prototype table as markdown lines."""
    lines = [f"## Prototypes of the trained ProtoT (head 0, {real:,} eval bytes)", "",
             "usage = mean write weight; argmax = share of bytes it wins; read = mean read weight over its "
             "scales; top bytes = the strongest writers with counts (ws = share of them that are whitespace); "
             "context = the strongest writer in [ ].", "",
             "| layer | prototype | usage | argmax | read | top bytes | ws | context |",
             "|---|---|---|---|---|---|---|---|"]
    for r in proto_rows:
        lines.append(f"| {r['layer']} | {r['prototype']} | {r['usage']:.3f} | {r['argmax_share']:.3f} | "
                     f"{r['read_share']:.3f} | {r['top_bytes']} | {r['whitespace_share']:.2f} | {r['context']} |")
    return lines


def _edit_notes(texts, effects, targets, prompt, layer, amplify, text_share) -> list[str]:
    """The edited generations and their measured effects as markdown lines, before the comparison table."""
    chosen = ", ".join(f"{rule}: prototype {prototype}" for rule, prototype in targets.items())
    lines = ["", f"## Editing layer {layer} ({chosen}; greedy, {len(texts['none'])} characters after "
                 f"`{show_bytes(prompt.encode())}`)", "",
             "ws gen = share of whitespace (space, newline, tab) in the generation; mean TV = mean total-variation "
             "distance of the next-byte distribution from the unedited model's and argmax changed = share of "
             "positions whose most likely byte changes, both over the held-out bytes of the prototype table; "
             f"ws mass = mean predicted probability of whitespace there (whitespace is {text_share:.3f} of those "
             "bytes).", "",
             "| edit | generation | differs from none | ws gen | mean TV | argmax changed | ws mass |",
             "|---|---|---|---|---|---|---|"]
    for name, text in texts.items():
        effect = effects[name]
        differs = "-" if name == "none" else str(text != texts["none"])
        shift = "- | -" if name == "none" else f"{effect['mean_tv']:.4f} | {effect['argmax_changed']:.3f}"
        label = name.replace("suppress", "suppress (reads x 0)")
        label = label.replace("amplify", f"amplify (reads x {1 + amplify:g})")
        lines.append(f"| {label} | `{show_bytes(text.encode())}` | {differs} | {effect['generation_share']:.3f} | "
                     f"{shift} | {effect['class_mass']:.4f} |")
    lines += ["", "## Equal-parameter comparison (eval bits per byte, mean over seeds)"]
    return lines
