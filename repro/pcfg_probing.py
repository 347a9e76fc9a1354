"""PCFG next-token prediction and layer-wise probes of parse quantities ("How Transformers
Represent Hierarchies: A Local-to-Global Mechanism", ICML 2026), at the zoo's small scale.

One cell per seed trains the `pcfg_tiny` preset (a 2-layer Llama on the default random grammar, objective
`pcfg_lm`) under the budget, keeping `checkpoints` evenly spaced checkpoints. Then, per seed:

  KL curve   mean KL(P_grammar(· | prefix) ‖ P_model(· | prefix)) over the validation split at step 0 and at
             every checkpoint, from the objective's kl_sum / kl_weight (the trainer's summary reports only
             eval/loss and eval/accuracy), next to the grammar's mean next-token entropy
  probes     every layer's hidden states of the trained model and of its untrained initialization (the
             random-feature baseline) on `probe_sentences` validation sentences, probed (zoo/probing.py:
             ridge and MLP, 25% of the sentences held out with all their tokens) for the parse-tree facts
             stored with the rows (depth of the word, constituent boundary: accuracy) and the exact quantities
             of zoo/pcfg (next-token distribution, open-constituent state, expected completed constituents: R²)

The table has one row per (model, target, probe) and one column per layer, each the mean over seeds, and the
seeds' spread (max - min) at the layer where it is largest; results.json keeps every seed's rows and curve. A seed
changes the model's initialization, the data order and the probes' sentence split.

    python -m icml26zoo.repro pcfg_probing [--smoke | --quick] --out DIR [probe_sentences=512] [checkpoints=8]
                                           [targets=depth,boundary,next_token,open_state,constituents_ending]
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo import probing
from icml26zoo.configs import load_preset
from icml26zoo.pcfg.exact import probe_targets
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure, spread
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train import data as data_lib
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.config_checks import configured_objective
from icml26zoo.train.data import pcfg
from icml26zoo.train.data.generated import split_seed
from icml26zoo.train.data.tasks import make_config
from icml26zoo.train.runs import build_train_model, load_run
from icml26zoo.validation import check_int

CELL = "pcfg_tiny"
SEQ_LEN = pcfg.PCFGOptions().max_length + 1
QUICK = Budget(steps=60, batch_size=16, seq_len=SEQ_LEN)
FULL = Budget(steps=400, batch_size=32, seq_len=SEQ_LEN, seeds=(0, 1, 2))
QUICK_ARGS = {"probe_sentences": 96, "checkpoints": 3}
# Every stage at the smallest size: 2 steps of 8 rows (fewer rows only add batches to the trainer's final eval of
# the whole validation split), one checkpoint on the KL curve, probes on 8 sentences of one classification and one
# regression target (each target's probes compile their own programs).
SMOKE = Budget(steps=2, batch_size=8, seq_len=SEQ_LEN)
SMOKE_ARGS = {"probe_sentences": 8, "checkpoints": 1, "targets": ("depth", "next_token")}
CLASSIFICATION_TARGETS = ("depth", "boundary")
REGRESSION_TARGETS = ("next_token", "open_state", "constituents_ending")
TARGETS = CLASSIFICATION_TARGETS + REGRESSION_TARGETS
# The KL curve reads the validation split in batches of at least this many rows (the FULL budget's batch size:
# a small budget's batches would only add dispatches; padding rows weigh 0).
KL_BATCH = 32
# Deeper words share the last depth class (a handful of tokens).
MAX_DEPTH_CLASS = 8


def cell_name(seed: int) -> str:
    return f"{CELL}_seed{seed}"


def cell_config(experiment: Experiment, checkpoints: int, seed: int = 0) -> TrainConfig:
    """The pcfg_tiny preset under the budget at `seed`, its data under the run directory, every checkpoint kept
    (the grammar and its splits do not depend on the seed: every seed sees the same validation sentences)."""
    preset = load_preset("pcfg_tiny")
    data = dataclasses.replace(preset.data, data_dir=str(experiment.run_dir / "tfds"))
    config = experiment.cell_config(dataclasses.replace(preset, data=data), seed=seed, checkpoints=checkpoints)
    return dataclasses.replace(config, keep_checkpoints=len(checkpoint_steps(config)), eval_every=0)


def checkpoint_steps(config: TrainConfig) -> list[int]:
    """The steps the trainer saves: every checkpoint_every steps and the last one."""
    return sorted(set(range(config.checkpoint_every, config.num_steps + 1, config.checkpoint_every))
                  | {config.num_steps})


def mean_kl(config: TrainConfig, model: nnx.Module, metrics_of=None) -> tuple[float, float]:
    """(mean KL(grammar ‖ model), mean grammar entropy) per predicted token of the whole validation split, read
    in batches of at least KL_BATCH rows. `metrics_of` (from `kl_metrics`) may be passed to reuse one compiled
    program for models of one config."""
    metrics_of = kl_metrics(config, model) if metrics_of is None else metrics_of
    state = nnx.state(model)
    totals = {"kl_sum": 0.0, "kl_weight": 0.0, "entropy_sum": 0.0}
    for batch in data_lib.make_eval_iterator(config.data, batch_size=max(config.batch_size, KL_BATCH),
                                             seq_len=config.seq_len, process_count=1, process_index=0):
        metrics = jax.device_get(metrics_of(state, batch))
        for name in totals:
            totals[name] += float(metrics[name])
    return totals["kl_sum"] / totals["kl_weight"], totals["entropy_sum"] / totals["kl_weight"]


def kl_metrics(config: TrainConfig, model: nnx.Module):
    """The objective's metrics of (model state, batch), jitted once for every model shaped like `model`."""
    objective = configured_objective(config)
    graphdef = nnx.graphdef(model)
    return jax.jit(lambda state, batch: objective(nnx.merge(graphdef, state), batch, jax.random.key(0))[1])


