"""Loss curves from a run's metrics.jsonl, drawn to PNG at the end of a run.

Figures are built with matplotlib's object API (`Figure` + `savefig`), never through pyplot: no window
opens on a headless machine, and importing the trainer does not switch a notebook's backend away from
inline plots.

Keys read (as the train loop writes them): ``train/loss`` and ``eval/loss`` on the main panel,
``eval/bits_per_byte`` on a second panel when any record has them, and the train diagnostics the caller
names (`diagnostics`: those the objective lists in `plotted_metrics`, `train.step`) on a last panel. When a
resumed run logged a step twice, the later record wins, which is the resumed run's value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from icml26zoo.train.metrics import read_metrics
from icml26zoo.validation import is_integer, is_number

__all__ = ["BPB_KEYS", "LOSS_KEYS", "loss_figure", "plot_loss_curves"]

LOSS_KEYS = ("train/loss", "eval/loss")
BPB_KEYS = ("eval/bits_per_byte",)


def _series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """Steps and values of `key`, sorted by step, last record per step winning; NaN/inf dropped."""
    by_step: dict[int, float] = {}
    for record in records:
        value = record.get(key)
        if is_number(value):
            by_step[int(record["step"])] = float(value)
    steps = [s for s in sorted(by_step) if math.isfinite(by_step[s])]
    return steps, [by_step[s] for s in steps]


def _draw(ax: Axes, records: list[dict], keys: Sequence[str], ylabel: str) -> bool:
    """Train as a line, eval as a line with point markers (eval is sparse); returns whether anything drew."""
    drew = False
    for key in keys:
        steps, values = _series(records, key)
        if not steps:
            continue
        style = {"marker": "o", "markersize": 3} if key.startswith("eval/") else {"linewidth": 1.0}
        ax.plot(steps, values, label=key, **style)
        drew = True
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return drew


def _checked_baselines(baselines: Mapping[str, float] | None) -> dict[str, float]:
    if baselines is None:
        return {}
    if not isinstance(baselines, Mapping) or not all(isinstance(k, str) and is_number(v) for k, v in baselines.items()):
        raise ValueError(f"baselines must map names to numbers, got {baselines!r}")
    return {name: float(value) for name, value in baselines.items() if math.isfinite(value)}


def loss_figure(metrics_path: str | os.PathLike, *, title: str | None = None, markers: Sequence[int] = (),
                diagnostics: Sequence[str] = (), baselines: Mapping[str, float] | None = None) -> Figure:
    """The loss figure of `metrics_path`: loss against step, bits per byte on a second panel (if logged), the
    named train diagnostics on a last one.

    Args:
      metrics_path: a metrics.jsonl written by `train.metrics.JsonlWriter`.
      title: figure title.
      markers: steps to flag with dashed vertical lines (e.g. predicted loss spikes).
      diagnostics: metric names drawn on a last panel ("train diagnostics") when any record has them.
      baselines: label -> bits per byte, drawn as dotted horizontal lines on the bits-per-byte panel (e.g. the
        eval split's unigram entropy, the score of a model that learned only byte frequencies).
    """
    if not os.path.isfile(metrics_path):
        raise ValueError(f"metrics_path {os.fspath(metrics_path)!r} is not a file")
    markers = list(markers)
    if not all(is_integer(m) for m in markers):
        raise ValueError(f"markers must be integer steps, got {markers!r}")
    lines = _checked_baselines(baselines)
    records = read_metrics(metrics_path)
    if not any(_series(records, key)[0] for key in LOSS_KEYS):
        raise ValueError(f"metrics_path {os.fspath(metrics_path)!r} has no finite {' or '.join(LOSS_KEYS)}")

    panels: list[tuple[Sequence[str], str]] = [(LOSS_KEYS, "loss")]
    if any(_series(records, key)[0] for key in BPB_KEYS):
        panels.append((BPB_KEYS, "bits per byte"))
    if isinstance(diagnostics, str) or not all(isinstance(key, str) for key in diagnostics):
        raise ValueError(f"diagnostics must be a sequence of metric names, got {diagnostics!r}")
    drawn = tuple(key for key in diagnostics if _series(records, key)[0])
    if drawn:
        panels.append((drawn, "train diagnostics"))
    fig = Figure(figsize=(8, 4.5 if len(panels) == 1 else 2.0 + 2.25 * len(panels)))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)
    for ax, (keys, label) in zip(axes[:, 0], panels, strict=True):
        _draw(ax, records, keys, label)
        if keys == BPB_KEYS:
            for name, value in lines.items():
                ax.axhline(value, color="gray", linestyle=":", linewidth=1.0, label=name)
        for i, step in enumerate(markers):
            # One legend entry for all markers, not one per line.
            ax.axvline(step, color="red", linestyle="--", linewidth=0.8, alpha=0.7,
                       label="marker" if i == 0 else None)
        ax.legend(loc="upper right", fontsize="small")
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_loss_curves(metrics_path: str | os.PathLike, png_path: str | os.PathLike, *,
                     title: str | None = None, markers: Sequence[int] = (), diagnostics: Sequence[str] = (),
                     baselines: Mapping[str, float] | None = None) -> str:
    """Plots loss (and bits-per-byte, if logged) against step from `metrics_path` into `png_path`.

    Args:
      metrics_path: a metrics.jsonl written by `train.metrics.JsonlWriter`.
      png_path: output image; its directory is created if missing.
      title, markers, diagnostics, baselines: as for `loss_figure`.

    Returns:
      `png_path` as a string.
    """
    fig = loss_figure(metrics_path, title=title, markers=markers, diagnostics=diagnostics, baselines=baselines)
    png_path = os.fspath(png_path)
    os.makedirs(os.path.dirname(os.path.abspath(png_path)), exist_ok=True)
    fig.savefig(png_path, dpi=120)
    return png_path
