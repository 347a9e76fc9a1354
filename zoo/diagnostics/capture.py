"""A capturing forward pass for the decoder LM: per-layer residual streams, increments and attention maps.

The model's own blocks record themselves: each `Block` runs with capture=True under `nnx.capture`, which
collects what it sows (`nnx.Intermediate`: sublayer inputs and outputs, the stream after the mixer). Here
only the layer loop is written out (embedding -> each block -> the model's own head), so that hooks can
edit the stream between blocks; the captured logits equal the unrolled model's forward bitwise.

Softmax-family mixers (attention, fox, fix, goat, circulation) expose their probabilities through one
method, `mixer.attention_weights(x, segment_ids=, positions=) -> [B, H, T, T]`, computed from the mixer
input the block sowed. Hooks (used by `zoo.diagnostics.interventions`) may edit the residual stream
before/after a block or replace the attention logits of the "attention" mixer; with no hooks the captured
run is exactly the model's forward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.models.block import convert_layer_layout
from icml26zoo.models.lm import check_tokens, positions_from_segments

# h [B, T, D] at layer l -> h' [B, T, D]
ResidualHook = Callable[[int, jax.Array], jax.Array]
# (layer l, float32 logits [B, H, T, T] with -inf on masked entries) -> edited logits
LogitsHook = Callable[[int, jax.Array], jax.Array]


@dataclasses.dataclass
class Hooks:
    """Optional edits applied during a captured forward.

    block_input: edits h^l before block l runs (what block l and the capture of h^l see).
    block_output: edits block l's output before it becomes h^{l+1}.
    attention_logits: edits the attention logits of layer l ("attention" mixer only). When set, that layer's
      mixer runs materialized (softmax(edited logits) @ V, then its own o_proj) instead of its fused kernel.
    """

    block_input: ResidualHook | None = None
    block_output: ResidualHook | None = None
    attention_logits: LogitsHook | None = None


def unrolled(model: nnx.Module) -> nnx.Module:
    """The model itself if its layers are unrolled, else a copy converted to the unrolled layout."""
    if getattr(model.cfg, "scan_layers", False):
        return convert_layer_layout(model, scan_layers=False)
    return model


def has_attention_weights(mixer: nnx.Module) -> bool:
    """True for the softmax-family mixers, which expose `attention_weights` (attention, fox, fix, goat, ...)."""
    return callable(getattr(mixer, "attention_weights", None))


def softmax_rows(logits: jax.Array) -> jax.Array:
    """Row softmax of float32 logits [..., T, S]; a row that is entirely -inf gets zeros instead of NaN."""
    finite = jnp.isfinite(logits).any(axis=-1, keepdims=True)
    return jax.nn.softmax(jnp.where(finite, logits, 0.0), axis=-1) * finite.astype(jnp.float32)


def head_outputs(mixer: nnx.Module, x: jax.Array, probs: jax.Array, positions: jax.Array) -> jax.Array:
    """Per-head output P @ V [B, T, H, Dh] (before o_proj, after any output gate) of an "attention" mixer.

    probs [B, H, T, T], or [B, H, T, T + 1] with the mixer's sink slot last (its value is zero, so the slot
    only takes weight away from the real keys).
    """
    _, _, v = mixer._project_qkv(x, positions)
    v = jnp.repeat(v, mixer.num_heads // mixer.num_kv_heads, axis=2)
    heads = jnp.einsum("bhij,bjhd->bihd", probs[..., : v.shape[1]], v.astype(jnp.float32)).astype(mixer.dtype)
    return mixer.gate_heads(x, heads) if callable(getattr(mixer, "gate_heads", None)) else heads


class EditedAttention(nnx.Module):
    """Stands in for an "attention" mixer with edited logits: o_proj(softmax(edit(logits)) @ V)."""

    def __init__(self, mixer: nnx.Module, layer: int, edit: LogitsHook) -> None:
        self.mixer, self.layer, self.edit = mixer, layer, edit

    def logits(self, x: jax.Array, *, segment_ids: jax.Array | None, positions: jax.Array) -> jax.Array:
        """The mixer's masked float32 logits [B, H, T, T] after the edit."""
        return self.edit(self.layer, self.mixer.attention_logits(x, segment_ids=segment_ids, positions=positions))

    def __call__(
        self, x: jax.Array, *, segment_ids: jax.Array | None, positions: jax.Array, cache: Any = None
    ) -> tuple[jax.Array, None]:
        """x [B, T, D] -> (y [B, T, D], None); no decoding."""
        probs = softmax_rows(self.logits(x, segment_ids=segment_ids, positions=positions))
        heads = head_outputs(self.mixer, x, probs, positions)
        return self.mixer.o_proj(heads.reshape(*x.shape[:2], -1)), None


def _with_edited_attention(layer: nnx.Module, index: int, edit: LogitsHook, mixer_name: str) -> nnx.Module:
    """A copy of block `layer` whose mixer's attention logits pass through `edit`."""
    if not callable(getattr(layer.mixer, "attention_logits", None)):
        raise ValueError(f"attention_logits hooks need the 'attention' mixer, got mixer {mixer_name!r}")
    layer = nnx.clone(layer)
    layer.mixer = EditedAttention(layer.mixer, index, edit)
    return layer


