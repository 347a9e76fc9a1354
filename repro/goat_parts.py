"""Pieces of the GOAT reproduction (repro/goat.py): the compared models, a length evaluator that scores the
same tokens at several context lengths, the attention-sink statistics, and the figures.

GOAT (Litman & Guo, arXiv 2601.15380) learns the attention prior log π(i, j) = κ(i − j) + u(j) (zoo/mixers/goat.py).
Its baselines here are the zoo's softmax attention with RoPE and with ALiBi (zoo/mixers/attention.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.diagnostics import attention_sinks, capture_forward, massive_activations
from icml26zoo.models.config import ModelConfig
from icml26zoo.models.lm import positions_from_segments
from icml26zoo.repro.lengths import LengthLoss, binned, check_lengths

__all__ = ["LABELS", "MODELS", "LengthLoss", "binned", "chunked_segments", "length_losses",
           "model_config", "sink_figure", "sink_profile", "single_segment_rows"]

# The compared models: (mixer, mixer options other than GOAT's training length).
MODELS = {"goat": "goat", "rope": "attention", "alibi": "attention"}
LABELS = {"goat": "GOAT", "rope": "attention + RoPE", "alibi": "attention + ALiBi"}


def model_config(base: ModelConfig, model: str, *, train_len: int, max_len: int, head_dim: int,
                 pos_rank: int) -> ModelConfig:
    """`base` (the tiny preset's model) as `model` of MODELS, able to run `max_len` positions.

    GOAT's sink features normalize positions by its `training_seq_len`, which must be the length it trains
    at (`train_len`), not `max_len`: otherwise φ(j) would never see the values it meets beyond T.
    """
    if model == "goat":
        options = (("pos_rank", pos_rank), ("training_seq_len", train_len))
    else:
        options = (("position", model),)
    return dataclasses.replace(base, mixer=MODELS[model], mixer_options=options, max_seq_len=max_len,
                               head_dim=head_dim)





def chunked_segments(segment_ids: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Segment ids and positions [B, N] that cut every row of segment_ids [B, N] into chunks of `length`.

    A segment crossing a chunk boundary continues in the next chunk as a new segment, so no token sees
    more than `length` tokens of context and the positions restart at 0 at every chunk; padding (id 0)
    stays padding. Attention masks by segment, so one [B, N] forward equals N / length separate rows of
    `length` (the row shape, and so the compiled function, is the same for every length).
    """
    segment_ids = np.asarray(segment_ids)
    row = segment_ids.shape[1]
    if row % length:
        raise ValueError(f"length {length} must divide the row length {row}")
    chunk = np.arange(row) // length
    stride = int(segment_ids.max()) + 1
    ids = np.where(segment_ids > 0, segment_ids + chunk[None, :] * stride, 0).astype(np.int32)
    return ids, np.asarray(positions_from_segments(jnp.asarray(ids)))


@nnx.jit
def _forward(model: nnx.Module, batch: dict[str, jax.Array], rows: jax.Array) -> tuple[jax.Array, ...]:
    """The diagnostics' captured forward of rows [B, N] (exactly the model's forward, `capture_forward`):
    the next-token loss nll [B, N] (nats) and, for the batch rows `rows` [b], the attention probabilities
    [L, b, H, N, N] (None for a mixer without them) and the residual streams [L + 1, b, N, D]."""
    captured = capture_forward(model, batch["inputs"], segment_ids=batch["segment_ids"], materialize_attention=True)
    log_probs = jax.nn.log_softmax(captured["logits"].astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(log_probs, batch["targets"][..., None], axis=-1)[..., 0]
    probs = None if captured["probs"] is None else captured["probs"][:, rows]
    return nll, probs, captured["hidden"][:, rows]



def length_losses(model: nnx.Module, batch: Mapping[str, np.ndarray], lengths: Sequence[int], *,
                  capture_rows: Sequence[int] = ()) -> tuple[dict[int, LengthLoss], dict[str, np.ndarray]]:
    """The loss of `model` on the same tokens at every context length in `lengths`, and what its forward at
    the longest length captured for the batch rows `capture_rows`.

    batch: the pipeline's rows [B, N] ("inputs", "targets", "segment_ids", "weights"); each length must divide
    N and be at most `model.cfg.max_seq_len` (ValueError naming it). Every length scores exactly the same
    targets; only how much context each one sees changes (`chunked_segments`).
    Returns ({length: LengthLoss}, {"probs": [L, b, H, N, N] or None, "hidden": [L + 1, b, N, D]}) with
    b = len(capture_rows), from the forward at max(lengths).
    """
    inputs = np.asarray(batch["inputs"])
    if inputs.ndim != 2:
        raise ValueError(f"batch['inputs'] must have shape [B, N], got {inputs.shape}")
    lengths = check_lengths(lengths, model.cfg.max_seq_len, inputs.shape[1])
    if inputs.shape[1] > model.cfg.max_seq_len:
        raise ValueError(f"the batch's rows ({inputs.shape[1]} tokens) exceed the model's max_seq_len "
                         f"({model.cfg.max_seq_len})")
    rows = np.asarray(capture_rows, np.int32).reshape(-1)
    if rows.size and not (0 <= rows.min() and rows.max() < len(inputs)):
        raise ValueError(f"capture_rows must index the batch's {len(inputs)} rows, got {rows.tolist()}")
    weights = np.asarray(batch["weights"], np.float64)
    if not weights.sum() > 0:
        raise ValueError("the batch has no target with a nonzero weight")
    results, captured = {}, {}
    for length in lengths:
        ids, positions = chunked_segments(batch["segment_ids"], length)
        arrays = {"inputs": inputs, "targets": np.asarray(batch["targets"]), "segment_ids": ids}
        nll, probs, hidden = _forward(model, {k: jnp.asarray(v) for k, v in arrays.items()}, jnp.asarray(rows))
        loss = np.bincount(positions.ravel(), (np.asarray(nll, np.float64) * weights).ravel(), minlength=length)
        weight = np.bincount(positions.ravel(), weights.ravel(), minlength=length)
        loss, weight = loss[:length], weight[:length]
        with np.errstate(invalid="ignore", divide="ignore"):
            per_position = np.where(weight > 0, loss / weight, np.nan) / math.log(2)
        results[length] = LengthLoss(length, float(loss.sum() / weight.sum() / math.log(2)), int(weight.sum()),
                                     per_position, weight.astype(np.int64))
        captured = {"probs": None if probs is None else np.asarray(probs), "hidden": np.asarray(hidden)}
    return results, captured


def single_segment_rows(segment_ids: np.ndarray, rows: int) -> np.ndarray:
    """Indices of the first (up to) `rows` rows of segment_ids [B, N] that hold a single document piece.

    The corpus has no BOS token: a row's first token is where its document piece starts (position 0), the
    token a sink forms on. Rows that mix documents would spread that token's mass over several segments.
    """
    ids = np.asarray(segment_ids)
    keep = np.flatnonzero((ids == ids[:, :1]).all(axis=1) & (ids[:, 0] > 0))[:rows]
    if not len(keep):
        raise ValueError("no eval row holds a single document over its whole length; raise eval_rows")
    return keep


def sink_profile(probs: np.ndarray, hidden: np.ndarray, tokens: np.ndarray, *, i0: int,
                 lengths: Sequence[int]) -> dict[int, dict[str, np.ndarray]]:
    """Attention-sink statistics at each context length in `lengths` from one captured forward of N tokens.

    probs [L, b, H, N, N], hidden [L + 1, b, N, D] and tokens [b, N]: rows of one segment each (positions
    0 .. N-1). Attention is causal, so the first n rows and columns of the probabilities (and the first n
    tokens of the streams) are exactly those of an n-token forward. Per length n, returns first_token_mass
    [L, H] (zoo.diagnostics D4: the mean probability on key 0 over queries i0 <= i < n, averaged over rows),
    layer_mass [L] (its mean over heads) and max_ratio [L + 1] (D1: the largest |activation| of each
    residual stream over its median, the "massive activation" size).
    """
    if probs is None:
        raise ValueError("the mixer exposes no attention probabilities")
    size = probs.shape[-1]
    profile = {}
    for n in lengths:
        if not (isinstance(n, int) and i0 < n <= size):
            raise ValueError(f"lengths: {n!r} must be an integer in ({i0}, {size}] (above i0, within the rows)")
        first = attention_sinks(probs[..., :n, :n], i0=i0)["first_token_mass"]
        massive = massive_activations(hidden[:, :, :n], np.asarray(tokens)[:, :n])
        profile[n] = {"first_token_mass": first, "layer_mass": first.mean(axis=1), "max_ratio": massive["max_ratio"]}
    return profile


def sink_figure(masses: Mapping[str, Mapping[int, np.ndarray]], *, title: str) -> Figure:
    """Grouped bars of the per-layer first-token mass: one panel per eval length, one bar per model.

    masses: label -> {length: layer_mass [L]}.
    """
    lengths = sorted(next(iter(masses.values())))
    figure = Figure(figsize=(4.0 * len(lengths) + 1, 3.8), layout="constrained")
    axes = figure.subplots(1, len(lengths), sharey=True, squeeze=False)[0]
    width = 0.8 / len(masses)
    for ax, length in zip(axes, lengths, strict=True):
        for k, (label, by_length) in enumerate(masses.items()):
            values = by_length[length]
            ax.bar(np.arange(len(values)) + (k - (len(masses) - 1) / 2) * width, values, width, label=label)
        layers = len(next(iter(masses.values()))[length])
        ax.set(xticks=range(layers), xlabel="layer", title=f"eval length {length}")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("mean attention on the first token")
    axes[0].legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    return figure
