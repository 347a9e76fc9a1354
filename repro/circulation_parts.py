"""Pieces of the circulation reproduction (`icml26zoo.repro.circulation`): the fixed measurement batch, the
per-layer stability measures of every saved checkpoint, and the two summary figures."""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.diagnostics.capture import capture_forward, unrolled
from icml26zoo.mixers.circulation import STABILITY_SUMMARIES
from icml26zoo.train import data as data_lib
from icml26zoo.train.checkpoint import Checkpointer
from icml26zoo.train.config import DataConfig, TrainConfig
from icml26zoo.train.runs import build_run, restore

# Every per-layer measure recorded through training (CirculationAttention.stability's summaries).
MEASURES = STABILITY_SUMMARIES
# The measures the figure plots, with their axis labels.
PLOTTED = (("energy_mean", "energy E (mean over channels)"), ("instability_mean", "instability fraction r"),
           ("alignment_mean", "alignment cos(s, h)"), ("eta_m", "η_M (sym vs skew balance)"))


def fixed_rows(data: DataConfig, rows: int, seq_len: int) -> np.ndarray:
    """The measurement batch: the first `rows` held-out rows that hold one document with no padding,
    tokens int32 [rows, seq_len] (the measures center over a row, so a row must be one sequence)."""
    data_lib.prepare(data)
    picked: list[np.ndarray] = []
    for batch in data_lib.make_eval_iterator(data, batch_size=8, seq_len=seq_len):
        whole = (batch["segment_ids"] == batch["segment_ids"][:, :1]).all(1) & (batch["weights"] > 0).all(1)
        picked.extend(batch["inputs"][whole])
        if len(picked) >= rows:
            return np.stack(picked[:rows]).astype(np.int32)
    raise ValueError(f"measure_rows: the eval split has only {len(picked)} unpacked rows of {seq_len} bytes, "
                     f"asked for {rows}")


@functools.partial(jax.jit, static_argnums=0)
def _model_measures(graphdef: Any, params: Any, tokens: jax.Array) -> list[dict[str, jax.Array]]:
    """Per layer, `CirculationAttention.stability` on the mixer input the layer sees for tokens [B, T], for the
    model `graphdef` with `params`. Keyed by the (hashable) graphdef, so the checkpoints of a cell (one graphdef)
    reuse one compiled program."""
    model = unrolled(nnx.merge(graphdef, params))
    mixer_in = capture_forward(model, tokens, materialize_attention=False)["mixer_in"]  # [L, B, T, D]
    return [layer.mixer.stability(mixer_in[i]) for i, layer in enumerate(model.layers)]


def measure_checkpoints(cell_dir: pathlib.Path, config: TrainConfig, tokens: np.ndarray, *,
                        devices: list | None = None) -> tuple[list[int], list[dict[str, list[float]]]]:
    """The measures of every layer at the initialization (step 0: the trainer's own initial state for the
    seed) and at each saved checkpoint: (steps, per layer {measure: [value per step]}), on `devices`
    (default: all, as the trainer).

    One `build_run` serves as the initial state and as the template of every restore (what `load_run` does
    per call, which would rebuild and recompile the run once per checkpoint)."""
    run, fresh = build_run(config, devices)
    abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), fresh,
                            run.state_shardings)
    tokens = jax.numpy.asarray(tokens)
    layers: list[dict[str, list[float]]] = []

    def record(params: Any) -> None:
        per_layer = jax.device_get(_model_measures(run.graphdef, params, tokens))
        layers.extend({name: [] for name in MEASURES} for _ in range(len(per_layer) - len(layers)))
        for values, measures in zip(layers, per_layer, strict=True):
            for name in MEASURES:
                values[name].append(float(measures[name]))

    record(fresh.params)
    with Checkpointer(cell_dir / "checkpoints", read_only=True) as checkpointer:
        saved = sorted(checkpointer.all_steps())
        for step in saved:
            record(restore(checkpointer, abstract, step, cell_dir).params)
    return [0, *saved], layers


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population std of `values` (std 0 for one value)."""
    array = np.asarray(values, np.float64)
    return float(array.mean()), float(array.std())


def _setting_label(alpha: float, beta: float) -> str:
    return "α=1 (baseline)" if alpha == 1.0 else f"α={alpha:g}, β={beta:g}"


def measures_figure(trained: dict[tuple[float, float], list[dict[str, Any]]]) -> Figure:
    """A grid of the plotted measures (rows) per layer (columns) vs training step, a line per (α, β),
    averaged over seeds."""
    num_layers = len(next(iter(trained.values()))[0]["layers"])
    figure = Figure(figsize=(4.0 * num_layers + 1.0, 2.4 * len(PLOTTED)), layout="constrained")
    grid = figure.subplots(len(PLOTTED), num_layers, squeeze=False, sharex=True)
    for (alpha, beta), cells in trained.items():
        steps = cells[0]["steps"]
        for row, (measure, label) in enumerate(PLOTTED):
            for layer in range(num_layers):
                values = np.mean([c["layers"][layer][measure] for c in cells], axis=0)
                grid[row, layer].plot(steps, values, marker="o", markersize=3, label=_setting_label(alpha, beta))
                grid[row, layer].set_ylabel(label if layer == 0 else "", fontsize=8)
    for layer in range(num_layers):
        grid[0, layer].set_title(f"layer {layer}")
        grid[-1, layer].set_xlabel("training step")
    for axes in grid.flat:
        axes.grid(True, alpha=0.3)
        axes.tick_params(labelsize=7)
    grid[0, -1].legend(fontsize=7)
    figure.suptitle("Stability measures through training (mean over seeds)")
    return figure


def loss_figure(alphas: Sequence[float], betas: Sequence[float],
                trained: dict[tuple[float, float], list[dict[str, Any]]]) -> Figure:
    """Final eval bits per byte vs α, a line per β (mean ± std over seeds); α = 1 is the shared baseline."""
    figure = Figure(figsize=(6.0, 4.0), layout="constrained")
    axes = figure.add_subplot()
    for beta in betas:
        stats = [mean_std([c["bits_per_byte"] for c in trained[(1.0, 1.0) if a == 1.0 else (a, beta)]])
                 for a in alphas]
        axes.errorbar(list(alphas), [m for m, _ in stats], yerr=[s for _, s in stats], marker="o", capsize=3,
                      label=f"β={beta:g}")
    axes.set(xlabel="circulation knob α", ylabel="final eval bits per byte",
             title="Final loss vs α and β (mean ± std over seeds)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure
