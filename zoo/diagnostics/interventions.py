"""Causal interventions I1-I4 (Sun et al., arXiv 2603.05498), each returning before/after metrics as plain dicts.

All run the model through `capture_forward` with hooks; the model itself is never modified.
Loss is the mean next-token cross-entropy of the batch (`next_token_loss`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.diagnostics.capture import Hooks, capture_forward, next_token_loss
from icml26zoo.diagnostics.stats import attention_sinks, massive_activations, sink_locality, slot_mass


def _summary(cap: dict[str, Any], *, i0: int, eps: float) -> dict[str, Any]:
    """Loss, D1 max ratio per stream, and (attention only) sink rate, first-token mass and D5 distance."""
    out: dict[str, Any] = {"loss": next_token_loss(cap["logits"], cap["tokens"])}
    hidden = np.asarray(cap["hidden"])
    out["max_ratio"] = massive_activations(hidden, np.asarray(cap["tokens"]), top_k=1)["max_ratio"]
    out["max_abs"] = np.abs(hidden).max(axis=(1, 2, 3))
    if cap["probs"] is not None:
        probs = np.asarray(cap["probs"])
        sinks = attention_sinks(probs, i0=i0, eps=eps)
        out.update(sink_rate=sinks["sink_rate"], first_token_mass=sinks["first_token_mass"])
        if cap["sink_probs"] is not None:
            out["slot_mass"] = slot_mass(np.asarray(cap["sink_probs"]), i0=i0)
        out["distance"] = sink_locality(probs, i0=i0, eps=eps)["distance"]
    return out


def spike_clamp(
    model: nnx.Module,
    tokens: jax.Array,
    *,
    layer: int,
    entries: Sequence[tuple[int, int, int]] | None = None,
    mode: str = "median",
    i0: int = 16,
    eps: float = 0.3,
    tau_abs: float = 100.0,
    tau_rel: float = 1000.0,
) -> dict[str, Any]:
    """I1: at the output of block `layer`, clip (row, pos, channel) entries to the median |h| or zero them.

    entries default to D1's flagged entries of that output stream (h^{layer+1}) with tau_abs / tau_rel.
    mode "median": |value| is clipped to the stream's median magnitude (sign kept); "zero": set to 0.
    Returns {"before", "after"} summaries (loss, max_ratio [L+1], max_abs [L+1], and for attention
    sink_rate, first_token_mass [L, H], distance [L, H], and with an explicit sink slot slot_mass [L, H]),
    "delta_loss", and the clamped "entries".
    """
    if mode not in ("median", "zero"):
        raise ValueError(f"mode must be 'median' or 'zero', got {mode!r}")
    base = capture_forward(model, tokens)
    stream = np.asarray(base["hidden"][layer + 1])
    if entries is None:
        d1 = massive_activations(stream[None], np.asarray(tokens), top_k=64, tau_abs=tau_abs, tau_rel=tau_rel)
        entries = [(e[1], e[2], e[4]) for e in d1["flagged_entries"]]
    entries = [tuple(int(v) for v in e) for e in entries]
    median = float(np.median(np.abs(stream)))

    def clamp(index: int, h: jax.Array) -> jax.Array:
        if index != layer or not entries:
            return h
        rows, pos, chans = (jnp.asarray(v) for v in zip(*entries, strict=True))
        current = h[rows, pos, chans]
        new = jnp.zeros_like(current) if mode == "zero" else jnp.clip(current, -median, median).astype(h.dtype)
        return h.at[rows, pos, chans].set(new)

    after = capture_forward(model, tokens, hooks=Hooks(block_output=clamp))
    before_s, after_s = _summary(base, i0=i0, eps=eps), _summary(after, i0=i0, eps=eps)
    return {"before": before_s, "after": after_s, "delta_loss": after_s["loss"] - before_s["loss"],
            "entries": entries}


def sink_removal(
    model: nnx.Module, tokens: jax.Array, *, heads: Sequence[tuple[int, int]] | None = None, sink: int = 0,
    i0: int = 16, eps: float = 0.3,
) -> dict[str, Any]:
    """I2: add -inf to the logits of key `sink` for the selected (layer, head) pairs (default: all heads).

    Queries that see only the sink (i ≤ sink) keep it, since an empty row has no softmax. Attention mixer
    only. Returns before/after summaries, delta_loss, and head_norm_before / head_norm_after [n] (mean
    over rows and tokens i > sink of the per-head output norm ‖P V‖ before o_proj) for the n selected heads.
    """
    base = capture_forward(model, tokens)
    if base["probs"] is None:
        raise ValueError(f"sink removal needs the 'attention' mixer, got mixer {base['mixer']!r}")
    n_layers, _, n_heads = base["probs"].shape[:3]
    heads = [(lay, h) for lay in range(n_layers) for h in range(n_heads)] if heads is None else list(heads)
    selected = np.zeros((n_layers, n_heads), bool)
    for lay, h in heads:
        selected[lay, h] = True
    length = tokens.shape[1]
    query_after_sink = jnp.arange(length)[:, None] > sink  # [T, 1]

    def remove(index: int, logits: jax.Array) -> jax.Array:
        # logits may carry the mixer's explicit sink slot as an extra last column; key `sink` is a real token.
        key_is_sink = jnp.arange(logits.shape[-1])[None, :] == sink  # [1, S]
        drop = jnp.asarray(selected[index])[None, :, None, None] & (query_after_sink & key_is_sink)[None, None]
        return jnp.where(drop, -jnp.inf, logits)

    after = capture_forward(model, tokens, hooks=Hooks(attention_logits=remove))

    def head_norms(cap: dict[str, Any]) -> np.ndarray:
        norms = np.linalg.norm(np.asarray(cap["head_out"], np.float32)[:, :, sink + 1:], axis=-1)  # [L,B,T',H]
        return np.array([norms[lay, :, :, h].mean() for lay, h in heads])

    before_s, after_s = _summary(base, i0=i0, eps=eps), _summary(after, i0=i0, eps=eps)
    return {"before": before_s, "after": after_s, "delta_loss": after_s["loss"] - before_s["loss"],
            "heads": heads, "head_norm_before": head_norms(base), "head_norm_after": head_norms(after)}


def implicit_parameter_test(
    model: nnx.Module, tokens: jax.Array, calibration_tokens: jax.Array, *, layer: int, pos: int = 0,
    i0: int = 16, eps: float = 0.3,
) -> dict[str, Any]:
    """I3: replace the spike token's hidden state h^layer[:, pos] by its mean over a calibration set.

    calibration_tokens [N, T'] (T' > pos). The claim (massive activations are implicit parameters)
    predicts delta_loss ≈ 0. With calibration_tokens equal to one row repeated, the mean is that row's
    own state, so on that row the test is a no-op.
    Returns before/after summaries, delta_loss, and the replacement vector "mean_state" [D].
    """
    calib = capture_forward(model, calibration_tokens, materialize_attention=False)
    mean_state = jnp.mean(calib["hidden"][layer][:, pos].astype(jnp.float32), axis=0)

    def replace(index: int, h: jax.Array) -> jax.Array:
        if index != layer:
            return h
        return h.at[:, pos].set(jnp.broadcast_to(mean_state.astype(h.dtype), h[:, pos].shape))

    base = capture_forward(model, tokens)
    after = capture_forward(model, tokens, hooks=Hooks(block_input=replace))
    before_s, after_s = _summary(base, i0=i0, eps=eps), _summary(after, i0=i0, eps=eps)
    return {"before": before_s, "after": after_s, "delta_loss": after_s["loss"] - before_s["loss"],
            "mean_state": np.asarray(mean_state)}


def decoupling_check(
    cfg: Any, tokens: jax.Array, *, placements: Sequence[str] = ("pre", "post", "sandwich", "none"),
    seed: int = 0, **diagnose_kwargs: Any,
) -> dict[str, dict[str, Any]]:
    """I4: `diagnose` (D1-D6) for one model per norm placement, all built from cfg and the same seed.

    Returns {placement: diagnose(...) result}. Parameter counts differ only by the norms' scales.
    """
    from icml26zoo.diagnostics import diagnose
    from icml26zoo.models import build_model

    results = {}
    for placement in placements:
        model = build_model(dataclasses.replace(cfg, norm_placement=placement), rngs=nnx.Rngs(seed))
        results[placement] = diagnose(model, tokens, **diagnose_kwargs)
    return results
