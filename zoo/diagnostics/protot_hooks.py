"""Interpretability hooks of the ProtoT mixer (arXiv 2602.11852): read out and edit prototypes.

Read-outs (nothing here changes a model):
  prototype_assignments(mixer, x) -> write weights a [B, T, H, K₀] and read weights b [B, T, H, K];
  prototype_usage(a) -> mean write weight per prototype and its entropy (collapse monitor);
  top_tokens_per_prototype(model, tokens, layer, k) -> the k tokens that write most to each prototype;
  channel_memories(mixer, x) -> the normalized memories m̄ [B, T, H, K, d_v/H] and normalizers n.
Edits:
  edit_prototypes(model, {layer: PrototypeEdit(...)}) -> an edited copy (block writes to a concept, zero a
  channel's memory, pin or scale a read weight); channels_of_prototype(mixer, j) lists prototype j's K-channels.

Channel layout: channel k = j·S + s is base prototype j at scale s (S = 1 with decay="learned").
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.diagnostics.capture import capture_forward
from icml26zoo.mixers.protot import ProtoT
from icml26zoo.mixers.protot_parts import PrototypeEdit, reference_recurrence
from icml26zoo.models.block import convert_layer_layout
from icml26zoo.validation import check_int

__all__ = [
    "PrototypeEdit",
    "TopTokens",
    "channel_memories",
    "channels_of_prototype",
    "edit_prototypes",
    "layer_mixer",
    "mixer_inputs",
    "prototype_assignments",
    "prototype_usage",
    "top_tokens_per_prototype",
]


class TopTokens(NamedTuple):
    """The k strongest writers of every prototype, each [H, K₀, k], strongest first."""

    token_ids: np.ndarray  # the token
    rows: np.ndarray  # its batch row
    positions: np.ndarray  # its position in the row
    weights: np.ndarray  # its write weight a_{t,j}


def _check_protot(mixer: nnx.Module) -> ProtoT:
    if not isinstance(mixer, ProtoT):
        raise ValueError(f"mixer must be a ProtoT mixer (registered as 'protot'), got {type(mixer).__name__}")
    return mixer


def _unrolled_copy(model: nnx.Module) -> nnx.Module:
    """A copy in the unrolled layout (one mixer per layer), keeping any edits an unrolled model holds."""
    if model.cfg.scan_layers:
        return convert_layer_layout(model, scan_layers=False)
    return nnx.clone(model)


def _check_layer(model: nnx.Module, layer: int) -> None:
    check_int("layer", layer, minimum=0, maximum=model.cfg.num_layers - 1)
    if model.cfg.mixer != "protot":
        raise ValueError(f"model must use the 'protot' mixer, got cfg.mixer = {model.cfg.mixer!r}")


def layer_mixer(model: nnx.Module, layer: int) -> ProtoT:
    """The ProtoT mixer of `layer` (an unrolled copy's when the model scans its layers)."""
    _check_layer(model, layer)
    layers = _unrolled_copy(model).layers if model.cfg.scan_layers else model.layers
    return _check_protot(layers[layer].mixer)


def mixer_inputs(
    model: nnx.Module, tokens: jax.Array, layer: int, *, segment_ids: jax.Array | None = None
) -> jax.Array:
    """What the mixer of `layer` receives for tokens [B, T]: [B, T, D] (the normed residual stream)."""
    _check_layer(model, layer)
    return capture_forward(model, tokens, segment_ids=segment_ids)["mixer_in"][layer]


def prototype_assignments(
    mixer: ProtoT, x: jax.Array, *, segment_ids: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Mixer input x [B, T, D] -> (a [B, T, H, K₀], b [B, T, H, K]) float32, the write and read weights.

    Each row is a distribution (sums to 1) unless the mixer carries an edit that blocks writes or pins
    reads; those are the weights the mixer then actually uses. segment_ids matter only with
    read_count_bias (the read logits see the normalizers).
    """
    parts = _check_protot(mixer).internals(x, segment_ids=segment_ids)
    return parts.write_weights, parts.read_weights


def prototype_usage(write_weights: jax.Array, *, segment_ids: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """a [B, T, H, K₀] -> (usage [H, K₀], entropy [H]): mean write weight per prototype over the real
    tokens (segment id != 0) and the entropy of that usage in nats (log K₀ = uniform, 0 = collapsed)."""
    weights = write_weights.astype(jnp.float32)
    real = jnp.ones(weights.shape[:2], jnp.float32) if segment_ids is None else (segment_ids != 0).astype(jnp.float32)
    usage = jnp.einsum("bthj,bt->hj", weights, real) / jnp.maximum(real.sum(), 1.0)
    entropy = -jnp.sum(jnp.where(usage > 0, usage * jnp.log(jnp.where(usage > 0, usage, 1.0)), 0.0), axis=-1)
    return usage, entropy


def top_tokens_per_prototype(
    model: nnx.Module, tokens: jax.Array, layer: int, k: int, *, segment_ids: jax.Array | None = None
) -> TopTokens:
    """For each (head, prototype) of `layer`, the k tokens of tokens [B, T] with the largest write weight.

    Padding (segment id 0) never counts. k must be <= the number of real tokens.
    """
    real = np.ones(tokens.shape, bool) if segment_ids is None else np.asarray(segment_ids) != 0
    check_int("k (at most the number of real tokens)", k, maximum=int(real.sum()))
    mixer = layer_mixer(model, layer)
    x = mixer_inputs(model, tokens, layer, segment_ids=segment_ids)
    write_weights, _ = prototype_assignments(mixer, x, segment_ids=segment_ids)
    length = tokens.shape[1]
    flat = jnp.moveaxis(write_weights, (0, 1), (2, 3)).reshape(write_weights.shape[2:] + (-1,))  # [H, K₀, B·T]
    flat = jnp.where(jnp.asarray(real.reshape(-1)), flat, -jnp.inf)
    weights, index = jax.lax.top_k(flat, k)
    index = np.asarray(index)
    return TopTokens(np.asarray(tokens).reshape(-1)[index], index // length, index % length, np.asarray(weights))


def channel_memories(
    mixer: ProtoT, x: jax.Array, *, segment_ids: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Mixer input x [B, T, D] -> (m̄ [B, T, H, K, d_v/H], n [B, T, H, K]) float32, step by step.

    m̄ = m / (n + ε) ("avg"; m for "sum"), with the mixer's edits applied. Materializes every memory at
    every step: for small inputs (diagnostics, tests).
    """
    mixer = _check_protot(mixer)
    parts = mixer.internals(x, segment_ids=segment_ids)
    log_lam, one_minus = mixer.decays()
    write = jnp.repeat(parts.write_weights, mixer.num_scales, axis=-1) * one_minus
    batch, length = x.shape[:2]
    values = mixer.value_proj(x).astype(jnp.float32).reshape(batch, length, mixer.num_heads, -1)
    _, counts, memories, _, _ = reference_recurrence(
        values, write, parts.read_weights, log_lam, memory=mixer.options.memory, eps=mixer.options.eps,
        segment_ids=segment_ids,
    )
    if mixer.edit_masks is not None:
        memories = memories * mixer.edit_masks.get_value()["memory_keep"][..., None]
    return memories, counts


def channels_of_prototype(mixer: ProtoT, prototype: int) -> tuple[int, ...]:
    """The K-channels of base prototype j (its S scales): (j·S, ..., j·S + S − 1)."""
    mixer = _check_protot(mixer)
    check_int("prototype", prototype, minimum=0, maximum=mixer.num_prototypes - 1)
    return tuple(range(prototype * mixer.num_scales, (prototype + 1) * mixer.num_scales))


def edit_prototypes(model: nnx.Module, edits: dict[int, PrototypeEdit | None]) -> nnx.Module:
    """An unrolled copy of `model` whose ProtoT layers carry `edits` ({layer: edit}; None removes one).

    The model itself is not changed. The copy runs forward and decoding as usual, with the edits applied.
    Every ProtoT layer of the copy holds edit masks (the identity where it has no edit, which changes no
    output), so every copy of one model has the same structure: one compiled program serves them all,
    `edit_prototypes(model, {})` included.
    """
    edited = _unrolled_copy(model)
    for layer, edit in edits.items():
        if edit is not None and not isinstance(edit, PrototypeEdit):
            raise ValueError(f"edits[{layer}] must be a PrototypeEdit or None, got {type(edit).__name__}")
        layer_mixer(edited, layer).edit = PrototypeEdit() if edit is None else edit
    for layer in range(model.cfg.num_layers):
        mixer = layer_mixer(edited, layer)
        if mixer.edit_masks is None:
            mixer.edit = PrototypeEdit()
    return edited
