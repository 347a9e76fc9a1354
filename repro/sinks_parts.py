"""Pieces of the massive-activation / attention-sink reproduction (repro/sinks.py): the architecture variants,
the per-layer measurements, the two ablations and the figures.

Paper: Sun, Canziani, LeCun, Zhu, "The Spike, the Sparse and the Sink" (arXiv 2603.05498); the statistics and
interventions are the zoo's diagnostics (`icml26zoo.diagnostics`, the design notes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.diagnostics import attention_sinks, capture_forward, sink_removal, slot_mass, spike_clamp
from icml26zoo.diagnostics.capture import next_token_loss
from icml26zoo.models.config import ModelConfig

__all__ = ["LABELS", "VARIANTS", "ablations", "ablation_figure", "document_rows", "profile", "profile_figure",
           "variant_config"]

# Each variant: the ModelConfig fields it changes from the pre-norm RMSNorm / SwiGLU / plain-softmax baseline.
VARIANTS: dict[str, dict[str, Any]] = {
    "pre": {},
    "post": {"norm_placement": "post"},
    "sandwich": {"norm_placement": "sandwich"},
    "none": {"norm_placement": "none"},
    "dyt": {"norm": "dyt"},
    "gelu": {"mlp_activation": "gelu"},
    "sink": {"mixer_options": (("sink", "learnable"),)},
    "plus_one": {"mixer_options": (("sink", "plus_one"),)},
    "gate": {"mixer_options": (("output_gate", "channel"),)},
}
LABELS = {
    "pre": "pre-norm", "post": "post-norm", "sandwich": "sandwich", "none": "no norm", "dyt": "pre-norm DyT",
    "gelu": "pre-norm GELU MLP", "sink": "pre-norm + learnable sink", "plus_one": "pre-norm + softmax+1",
    "gate": "pre-norm + output gate",
}


def variant_config(base: ModelConfig, variant: str) -> ModelConfig:
    """`base` (pre-norm attention) with the fields of VARIANTS[variant] replaced."""
    return dataclasses.replace(base, **VARIANTS[variant])


def document_rows(batch: Mapping[str, np.ndarray], rows: int) -> np.ndarray:
    """Token rows [b, T] (b <= rows) of an eval batch whose T tokens all belong to one document piece.

    The corpus has no BOS token: a row's first token is where its document starts (position 0), the token
    a sink forms on; a row that mixes documents would restart positions mid-row.
    """
    ids = np.asarray(batch["segment_ids"])
    keep = np.flatnonzero((ids == ids[:, :1]).all(axis=1) & (ids[:, 0] > 0))[:rows]
    if not len(keep):
        raise ValueError("no eval row holds a single document over its whole length; raise eval_rows")
    return np.asarray(batch["inputs"])[keep].astype(np.int32)


def _stream_stats(hidden: np.ndarray) -> dict[str, np.ndarray]:
    """Per residual stream h^l [L+1, B, T, D]: max|h| / median|h| and where the max sits (row, token)."""
    mag = np.abs(np.asarray(hidden, np.float32))
    n_streams, batch, length, _ = mag.shape
    flat = mag.reshape(n_streams, -1)
    ratio = flat.max(axis=1) / np.maximum(np.median(flat, axis=1), np.finfo(np.float32).tiny)
    token_max = mag.max(axis=3)  # [L+1, B, T]
    spike_pos = token_max.argmax(axis=2)  # [L+1, B] per row, the token holding its largest entry
    return {"ratio": ratio, "spike_pos": spike_pos}


def profile(model: nnx.Module, tokens: np.ndarray, *, i0: int, eps: float) -> dict[str, Any]:
    """Per-layer massive-activation and sink statistics of `model` on tokens [b, T] (one document per row).

    Returns loss (nats per byte on these rows), ratio [L+1] (max|h| / median|h| of each residual stream),
    spike_first [L+1] (fraction of rows whose largest |h| sits on token 0), first_mass [L] (mean over heads
    of a_h(0), the attention on token 0 from queries i >= i0), sink_rate (fraction of heads with a_h(0) > eps)
    and slot_mass [L] (mean weight on the mixer's explicit sink slot; zeros without one).
    """
    cap = capture_forward(model, jnp.asarray(tokens), materialize_attention=True)
    stats = _stream_stats(np.asarray(cap["hidden"]))
    sinks = attention_sinks(np.asarray(cap["probs"]), i0=i0, eps=eps)
    n_layers = sinks["first_token_mass"].shape[0]
    slot = (slot_mass(np.asarray(cap["sink_probs"]), i0=i0).mean(axis=1) if cap["sink_probs"] is not None
            else np.zeros(n_layers))
    return {"loss": next_token_loss(cap["logits"], cap["tokens"]), "ratio": stats["ratio"],
            "spike_first": (stats["spike_pos"] == 0).mean(axis=1), "first_mass": sinks["first_token_mass"].mean(1),
            "sink_rate": sinks["sink_rate"], "slot_mass": slot}


def _spike_entries(stream: np.ndarray, channels: int) -> list[tuple[int, int, int]]:
    """(row, token, channel) of the `channels` largest |h| of each row's spike token; stream [B, T, D]."""
    mag = np.abs(np.asarray(stream, np.float32))
    entries = []
    for row in range(mag.shape[0]):
        pos = int(mag[row].max(axis=1).argmax())
        entries += [(row, pos, int(c)) for c in np.argsort(-mag[row, pos], kind="stable")[:channels]]
    return entries


def ablations(model: nnx.Module, tokens: np.ndarray, *, i0: int, eps: float, channels: int) -> dict[str, Any]:
    """The two causal tests on tokens [b, T]:

    clamp (I1): at the block (not the last) whose output stream has the largest max/median ratio, zero the
      `channels` largest channels of each row's spike token; report the loss change and the first-token
      attention mass of the later layers before and after.
    remove (I2): add -inf to every head's logit on token 0 (queries after it); report the loss change and
      the largest max/median ratio of the later residual streams before and after.
    """
    tokens = jnp.asarray(tokens)
    cap = capture_forward(model, tokens, materialize_attention=False)
    hidden = np.asarray(cap["hidden"])
    n_layers = hidden.shape[0] - 1
    ratios = _stream_stats(hidden)["ratio"]
    layer = int(np.argmax(ratios[1:n_layers])) if n_layers > 1 else 0
    clamp = spike_clamp(model, tokens, layer=layer, entries=_spike_entries(hidden[layer + 1], channels),
                        mode="zero", i0=i0, eps=eps)
    later = slice(layer + 1, n_layers) if layer + 1 < n_layers else slice(0, n_layers)
    removed = sink_removal(model, tokens, i0=i0, eps=eps)
    return {
        "clamp_layer": layer,
        "clamp_dloss": clamp["delta_loss"],
        "clamp_mass_before": float(clamp["before"]["first_token_mass"][later].mean()),
        "clamp_mass_after": float(clamp["after"]["first_token_mass"][later].mean()),
        "remove_dloss": removed["delta_loss"],
        "remove_ratio_before": float(removed["before"]["max_ratio"][1:].max()),
        "remove_ratio_after": float(removed["after"]["max_ratio"][1:].max()),
    }


def profile_figure(profiles: Mapping[str, Mapping[str, np.ndarray]], *, title: str) -> Figure:
    """Two panels: max|h| / median|h| per residual stream (log scale) and first-token attention per layer.

    profiles: label -> {"ratio": [L+1], "first_mass": [L]} (seed-averaged).
    """
    figure = Figure(figsize=(10.0, 4.0), layout="constrained")
    left, right = figure.subplots(1, 2)
    for label, prof in profiles.items():
        left.plot(np.arange(len(prof["ratio"])), prof["ratio"], marker="o", markersize=3, label=label)
        right.plot(np.arange(len(prof["first_mass"])), prof["first_mass"], marker="o", markersize=3, label=label)
    left.set(yscale="log", xlabel="residual stream h^l (0 = embedding)", ylabel="max|h| / median|h|",
             title="massive activations")
    right.set(xlabel="layer", ylabel="attention on token 0 (queries i >= i0)", ylim=(0, 1), title="attention sink")
    for axes in (left, right):
        axes.grid(True, alpha=0.3)
    right.legend(fontsize=7)
    figure.suptitle(title)
    return figure


def ablation_figure(rows: Sequence[Mapping[str, Any]], *, title: str) -> Figure:
    """Paired bars per variant: first-token mass before/after the spike clamp, ratio before/after sink removal."""
    figure = Figure(figsize=(10.0, 4.0), layout="constrained")
    left, right = figure.subplots(1, 2)
    names = [row["variant"] for row in rows]
    x = np.arange(len(rows))
    for axes, key, ylabel, log in ((left, "clamp_mass", "attention on token 0 (later layers)", False),
                                   (right, "remove_ratio", "max|h| / median|h| (later streams)", True)):
        axes.bar(x - 0.2, [row[f"{key}_before"] for row in rows], 0.4, label="before")
        axes.bar(x + 0.2, [row[f"{key}_after"] for row in rows], 0.4, label="after")
        axes.set(xticks=x, ylabel=ylabel, yscale="log" if log else "linear")
        axes.set_xticklabels(names, rotation=30, fontsize=8)
        axes.grid(True, axis="y", alpha=0.3)
        axes.legend(fontsize=8)
    left.set_title("I1: zero the spike channels")
    right.set_title("I2: mask token 0 as a key")
    figure.suptitle(title)
    return figure