def probe_data(config: TrainConfig, sentences: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(model inputs: tokens [S, T], segment_ids [S, T], mask [S, T]; targets per probed token, in mask order).

    The first `sentences` validation sentences (the builder's own generator and seed); a sentence of n
    words is probed at its n + 1 input positions (<bos> and every word).
    """
    options = pcfg.PCFGDataset().options(config.data)
    rows = pcfg.sample_rows(options, sentences, split_seed(make_config(options), "validation"))
    grammar = pcfg.grammar_of(options)
    length = config.seq_len
    mask = np.arange(length)[None, :] <= rows["lengths"][:, None]
    targets: dict[str, list[np.ndarray]] = {name: [] for name in CLASSIFICATION_TARGETS + REGRESSION_TARGETS}
    for index, n in enumerate(rows["lengths"]):
        targets["depth"].append(np.minimum(rows["depth"][index, : n + 1], MAX_DEPTH_CLASS))
        targets["boundary"].append(rows["boundary"][index, : n + 1])
        exact = probe_targets(grammar, rows["tokens"][index, 1 : n + 1] - pcfg.FIRST_TERMINAL)
        for name in REGRESSION_TARGETS:
            targets[name].append(exact[name])
    inputs = {"tokens": rows["tokens"][:, :length], "segment_ids": mask.astype(np.int32), "mask": mask}
    return inputs, {name: np.concatenate(values) for name, values in targets.items()}


def token_sentences(mask: np.ndarray) -> np.ndarray:
    """int [N]: the sentence (row of mask [S, T]) of every probed token, in mask order (row-major)."""
    return np.nonzero(np.asarray(mask, bool))[0]


def probe_rows(model: nnx.Module, label: str, inputs: dict[str, np.ndarray], targets: dict[str, np.ndarray],
               seed: int) -> list[dict]:
    """One table row per (target, probe) with the held-out score of every layer of `model`; whole sentences
    are held out (no sentence has tokens on both sides of the split)."""
    features = probing.layer_features(model, jnp.asarray(inputs["tokens"]),
                                      segment_ids=jnp.asarray(inputs["segment_ids"]), mask=inputs["mask"])
    sentences = token_sentences(inputs["mask"])
    rows = []
    for name, values in targets.items():
        task = "classification" if name in CLASSIFICATION_TARGETS else "regression"
        scores = probing.probe_layers(features, values, task=task, seed=seed, groups=sentences)
        for probe in ("linear", "mlp"):
            row = {"model": label, "target": name, "metric": scores[0].metric, "probe": probe}
            row.update({f"layer {s.layer}": round(getattr(s, probe), 4) for s in scores})
            rows.append(row)
    return rows


@register_experiment("pcfg_probing", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/pcfg_probing.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, probe_sentences: int = 512, checkpoints: int = 8,
        targets: Sequence[str] = TARGETS, resume: bool = False) -> Results:
    """Trains the cell, measures the KL curve and probes every layer; writes results.md/json and two PNGs.

    Args:
      run_dir: the experiment's directory (the cell, the grammar's dataset, results.md/json, kl_curve.png,
        probes.png).
      budget: steps, batch size and seeds (a cell per seed); budget.seq_len must be >= 25 (a sentence per row).
      probe_sentences: validation sentences whose tokens are probed (>= 8).
      checkpoints: evenly spaced checkpoints on the KL curve (>= 1; the last one is the final step).
      targets: the probed quantities, from TARGETS (each probe kind compiles its own program).
      resume: require run_dir to exist; a finished cell, its KL curve and its probes are reused either way.
    """
    check_int("probe_sentences", probe_sentences, minimum=8)
    check_int("checkpoints", checkpoints)
    targets = check_names("targets", targets, TARGETS)
    if budget.seq_len < SEQ_LEN:
        raise ValueError(f"budget.seq_len must be >= {SEQ_LEN} (<bos> and a sentence of up to {SEQ_LEN - 1} words "
                         f"per row), got {budget.seq_len}")
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    devices = jax.devices()[:1]  # one device: a tiny model, and batches need not divide a device count
    curves, seed_rows, losses = {}, {}, []
    for seed in budget.seeds:
        config = cell_config(experiment, checkpoints, seed)
        summary = experiment.train_cell(cell_name(seed), config, devices=devices)
        losses.append(summary.get("eval/loss", math.nan))
        curves[seed], seed_rows[seed] = _analysis(experiment, config, probe_sentences, targets, devices)
    curve = mean_curve(list(curves.values()))
    rows = mean_rows(list(seed_rows.values()))
    layers = [key for key in rows[0] if key.startswith("layer ")]
    figures = {"kl_curve": kl_figure(curve), "probes": probe_figure(rows, layers)}
    finals = [points[-1][1] for points in curves.values()]
    notes = [f"Seeds {list(budget.seeds)}; every number is the mean over seeds.",
             "Mean KL(grammar ‖ model) per predicted token on the validation split: "
             + ", ".join(f"step {s}: {kl:.4f}" for s, kl, _ in curve)
             + f" (final KL per seed: {', '.join(f'{kl:.4f}' for kl in finals)}; grammar entropy {curve[-1][2]:.4f}"
             f" nats; final eval/loss {statistics.fmean(losses):.4f}).",
             f"Probes: {probe_sentences} validation sentences, 25% of them held out with all their tokens (a split "
             "per seed); accuracy for depth (classes 0..8) and boundary, R² for the exact quantities; layer 0 = "
             "embeddings. 'seed spread' = the largest max - min over seeds of any layer's score in the row."]
    extra = {"kl_curve": [{"step": s, "kl": kl, "entropy": h} for s, kl, h in curve],
             "per_seed": {str(seed): {"kl_curve": curves[seed], "rows": seed_rows[seed]} for seed in budget.seeds}}
    return experiment.write(rows, columns=("model", "target", "metric", "probe", *layers, "seed spread"),
                            title="PCFG next-token KL and layer-wise parse probes (pcfg_tiny)", notes=notes,
                            figures=figures, extra=extra)


def mean_curve(curves: Sequence[list[tuple[int, float, float]]]) -> list[tuple[int, float, float]]:
    """[(step, KL, entropy)] averaged over seeds' curves (the same steps in each)."""
    return [(points[0][0], statistics.fmean(p[1] for p in points), statistics.fmean(p[2] for p in points))
            for points in zip(*curves, strict=True)]


def mean_rows(per_seed: Sequence[list[dict]]) -> list[dict]:
    """Probe rows averaged over seeds (the same rows in the same order in each): each layer's mean, rounded to 4
    decimals, and 'seed spread', the largest max - min over seeds of any layer (None for one seed)."""
    rows = []
    for matched in zip(*per_seed, strict=True):
        row = {key: matched[0][key] for key in ("model", "target", "metric", "probe")}
        layers = [key for key in matched[0] if key.startswith("layer ")]
        row.update({layer: round(statistics.fmean(r[layer] for r in matched), 4) for layer in layers})
        widths = [spread([r[layer] for r in matched]) for layer in layers]
        row["seed spread"] = None if widths[0] is None else round(max(widths), 4)
        rows.append(row)
    return rows


def _analysis(experiment: Experiment, config: TrainConfig, probe_sentences: int, targets: Sequence[str],
              devices: list) -> tuple[list[tuple[int, float, float]], list[dict]]:
    """The KL curve [(step, KL, entropy)] and probe rows of config.seed's trained cell, stored in the cell
    (analysis.json, per probe setting) and read back on a rerun: the cell's checkpoints, and so both results, are
    fixed once trained."""
    cell = cell_name(config.seed)
    path = experiment.cell_dir(cell) / "analysis.json"
    # "split-sentence": probes hold out whole sentences (rows stored before, with a token split, are not reused).
    key = f"sentences{probe_sentences}_split-sentence_" + ",".join(targets)
    stored = json.loads(path.read_text()) if path.is_file() else {}
    if key in stored:
        return [tuple(point) for point in stored[key]["curve"]], stored[key]["rows"]
    initial = build_train_model(config)
    metrics_of = kl_metrics(config, initial)
    curve = [(0, *mean_kl(config, initial, metrics_of))]
    for step in checkpoint_steps(config):
        _, model, _ = load_run(experiment.cell_dir(cell), step, devices=devices)
        curve.append((step, *mean_kl(config, model, metrics_of)))
    inputs, values = probe_data(config, probe_sentences)
    values = {name: values[name] for name in targets}
    rows = probe_rows(model, "trained", inputs, values, config.seed)
    rows += probe_rows(initial, "untrained", inputs, values, config.seed)
    rows = json.loads(json.dumps(rows))  # plain floats, as a rerun reads them back
    path.write_text(json.dumps(stored | {key: {"curve": curve, "rows": rows}}, indent=1) + "\n")
    return curve, rows


def kl_figure(curve: list[tuple[int, float, float]]) -> Figure:
    steps = [s for s, _, _ in curve]
    return line_figure({"KL(grammar ‖ model)": (steps, [kl for _, kl, _ in curve])}, xlabel="training step",
                       ylabel="mean KL per token (nats)", title="pcfg_tiny: KL to the exact next-token distribution")


def probe_figure(rows: list[dict], layers: list[str]) -> Figure:
    series = {f"{row['target']} ({row['metric']})": (range(len(layers)), [row[layer] for layer in layers])
              for row in rows if row["model"] == "trained" and row["probe"] == "linear"}
    return line_figure(series, xlabel="layer (0 = embeddings)", ylabel="held-out accuracy / R²",
                       title="pcfg_tiny: linear probes per layer")
