"""Massive-activation and attention-sink diagnostics for any registered decoder LM.

Paper: Sun, Canziani, LeCun, Zhu, "The Spike, the Sparse and the Sink" (ICML 2026, arXiv 2603.05498).

`diagnose(model, tokens)` captures every layer (`capture.capture_forward`, which never changes the model)
and returns the D1-D6 statistics of `stats`; `interventions` holds the causal tests I1-I4.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx

from icml26zoo.diagnostics.capture import Hooks, capture_forward, next_token_loss
from icml26zoo.diagnostics.interventions import decoupling_check, implicit_parameter_test, sink_removal, spike_clamp
from icml26zoo.diagnostics.stats import (
    attention_sinks,
    co_occurrence,
    key_mass,
    life_cycle,
    massive_activations,
    sink_locality,
    slot_mass,
    spike_token_geometry,
)


def diagnose(
    model: nnx.Module,
    tokens: jax.Array,
    *,
    segment_ids: jax.Array | None = None,
    top_k: int = 8,
    tau_abs: float = 100.0,
    tau_rel: float = 1000.0,
    top_m: int = 4,
    i0: int = 16,
    eps: float = 0.3,
    sink_top_k: int = 3,
    materialize_attention: bool = True,
) -> dict[str, Any]:
    """Runs a registered LM (scanned or unrolled) on tokens [B, T] and returns per-layer statistics.

    Returns a dict of numpy arrays / floats / nested dicts (L layers, L+1 residual streams):
      loss: mean next-token cross-entropy; logits [B, T, V];
      massive: D1 over the L+1 streams (`stats.massive_activations`);
      life_cycle: D2 for D1's flagged (row, pos, channel) entries, or, when none is flagged, for the
        largest-ratio entry (its "entries" key lists which);
      spike_geometry: D3 (`stats.spike_token_geometry`) on the mixer inputs;
      sinks / locality / co_occurrence: D4 / D5 / D6 for the softmax-family mixers (attention, fox, fix,
        goat, circulation: `mixer.attention_weights`) with materialize_attention; otherwise
        {"available": False, "reason": ...}. With the attention mixer's explicit sink slot, sinks also
        holds slot_mass [L, H] (`stats.slot_mass`) and the D4-D6 statistics see the real keys only.
    i0 must be < T for the sink statistics (queries i < i0 are excluded as trivially local).
    """
    cap = capture_forward(model, tokens, segment_ids=segment_ids, materialize_attention=materialize_attention)
    toks = np.asarray(tokens)
    hidden = np.asarray(cap["hidden"])
    d1 = massive_activations(hidden, toks, top_k=top_k, tau_abs=tau_abs, tau_rel=tau_rel)
    entries = sorted({(e[1], e[2], e[4]) for e in d1["flagged_entries"]})
    if not entries:
        lay = int(np.argmax(d1["max_ratio"]))
        entries = [(int(d1["top_row"][lay, 0]), int(d1["top_pos"][lay, 0]), int(d1["top_channel"][lay, 0]))]
    d2 = life_cycle(hidden, np.asarray(cap["attn_delta"]), np.asarray(cap["mlp_delta"]), entries)
    d2["entries"] = entries
    result: dict[str, Any] = {
        "loss": next_token_loss(cap["logits"], cap["tokens"]),
        "logits": np.asarray(cap["logits"]),
        "massive": d1,
        "life_cycle": d2,
        "spike_geometry": spike_token_geometry(hidden[:-1], np.asarray(cap["mixer_in"]), top_m=top_m),
    }
    if cap["probs"] is None:
        reason = (
            f"mixer {cap['mixer']!r} has no softmax attention probabilities"
            if not cap["has_attention"]
            else "materialize_attention=False"
        )
        unavailable = {"available": False, "reason": reason}
        result.update(sinks=unavailable, locality=unavailable, co_occurrence=unavailable)
        return result
    probs = np.asarray(cap["probs"])
    result["sinks"] = {"available": True, **attention_sinks(probs, i0=i0, eps=eps, top_k=sink_top_k)}
    if cap["sink_probs"] is not None:
        result["sinks"]["slot_mass"] = slot_mass(np.asarray(cap["sink_probs"]), i0=i0)
    result["locality"] = {"available": True, **sink_locality(probs, i0=i0, eps=eps)}
    result["co_occurrence"] = {"available": True, **co_occurrence(d1["flagged_entries"], probs, i0=i0, eps=eps)}
    return result


__all__ = [
    "Hooks",
    "attention_sinks",
    "capture_forward",
    "co_occurrence",
    "decoupling_check",
    "diagnose",
    "implicit_parameter_test",
    "key_mass",
    "life_cycle",
    "massive_activations",
    "next_token_loss",
    "sink_locality",
    "sink_removal",
    "slot_mass",
    "spike_clamp",
    "spike_token_geometry",
]