def _run_block(
    layer: nnx.Module, x: jax.Array, *, segment_ids: jax.Array | None, positions: jax.Array
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Block `layer` on x [B, T, D] with capture on: (output [B, T, D], {name: sown array})."""
    run = nnx.capture(lambda block, h: block(h, segment_ids=segment_ids, positions=positions, capture=True),
                      nnx.Intermediate)
    (out, _), sown = run(layer, x)
    return out, {name: variable.get_value()[0] for name, variable in sown.items()}


def _attention_maps(
    layer: nnx.Module, h: jax.Array, *, segment_ids: jax.Array | None, positions: jax.Array
) -> tuple[jax.Array, jax.Array | None]:
    """(probs [B, H, T, T], per-head output [B, T, H, Dh] or None) of block `layer`'s mixer on its input h."""
    mixer = layer.mixer
    if isinstance(mixer, EditedAttention):
        probs = softmax_rows(mixer.logits(h, segment_ids=segment_ids, positions=positions))
        return probs, head_outputs(mixer.mixer, h, probs, positions)
    probs = mixer.attention_weights(h, segment_ids=segment_ids, positions=positions)
    heads = head_outputs(mixer, h, probs, positions) if callable(getattr(mixer, "attention_logits", None)) else None
    return probs, heads


def capture_forward(
    model: nnx.Module,
    tokens: jax.Array,
    *,
    segment_ids: jax.Array | None = None,
    materialize_attention: bool = True,
    hooks: Hooks | None = None,
) -> dict[str, Any]:
    """Runs a registered decoder LM on tokens [B, T] and records every layer.

    Returns a dict (jax arrays; L = num_layers):
      logits [B, T, V] float32 — equal (bitwise) to the unrolled model's forward when hooks is None;
      hidden [L+1, B, T, D] — residual stream h^l before block l (hidden[L] = last block's output,
        before the final norm);
      mixer_in / mlp_in [L, B, T, D] — what each sublayer receives (RMSNorm(h) for pre/sandwich);
      mixer_out / mlp_out [L, B, T, D] — each sublayer's raw output;
      attn_delta / mlp_delta [L, B, T, D] — the change of the residual stream across each sublayer
        (h_mid - h^l and h^{l+1} - h_mid; equal to the raw outputs for "pre"/"none"), so
        hidden[l+1] - hidden[l] = attn_delta[l] + mlp_delta[l] up to rounding. Without an MLP sublayer
        (mlp_dim=0) mlp_in / mlp_out are None and mlp_delta is zero;
      probs [L, B, H, T, T] float32 or None — attention probabilities of a softmax-family mixer
        (`attention_weights`), when materialize_attention (memory grows as T²); on the real keys only;
      sink_probs [L, B, H, T] float32 or None — the weight each query puts on the mixer's explicit sink slot
        (attention option sink = learnable / plus_one; then each row of probs sums to 1 - sink_probs);
      head_out [L, B, T, H, Dh] or None — per-head output before o_proj ("attention" mixer only);
      tokens [B, T]; mixer (name); has_attention (bool: the mixer exposes attention probabilities).
    A scanned model is first converted to the unrolled layout (a copy; the model is not changed).
    """
    check_tokens(tokens)
    model = unrolled(model)
    cfg = model.cfg
    hooks = hooks or Hooks()
    positions = (
        jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
        if segment_ids is None
        else positions_from_segments(segment_ids)
    )
    has_attention = all(has_attention_weights(layer.mixer) for layer in model.layers)
    # The same casts as DecoderLM.forward_embeddings, so the stream enters block 0 identically.
    x = model.embed(tokens).astype(jnp.dtype(cfg.compute_dtype))
    names = ("hidden", "mixer_in", "mixer_out", "mlp_in", "mlp_out", "attn_delta", "mlp_delta", "probs", "heads",
             "sink_probs")
    rec: dict[str, list] = {name: [] for name in names}
    for index, layer in enumerate(model.layers):
        if hooks.block_input is not None:
            x = hooks.block_input(index, x)
        if hooks.attention_logits is not None:
            layer = _with_edited_attention(layer, index, hooks.attention_logits, cfg.mixer)
        rec["hidden"].append(x)
        out, sown = _run_block(layer, x, segment_ids=segment_ids, positions=positions)
        for name in ("mixer_in", "mixer_out", "mlp_in", "mlp_out"):
            if name in sown:
                rec[name].append(sown[name])
        rec["attn_delta"].append(sown["after_mixer"] - x)
        rec["mlp_delta"].append(out - sown["after_mixer"])
        if has_attention and (materialize_attention or hooks.attention_logits is not None):
            probs, heads = _attention_maps(layer, sown["mixer_in"], segment_ids=segment_ids, positions=positions)
            if probs.shape[-1] == tokens.shape[1] + 1:
                # An explicit sink slot (the mixer's last column) is kept apart: probs index real keys only.
                rec["sink_probs"].append(probs[..., -1])
                probs = probs[..., :-1]
            rec["probs"].append(probs)
            if heads is not None:
                rec["heads"].append(heads)
        if hooks.block_output is not None:
            out = hooks.block_output(index, out)
        x = out
    rec["hidden"].append(x)
    result: dict[str, Any] = {name: jnp.stack(rec[name]) if rec[name] else None for name in names}
    result["head_out"] = result.pop("heads")
    result.update(logits=model._logits(x), tokens=tokens, mixer=cfg.mixer, has_attention=has_attention)
    return result


def next_token_loss(logits: jax.Array, tokens: jax.Array) -> float:
    """Mean next-token cross-entropy: logits [B, T, V] at t predict tokens [B, T] at t+1 (T-1 targets)."""
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logp, tokens[:, 1:, None].astype(jnp.int32), axis=-1)
    return float(-jnp.mean(picked))
